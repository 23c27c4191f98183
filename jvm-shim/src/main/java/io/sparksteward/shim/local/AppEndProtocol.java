package io.sparksteward.shim.local;

import io.sparksteward.shim.kernel.LocalDirs;

/**
 * What the executor and driver halves of the application-end cleanup say to each other through
 * Spark's plugin RPC ({@code PluginContext.send/ask}, answered by {@code DriverPlugin.receive}),
 * and the decisions made from it. Pure: no Spark, no IO.
 *
 * <p>Messages are tab-separated strings (serializable without any class of ours on the other
 * side's class path); the last field takes the rest, so a local dir may hold any character:
 *
 * <ul>
 *   <li>{@code hello <executor> <host>}: sent once by each executor plugin at its start.
 *   <li>{@code ending? <executor>}: asked by an executor that is shutting down. The answer is
 *       {@code ending <app id> <local dir>} when the driver's SparkContext is stopping (the
 *       application ends), else {@code running} (the executor alone goes: dynamic allocation,
 *       decommission, a kill).
 *   <li>{@code done <executor> <outcome>}: asked after acting on {@code ending}, acknowledged
 *       with {@code ok}; the driver's stop waits for these.
 * </ul>
 */
final class AppEndProtocol {
  static final String HELLO = "hello";
  static final String ASK = "ending?";
  static final String ENDING = "ending";
  static final String RUNNING = "running";
  static final String DONE = "done";
  static final String OK = "ok";

  private AppEndProtocol() {}

  static String hello(String executorId, String host) {
    return HELLO + "\t" + executorId + "\t" + host;
  }

  static String ask(String executorId) {
    return ASK + "\t" + executorId;
  }

  static String done(String executorId, String outcome) {
    return DONE + "\t" + executorId + "\t" + outcome;
  }

  /** The driver's answer to {@code ending?}: {@code ending} only while its context stops. */
  static String answer(boolean contextStopped, String appId, String localDir) {
    if (contextStopped && localDir != null && LocalDirs.isSafeAppId(appId)) {
      return ENDING + "\t" + appId + "\t" + localDir;
    }
    return RUNNING;
  }

  /** A message split into its kind and fields ({@code null} parts when it is not ours). */
  static String[] parse(Object message) {
    if (!(message instanceof String)) {
      return null;
    }
    String[] parts = ((String) message).split("\t", 3);
    switch (parts[0]) {
      case HELLO:
      case DONE:
        return parts.length == 3 ? parts : null;
      case ASK:
        return parts.length == 2 ? parts : null;
      default:
        return null;
    }
  }

  /** What an executor does with the driver's answer. */
  static final class Decision {
    /** The application's id and working dir when the folder goes; null when it stays. */
    final String appId;
    final String localDir;
    /** Why it stays (null when it goes). */
    final String keepReason;

    private Decision(String appId, String localDir, String keepReason) {
      this.appId = appId;
      this.localDir = localDir;
      this.keepReason = keepReason;
    }

    boolean remove() {
      return keepReason == null;
    }

    static Decision keep(String reason) {
      return new Decision(null, null, reason);
    }
  }

  /**
   * Removes only on an explicit {@code ending} for this executor's own application with a safe
   * id and a local dir; anything else (no answer, {@code running}, garbage, another
   * application's id) keeps the folder.
   *
   * @param ownAppId the executor's {@code spark.app.id}, or null when it does not know it
   */
  static Decision decide(Object reply, String ownAppId) {
    if (reply == null) {
      return Decision.keep("the driver gave no answer");
    }
    if (!(reply instanceof String)) {
      return Decision.keep("the driver's answer is not understood: " + reply.getClass().getName());
    }
    String text = (String) reply;
    if (text.equals(RUNNING)) {
      return Decision.keep("the application is still running: only this executor ends");
    }
    String[] parts = text.split("\t", 3);
    if (parts.length != 3 || !parts[0].equals(ENDING)) {
      return Decision.keep("the driver's answer is not understood: " + abbreviate(text));
    }
    String appId = parts[1];
    String localDir = parts[2];
    if (!LocalDirs.isSafeAppId(appId)) {
      return Decision.keep("application id '" + abbreviate(appId) + "' is not a safe path segment");
    }
    if (ownAppId != null && !ownAppId.isEmpty() && !ownAppId.equals(appId)) {
      return Decision.keep("the driver answered for application " + appId + ", this executor "
          + "belongs to " + ownAppId);
    }
    if (localDir.isEmpty()) {
      return Decision.keep("the driver named no local dir");
    }
    return new Decision(appId, localDir, null);
  }

  private static String abbreviate(String text) {
    return text.length() <= 200 ? text : text.substring(0, 200) + "...";
  }
}
