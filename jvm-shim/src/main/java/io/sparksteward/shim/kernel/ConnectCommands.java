package io.sparksteward.shim.kernel;

import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The driver runtime's answer to spark-steward's Spark Connect commands (the thin client's
 * calls), implemented in Python ({@code spark_steward.kernel.remote_server}) and handed over
 * through py4j's callback server. The Connect command plugin ({@code
 * io.sparksteward.shim.connect.StewardCommands}, compiled only against Spark lines with a Connect
 * jar) calls it; this side knows no Connect class.
 */
public interface ConnectCommands {

  /**
   * Answers one command of Connect session {@code sessionId} (user {@code userId}, both from
   * the server's own session holder): {@code request} is the client's JSON, {@code input} the
   * DataFrame it names (a classic Dataset in that session) or null. Returns the reply JSON; a
   * DataFrame for the client goes into {@code out} under {@code "dataframe"}.
   */
  String handle(String sessionId, String userId, String request, Object session,
      Object input, byte[] data, Map<String, Object> out);

  /** The registered handler: at most one per JVM, the attached runtime's. */
  final class Registry {
    private static final AtomicReference<ConnectCommands> CURRENT = new AtomicReference<>();

    private Registry() {}

    public static void set(ConnectCommands handler) {
      CURRENT.set(handler);
    }

    /** Drops the handler: commands are refused until a runtime registers again. */
    public static void clear() {
      CURRENT.set(null);
    }

    public static ConnectCommands current() {
      return CURRENT.get();
    }
  }
}
