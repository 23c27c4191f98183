package io.sparksteward.shim.kernel;

import java.lang.reflect.Method;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * Spark Connect's session events ({@code SparkListenerConnectSessionStarted} and {@code
 * ...Closed}, in the spark-connect jar of Spark 4), encoded as {@code session_started} and
 * {@code session_closed} [session_id, user_id]. Matched by class name and read by reflection:
 * the shim does not link against the Connect jar, which Spark 3.5's pip package and drivers
 * without Connect do not have.
 */
final class ConnectSessionEvents {
  private static final String PACKAGE = "org.apache.spark.sql.connect.service.";
  static final String STARTED = PACKAGE + "SparkListenerConnectSessionStarted";
  static final String CLOSED = PACKAGE + "SparkListenerConnectSessionClosed";
  static final String SESSION_STARTED = "session_started";
  static final String SESSION_CLOSED = "session_closed";

  private ConnectSessionEvents() {}

  /** The encoded event, or null when {@code e} is not a Connect session event. */
  static EventEncoder.Builder encode(SparkListenerEvent e) {
    String name = e.getClass().getName();
    boolean started = STARTED.equals(name);
    if (!started && !CLOSED.equals(name)) {
      return null;
    }
    try {
      Class<?> cls = e.getClass();
      long time = ((Number) call(cls, e, "eventTime")).longValue();
      EventEncoder.Builder event = started ? EventEncoder.event(SESSION_STARTED, time)
          : EventEncoder.event(SESSION_CLOSED, time);
      return event
          .str(String.valueOf(call(cls, e, "sessionId")))
          .str(String.valueOf(call(cls, e, "userId")));
    } catch (ReflectiveOperationException | RuntimeException err) {
      // Another Spark's shape of the event: the session is not seen, nothing else breaks.
      return null;
    }
  }

  private static Object call(Class<?> cls, Object target, String method)
      throws ReflectiveOperationException {
    Method m = cls.getMethod(method);
    return m.invoke(target);
  }
}
