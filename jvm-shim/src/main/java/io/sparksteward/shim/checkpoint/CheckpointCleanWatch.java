package io.sparksteward.shim.checkpoint;

import java.lang.ref.WeakReference;

import io.sparksteward.shim.kernel.EventBridge;
import io.sparksteward.shim.kernel.EventEncoder;
import org.apache.spark.CleanerListener;
import org.apache.spark.ContextCleaner;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;

import scala.Option;

/**
 * Tells Python when Spark's ContextCleaner has cleaned a reliable RDD checkpoint.
 *
 * <p>Spark registers a checkpoint for cleaning only when
 * {@code spark.cleaner.referenceTracking.cleanCheckpoints} is true in the live conf at the moment
 * the checkpoint data is <em>written</em> (ReliableRDDCheckpointData.doCheckpoint); once the
 * checkpointed RDD is garbage collected on the JVM, the cleaner deletes
 * {@code <current checkpoint dir>/rdd-<id>} and then calls {@code checkpointCleaned(id)} on its
 * listeners, on the cleaner's own thread. This class attaches such a listener and forwards
 * {@code checkpoint_cleaned [rdd_id]} to the current {@link EventBridge}; it never blocks the
 * cleaner: the bridge's buffer drops (and counts) instead of waiting.
 *
 * <p>Python calls {@link #install} and, when it wants Spark to clean, {@link
 * #enableCleanCheckpoints} at attach ({@code spark_steward.checkpoint.spark_checkpoints}), through
 * {@code PythonFacade}.
 */
public final class CheckpointCleanWatch {
  static final String CLEAN_CHECKPOINTS = "spark.cleaner.referenceTracking.cleanCheckpoints";
  static final String EVENT = "checkpoint_cleaned";
  static final String RDD_EVENT = "rdd_cleaned";

  /** The context the listener was attached to; weak so a stopped context can be collected. */
  private static WeakReference<SparkContext> watched = new WeakReference<>(null);

  private CheckpointCleanWatch() {}

  /**
   * Attaches the listener to {@code sc}'s ContextCleaner once per context. Returns false when
   * the context has no cleaner ({@code spark.cleaner.referenceTracking=false}).
   */
  public static synchronized boolean install(SparkContext sc) {
    if (watched.get() == sc) {
      return true;
    }
    Option<ContextCleaner> cleaner = sc.cleaner();
    if (cleaner.isEmpty()) {
      return false;
    }
    cleaner.get().attachListener(new Listener(sc));
    watched = new WeakReference<>(sc);
    return true;
  }

  /** Whether {@link #install} has attached the listener to {@code sc}. */
  public static synchronized boolean installed(SparkContext sc) {
    return watched.get() == sc;
  }

  /**
   * Turns {@code spark.cleaner.referenceTracking.cleanCheckpoints} on in the live conf unless the
   * user set it (either way). Returns whether Spark will now register checkpoints written from
   * here on for cleaning: false when the user set it false or the context has no cleaner.
   */
  public static boolean enableCleanCheckpoints(SparkContext sc) {
    if (sc.cleaner().isEmpty()) {
      return false;
    }
    SparkConf conf = sc.conf();
    if (!conf.contains(CLEAN_CHECKPOINTS)) {
      conf.set(CLEAN_CHECKPOINTS, "true");
      return true;
    }
    try {
      return conf.getBoolean(CLEAN_CHECKPOINTS, false);
    } catch (RuntimeException e) {
      return false;  // unparsable: Spark will fail on it at checkpoint time, not clean
    }
  }

  /** Runs on the ContextCleaner's thread: encode and offer, nothing else. */
  static final class Listener implements CleanerListener {
    private final WeakReference<SparkContext> sc;

    Listener(SparkContext sc) {
      this.sc = new WeakReference<>(sc);
    }

    @Override
    public void checkpointCleaned(long rddId) {
      offer(EVENT, rddId); // a missed one is a leaked folder, cleaned at stop or by gc
    }

    private void offer(String event, long rddId) {
      try {
        EventBridge bridge = EventBridge.current();
        SparkContext context = sc.get();
        if (bridge != null && context != null) {
          bridge.offerFrom(context,
              EventEncoder.event(event, System.currentTimeMillis()).num(rddId));
        }
      } catch (RuntimeException | LinkageError ignored) {
        // Never disturb Spark's cleaner.
      }
    }

    /** Forwarded too: a DataFrame checkpoint served by the store registers its RDD with the
     *  cleaner, and its entry is discarded once Spark cleans that RDD. */
    @Override
    public void rddCleaned(int rddId) {
      offer(RDD_EVENT, rddId); // a missed one leaves the checkpoint until stop
    }

    @Override
    public void shuffleCleaned(int shuffleId) {}

    @Override
    public void broadcastCleaned(long broadcastId) {}

    @Override
    public void accumCleaned(long accId) {}
  }
}
