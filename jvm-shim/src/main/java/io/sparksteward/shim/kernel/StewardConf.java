package io.sparksteward.shim.kernel;

/**
 * The {@code spark.steward.*} facts the JVM reads before Python has attached: the master switch
 * ({@code config.ENABLED}), read by the plugin at context start and by the streaming checkpoint
 * manager in every session, and the one way a spark-steward boolean is parsed on this side.
 */
public final class StewardConf {
  /** {@code config.ENABLED}: the shim does nothing unless it is true. */
  public static final String ENABLED_KEY = "spark.steward.enabled";
  public static final String ENABLED_DEFAULT = "false";

  private StewardConf() {}

  /**
   * A spark-steward boolean exactly as Python's config parses it and Spark parses its own keys:
   * {@code true}/{@code false} in any case, blanks around ignored; anything else stops the start
   * with one line naming the key and value, as Python's ConfigError does.
   */
  public static boolean parseBool(String key, String raw) {
    String value = raw.trim();
    if (value.equalsIgnoreCase("true")) {
      return true;
    }
    if (value.equalsIgnoreCase("false")) {
      return false;
    }
    throw new IllegalArgumentException(
        key + "='" + raw + "' is not valid: expected true or false");
  }
}
