package io.sparksteward.shim.kernel;

import java.util.List;

import org.apache.spark.SparkContext;

/**
 * Hands Spark's events to Python. Python pulls batches with {@link #drain} (through {@code
 * PythonFacade.drainEvents}): a plain call from Python into the JVM, so no py4j callback server
 * is needed and Spark's listener thread never waits for Python.
 */
public final class EventBridge {
  private static final String QUEUE = "steward";

  private static volatile EventBridge current;

  private final SparkContext sc;
  private final EventBuffer buffer;
  private volatile boolean stopped;

  private EventBridge(SparkContext sc, EventBuffer buffer) {
    this.sc = sc;
    this.buffer = buffer;
  }

  /**
   * Installs the listener for {@code sc} once, holding up to {@code capacity} events (Python's
   * {@code spark.steward.events.buffer-capacity}, handed over resolved), and returns the bridge;
   * called by the plugin at context start, or by Python's attach when the plugin was not
   * configured.
   */
  public static synchronized EventBridge install(SparkContext sc, int capacity) {
    EventBridge bridge = current;
    if (bridge != null && bridge.sc == sc) {
      return bridge;
    }
    EventBuffer buffer = new EventBuffer(capacity);
    StewardListener listener = new StewardListener(buffer);
    try {
      // A queue of our own: a slow listener elsewhere can neither delay nor drop our events.
      sc.listenerBus().addToQueue(listener, QUEUE);
    } catch (LinkageError | RuntimeException e) {
      sc.addSparkListener(listener);
    }
    bridge = new EventBridge(sc, buffer);
    current = bridge;
    return bridge;
  }

  /** The bridge of the current SparkContext, or null when none was installed. */
  public static EventBridge current() {
    return current;
  }

  /** Whether this bridge serves {@code context}. */
  public boolean serves(SparkContext context) {
    return sc == context;
  }

  /** Returns {@code {"dropped","accepted","stopped","events":[...]}} as one JSON string. */
  public String drain(int max, long waitMillis) throws InterruptedException {
    List<String> events = buffer.drain(max, waitMillis);
    return EventEncoder.batch(events, buffer.dropped(), buffer.accepted(), stopped);
  }

  /**
   * Waits until Spark's listener bus has handed every posted event to our buffer; returns the
   * number of events accepted so far, or -1 on timeout.
   */
  public long flush(long timeoutMillis) {
    if (!stopped) {
      try {
        sc.listenerBus().waitUntilEmpty(timeoutMillis);
      } catch (java.util.concurrent.TimeoutException e) {
        return -1;
      } catch (LinkageError | RuntimeException e) {
        // Bus already stopped (it drains on stop) or not reachable: what was accepted is final.
      }
    }
    return buffer.accepted();
  }

  /**
   * Enqueues an event produced outside Spark's listener bus (such as the ContextCleaner's thread)
   * when this bridge serves {@code source}; never blocks: a full buffer drops and counts it.
   */
  public boolean offerFrom(SparkContext source, EventEncoder.Builder event) {
    return source == sc && buffer.offer(event);
  }

  /**
   * Enqueues an event of the current context produced where no SparkContext is at hand (a
   * checkpoint file manager Spark constructed on the driver); never blocks.
   */
  public boolean offerCurrent(EventEncoder.Builder event) {
    return !stopped && buffer.offer(event);
  }

  public void markStopped() {
    stopped = true;
  }
}
