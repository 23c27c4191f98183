package io.sparksteward.shim.local;

import java.util.List;

import io.sparksteward.shim.kernel.Errors;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver half of the application-end cleanup of host-local folders (see {@link
 * AppEndExecutor} for the executor half and {@link AppEndProtocol} for what they say).
 *
 * <p>It answers an executor's {@code ending?} from the SparkContext's own stopped flag, which
 * {@code SparkContext.stop()} sets before anything else: an executor that ends while the context
 * runs (dynamic allocation, decommission, a kill, a lost host) hears {@code running} and keeps
 * its host's folder for the executors still there. {@code SparkContext.stop()} stops the
 * scheduler (which tells every executor to stop) before it shuts the plugins down and only then
 * its RpcEnv, so {@link #shutdown} can wait, bounded, for the executors it knows to report their
 * folder removed: {@code spark.stop()} returns after the hosts are clean where they can be.
 */
public final class AppEndDriver {
  private static final Logger LOG = LoggerFactory.getLogger(AppEndDriver.class);
  /** How long the driver's stop waits for the executors' reports. */
  static final long WAIT_MILLIS = 10_000;

  private final SparkContext sc;
  private final String localDir;
  private final AppEndTracker tracker = new AppEndTracker();
  private final SparkListener listener;

  private AppEndDriver(SparkContext sc, String localDir) {
    this.sc = sc;
    this.localDir = localDir;
    AppEndTracker t = tracker;
    this.listener = new SparkListener() {
      @Override
      public void onExecutorRemoved(SparkListenerExecutorRemoved e) {
        t.left(e.executorId());
      }
    };
  }

  /**
   * The driver half for {@code sc}, whose executors use the host-local working dir {@code
   * localDir} (Python's {@code StewardConf.local_dir()}, handed over resolved).
   */
  public static AppEndDriver start(SparkContext sc, String localDir) {
    AppEndDriver driver = new AppEndDriver(sc, localDir);
    sc.addSparkListener(driver.listener);
    return driver;
  }

  /** The host-local working dir the executors are told to use (their plugin's extra conf). */
  public String localDir() {
    return localDir;
  }

  /** {@code DriverPlugin.receive}: hello and done are recorded, {@code ending?} answered. */
  public Object receive(Object message) {
    String[] m = AppEndProtocol.parse(message);
    if (m == null) {
      return null;
    }
    switch (m[0]) {
      case AppEndProtocol.HELLO:
        tracker.hello(m[1], m[2]);
        LOG.info(Errors.PREFIX + "executor {} on {} removes the application's folder there when "
            + "the application ends", m[1], m[2]);
        return null;
      case AppEndProtocol.ASK:
        String answer = AppEndProtocol.answer(sc.isStopped(), sc.applicationId(), localDir);
        if (answer.equals(AppEndProtocol.RUNNING)) {
          tracker.left(m[1]);
          LOG.info(Errors.PREFIX + "executor {} ends while the application runs: its host keeps "
              + "the application's folder", m[1]);
        } else {
          tracker.told(m[1]);
        }
        return answer;
      case AppEndProtocol.DONE:
        tracker.done(m[1], m[2]);
        return AppEndProtocol.OK;
      default:
        return null;
    }
  }

  /** Waits, bounded, for the executors' reports and logs what became of each host's folder. */
  public void shutdown() {
    long start = System.nanoTime();
    try {
      tracker.awaitReports(WAIT_MILLIS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      sc.removeSparkListener(listener);
    }
    long waited = (System.nanoTime() - start) / 1_000_000;
    List<String> lines = tracker.summary(WAIT_MILLIS);
    if (!lines.isEmpty()) {
      LOG.info(Errors.PREFIX
          + "application {} ended; host-local folders ({}/{}), after {} ms: {}",
          sc.applicationId(), localDir, sc.applicationId(), waited, String.join("; ", lines));
    }
  }
}
