package io.sparksteward.shim.kernel;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkContext;
import org.apache.spark.api.python.Py4JServer;
import org.apache.spark.api.python.PythonUtils;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationStart;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hosts spark-steward's driver runtime beside a driver no Python builds: a Spark Connect
 * server, or any JVM-launched driver ({@code spark-submit --class}). A PySpark driver is never
 * hosted ({@link #builtByPython}): its own Python runs the runtime. The driver plugin
 * starts it as the SparkContext starts; it opens a py4j gateway into this JVM (Spark's own {@link
 * Py4JServer}, loopback only, with a secret) and runs {@code python -m spark_steward.kernel.host},
 * which connects back, waits for the context ({@link #awaitContext}) and attaches the runtime to
 * it.
 *
 * <p>The process is watched: when it dies while the application runs, one WARN line says so with
 * its exit status and it is started again after a back-off (1 s doubling to 30 s), for as long as
 * the application runs: its death never stops the driver. The pipe on its stdin is its lifeline:
 * {@link #stop} writes {@code stop} there and waits for the runtime to detach (the application's
 * end); a driver that dies closes the pipe, and the runtime then exits without touching the JVM,
 * leaving what it owned to {@code spark-steward gc}, as after any crashed driver.
 */
public final class RuntimeHost {
  private static final Logger LOG = LoggerFactory.getLogger(RuntimeHost.class);
  /** The module Python runs ({@code spark_steward.kernel.host}). */
  static final String MODULE = "spark_steward.kernel.host";
  /** What {@link #stop} writes: the runtime detaches as at the application's end. */
  static final String STOP_LINE = "stop";
  /** {@code host.DRIVER_PID_ENV}: the runtime checks it is this JVM's child and names it. */
  static final String DRIVER_PID_ENV = "SPARK_STEWARD_DRIVER_PID";
  static final long FIRST_BACKOFF_MILLIS = 1000;
  static final long MAX_BACKOFF_MILLIS = 30_000;
  /** A runtime that ran this long before dying restarts after the first back-off again. */
  static final long STABLE_MILLIS = 60_000;
  /** How long the application's end waits for the runtime to detach (Python's own stop is 30 s). */
  public static final long STOP_TIMEOUT_MILLIS = 60_000;

  private static volatile RuntimeHost current;

  private final SparkContext sc;
  private final String python;
  /** The gateway of the running process: a new one for each start (a shut-down one is dead). */
  private Py4JServer gateway;
  private final Object lock = new Object();
  private Process process;
  private OutputStream lifeline;
  private boolean stopping;
  private boolean contextReady;
  private int starts;
  private Thread watcher;

  private RuntimeHost(SparkContext sc, String python) {
    this.sc = sc;
    this.python = python;
  }

  /**
   * Starts hosting the runtime for {@code sc} with {@code python} (the driver's PySpark Python):
   * gateway and process on a daemon thread. Never throws: what fails there is logged and tried
   * again; the driver runs on meanwhile.
   */
  public static synchronized RuntimeHost start(SparkContext sc, String python) {
    if (current != null) {
      current.stop(0);
    }
    RuntimeHost host = new RuntimeHost(sc, python);
    current = host;
    // Posted as the context's constructor ends: from then on the runtime may use it.
    sc.addSparkListener(new SparkListener() {
      @Override
      public void onApplicationStart(SparkListenerApplicationStart event) {
        host.contextReady();
      }
    });
    host.watcher = new Thread(host::watch, "spark-steward-runtime-host");
    host.watcher.setDaemon(true);
    host.watcher.start();
    return host;
  }

  private void contextReady() {
    synchronized (lock) {
      contextReady = true;
      lock.notifyAll();
    }
  }

  /**
   * For the hosted Python: the SparkContext to attach to, once it is fully built; null when
   * {@code timeoutMillis} passed first or the host stops.
   */
  public static SparkContext awaitContext(long timeoutMillis) throws InterruptedException {
    RuntimeHost host = current;
    if (host == null) {
      return null;
    }
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
    synchronized (host.lock) {
      while (!host.contextReady && !host.stopping) {
        long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
        if (left <= 0) {
          return null;
        }
        host.lock.wait(left);
      }
      return host.stopping ? null : host.sc;
    }
  }

  /** {@code Process.pid()} where the JVM has it (9 and later; the shim builds for 8), else -1. */
  static long pidOf(Process process) {
    try {
      return ((Number) Process.class.getMethod("pid").invoke(process)).longValue();
    } catch (ReflectiveOperationException | RuntimeException e) {
      return -1;
    }
  }

  /** This JVM's pid ({@code ProcessHandle}, Java 9 and later), else -1. */
  static long driverPid() {
    try {
      Class<?> handle = Class.forName("java.lang.ProcessHandle");
      Object current = handle.getMethod("current").invoke(null);
      return ((Number) handle.getMethod("pid").invoke(current)).longValue();
    } catch (ReflectiveOperationException | RuntimeException e) {
      return -1;
    }
  }

  /**
   * Whether the SparkContext being built on this thread is built by a Python caller through
   * py4j (a PySpark driver: pyspark's shell or script, {@code spark.api.mode=connect} with a
   * local master), whose own Python runs the runtime in-process or attaches it explicitly. A
   * Connect server or a {@code spark-submit --class} driver builds it with no py4j frame.
   */
  public static boolean builtByPython() {
    for (StackTraceElement frame : Thread.currentThread().getStackTrace()) {
      if (frame.getClassName().startsWith("py4j.")) {
        return true;
      }
    }
    return false;
  }

  /**
   * Tells the runtime to detach (it runs its services' last words and stops them, as at the
   * end of a classic application), waits up to {@code timeoutMillis}, then kills what is left
   * and closes the gateway.
   */
  public void stop(long timeoutMillis) {
    end(true, timeoutMillis);
  }

  /** Ends hosting: with {@code detach}, as {@link #stop}; without, kills the runtime at once
   * (a plugin whose driver failed to start, or a second context replacing the first). */
  private void end(boolean detach, long timeoutMillis) {
    Process running;
    synchronized (lock) {
      if (stopping) {
        return;
      }
      stopping = true;
      lock.notifyAll();
      running = process;
      closeLifeline(detach);
    }
    try {
      if (running != null && !detach) {
        running.destroyForcibly();
        running.waitFor(10, TimeUnit.SECONDS);
      } else if (running != null && !running.waitFor(timeoutMillis, TimeUnit.MILLISECONDS)) {
        LOG.warn(Errors.PREFIX + "the driver runtime (pid {}) did not detach within {} ms; "
            + "killing it", pidOf(running), timeoutMillis);
        running.destroyForcibly();
        running.waitFor(5, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      running.destroyForcibly();
      Thread.currentThread().interrupt();
    } finally {
      if (watcher != null) {
        watcher.interrupt();
      }
      synchronized (lock) {
        closeGateway();
      }
      synchronized (RuntimeHost.class) {
        if (current == this) {
          current = null;
        }
      }
    }
  }

  private void closeLifeline(boolean sayStop) {
    if (lifeline == null) {
      return;
    }
    try {
      if (sayStop) {
        lifeline.write((STOP_LINE + "\n").getBytes(StandardCharsets.UTF_8));
        lifeline.flush();
      }
      lifeline.close();
    } catch (IOException e) {
      // The process is gone already: nothing to tell it.
    }
    lifeline = null;
  }

  /** The watcher thread: starts the process, restarts it whenever it dies before the stop. */
  private void watch() {
    long backoff = FIRST_BACKOFF_MILLIS;
    while (true) {
      Process started;
      synchronized (lock) {
        if (stopping) {
          return;
        }
        try {
          process = launch();
        } catch (IOException e) {
          process = null;
          LOG.warn(Errors.PREFIX + "could not start the driver runtime ({} -m {}): {}; trying "
              + "again in {} s. Set spark.pyspark.driver.python to a Python with spark-steward "
              + "and pyspark installed", python, MODULE, e.getMessage(), backoff / 1000);
        }
        started = process;
        if (started != null) {
          starts++;
          lifeline = started.getOutputStream();
          if (starts > 1) {
            LOG.warn(Errors.PREFIX + "driver runtime started again (pid {}, start {})",
                pidOf(started), starts);
          } else {
            LOG.info(Errors.PREFIX + "driver runtime started beside this driver (pid {})",
                pidOf(started));
          }
        }
      }
      long began = System.nanoTime();
      if (started != null) {
        forwardOutput(started);
        int status;
        try {
          status = started.waitFor();
        } catch (InterruptedException e) {
          return;  // stop() interrupts only after the process ended or was killed
        }
        // What the dead runtime handed the JVM is stale: its callbacks answer no more, and its
        // blob server's port and token are gone. Its successor hands over its own.
        ConnectCommands.Registry.clear();
        TaskContextRelay.publish(null);
        synchronized (lock) {
          closeLifeline(false);
          if (stopping) {
            return;
          }
        }
        if (System.nanoTime() - began > TimeUnit.MILLISECONDS.toNanos(STABLE_MILLIS)) {
          backoff = FIRST_BACKOFF_MILLIS;
        }
        LOG.warn(Errors.PREFIX + "the driver runtime (pid {}) exited with status {} while the "
            + "application runs; starting it again in {} s (the driver is not affected)",
            pidOf(started), status, backoff / 1000);
      }
      synchronized (lock) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoff);
        try {
          while (!stopping) {
            long left = TimeUnit.NANOSECONDS.toMillis(until - System.nanoTime());
            if (left <= 0) {
              break;
            }
            lock.wait(left);
          }
        } catch (InterruptedException e) {
          return;
        }
      }
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MILLIS);
    }
  }

  /** Under {@code lock}. */
  private void closeGateway() {
    if (gateway != null) {
      try {
        gateway.shutdown();
      } catch (RuntimeException e) {
        LOG.debug("py4j gateway shutdown: {}", e.toString());
      }
      gateway = null;
    }
  }

  /** Under {@code lock}: a new gateway (loopback, a new secret), then the process on it. */
  private Process launch() throws IOException {
    closeGateway();
    try {
      gateway = new Py4JServer(sc.conf());
      gateway.start();
    } catch (RuntimeException e) {
      gateway = null;
      throw new IOException("no py4j gateway into the driver: " + e, e);
    }
    ProcessBuilder builder = new ProcessBuilder(python, "-m", MODULE);
    Map<String, String> env = builder.environment();
    env.put("PYSPARK_GATEWAY_PORT", String.valueOf(gateway.getListeningPort()));
    env.put("PYSPARK_GATEWAY_SECRET", gateway.secret());
    // py4j's two transports: Python must speak the one Spark's Py4JServer chose from this.
    String pin = System.getenv("PYSPARK_PIN_THREAD");
    env.put("PYSPARK_PIN_THREAD", pin == null ? "true" : pin);
    env.put("SPARK_STEWARD_AUTOLOAD", "0");
    env.put(DRIVER_PID_ENV, String.valueOf(driverPid()));
    // A Connect server's environment may say "connect"; the runtime needs the classic API.
    env.remove("SPARK_REMOTE");
    env.remove("SPARK_CONNECT_MODE_ENABLED");
    env.put("PYTHONUNBUFFERED", "1");
    // Spark's own order (PythonRunner): Spark's Python first, then the caller's.
    String sparkPath = PythonUtils.sparkPythonPath();
    String userPath = env.get("PYTHONPATH");
    env.put("PYTHONPATH", userPath == null || userPath.isEmpty() ? sparkPath
        : sparkPath + File.pathSeparator + userPath);
    builder.redirectErrorStream(true);
    return builder.start();
  }

  /** Python's own logs go to log4j through the gateway; what reaches stdout/stderr is rarer. */
  private static void forwardOutput(Process process) {
    Thread reader = new Thread(() -> {
      try (BufferedReader lines = new BufferedReader(
          new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        for (String line; (line = lines.readLine()) != null; ) {
          LOG.warn("spark-steward runtime (pid {}): {}", pidOf(process), line);
        }
      } catch (IOException e) {
        // The process ended.
      }
    }, "spark-steward-runtime-output");
    reader.setDaemon(true);
    reader.start();
  }
}
