package io.sparksteward.shim.local;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;

import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The executor half of the application-end cleanup of host-local folders: when this executor
 * ends it asks the driver whether the APPLICATION ends, and only on an explicit {@code ending}
 * removes {@code <local dir>/<app id>} on its host ({@link AppFolders#remove}). No
 * answer, an error, or {@code running} leave the folder: the next application that starts on the
 * host, or {@code spark-steward gc --local-dir}, removes it once the application is over.
 *
 * <p>It runs once per executor, from whichever comes first: the plugin's {@code shutdown()}
 * ({@code Executor.stop()} calls it before stopping the executor's RpcEnv) or a JVM shutdown
 * hook. The hook matters in standalone mode: at the application's end the master has the worker
 * terminate the executor process (SIGTERM, then SIGKILL 10 s later) while it may still be in the
 * middle of its own orderly stop, and Spark's own stop hook then returns at once, so without
 * ours the JVM could exit in the middle of the removal. Both wait, bounded, for the one run.
 */
public final class AppEndExecutor {
  private static final Logger LOG = LoggerFactory.getLogger(AppEndExecutor.class);
  /** The key of the plugin's extra conf the driver half sets when the cleanup is on. */
  public static final String ENABLED_KEY = "app-end-cleanup";
  /** How long an ending executor waits for the driver's answer. */
  static final long ANSWER_WAIT_MILLIS = 10_000;
  /** How long it then waits for its removal (and report) to finish. */
  static final long REMOVE_WAIT_MILLIS = 60_000;

  private final PluginContext ctx;
  private final String executorId;
  private final String ownAppId;
  private final AtomicBoolean started = new AtomicBoolean();
  private final CompletableFuture<AppEndProtocol.Decision> decided = new CompletableFuture<>();
  private final CompletableFuture<String> finished = new CompletableFuture<>();
  private final Thread hook;

  private AppEndExecutor(PluginContext ctx) {
    this.ctx = ctx;
    this.executorId = ctx.executorID();
    this.ownAppId = ctx.conf().get("spark.app.id", null);
    this.hook = new Thread(() -> finish("JVM shutdown"), "spark-steward-app-end-hook");
  }

  /** Greets the driver and installs the shutdown hook. */
  public static AppEndExecutor start(PluginContext ctx) {
    AppEndExecutor executor = new AppEndExecutor(ctx);
    try {
      ctx.send(AppEndProtocol.hello(executor.executorId, SparkCompat.hostname(ctx)));
    } catch (Exception e) {
      LOG.info(Errors.PREFIX + "could not tell the driver executor {} started ({}); the driver's "
          + "stop will not wait for it", executor.executorId, e.toString());
    }
    Runtime.getRuntime().addShutdownHook(executor.hook);
    return executor;
  }

  /** {@code ExecutorPlugin.shutdown}. */
  public void shutdown() {
    finish("executor stop");
    try {
      Runtime.getRuntime().removeShutdownHook(hook);
    } catch (IllegalStateException e) {
      // The JVM is shutting down already: the hook runs, finds the work done, and returns.
    }
  }

  /** Runs the ask-and-remove once, and waits for it (bounded) on every call. */
  void finish(String trigger) {
    if (started.compareAndSet(false, true)) {
      Thread worker = new Thread(this::run, "spark-steward-app-end");
      worker.setDaemon(true);
      worker.start();
      LOG.debug(Errors.PREFIX + "executor {} ends ({}): asking the driver whether the "
          + "application ends", executorId, trigger);
    }
    try {
      AppEndProtocol.Decision decision = decided.get(ANSWER_WAIT_MILLIS, TimeUnit.MILLISECONDS);
      if (decision.remove()) {
        finished.get(REMOVE_WAIT_MILLIS, TimeUnit.MILLISECONDS);
      }
    } catch (TimeoutException e) {
      LOG.info(Errors.PREFIX + "executor {} ({}): no answer from the driver within {} ms (or "
          + "removal still running after {} ms); this host's folder of the application stays "
          + "until the next application starts here or `spark-steward gc --local-dir`",
          executorId, trigger, ANSWER_WAIT_MILLIS, REMOVE_WAIT_MILLIS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException e) {
      LOG.info(Errors.PREFIX + "executor {}: application-end cleanup failed", executorId, e);
    }
  }

  private void run() {
    AppEndProtocol.Decision decision = null;
    try {
      Object reply;
      try {
        reply = ctx.ask(AppEndProtocol.ask(executorId));
      } catch (Exception e) {
        decision = AppEndProtocol.Decision.keep("the driver could not be asked (" + e + ")");
        reply = null;
      }
      if (decision == null) {
        decision = AppEndProtocol.decide(reply, ownAppId);
      }
    } finally {
      if (decision == null) {
        decision = AppEndProtocol.Decision.keep("asking the driver failed");
      }
      decided.complete(decision);
    }
    if (!decision.remove()) {
      LOG.info(Errors.PREFIX + "executor {} ends; this host keeps application {}'s folder: {}",
          executorId, ownAppId, decision.keepReason);
      finished.complete("kept");
      return;
    }
    String outcome = "failed: not attempted";
    try {
      outcome = AppFolders.remove(decision.localDir, decision.appId);
      LOG.info(Errors.PREFIX + "application {} ends: executor {} on {}: {}/{}: {}",
          decision.appId, executorId, SparkCompat.hostname(ctx), decision.localDir,
          decision.appId, outcome);
      try {
        ctx.ask(AppEndProtocol.done(executorId, outcome));
      } catch (Exception e) {
        LOG.info(Errors.PREFIX + "executor {} could not report its folder removal to the driver "
            + "({})", executorId, e.toString());
      }
    } finally {
      finished.complete(outcome);
    }
  }
}
