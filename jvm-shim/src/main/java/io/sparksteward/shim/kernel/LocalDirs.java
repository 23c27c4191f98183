package io.sparksteward.shim.kernel;

import java.util.regex.Pattern;

/**
 * The host-local working dir on the JVM side: which application ids may name a folder in it and
 * whose it is. Where it is, Python decides ({@code StewardConf.local_dir()}) on the driver and
 * hands over resolved ({@link Handover#localDir}): the driver plugin passes it to the executor
 * plugins, Python's own executor side gets it in the executor context. Every capability that
 * touches the dir from a JVM asks here (and {@link PrivateFiles} for how it writes there).
 */
public final class LocalDirs {
  /** {@code config.LOCAL_DIR}'s name, for messages that tell the user which key to change. */
  public static final String LOCAL_DIR_KEY = "spark.steward.local.dir";

  /** {@code applications._APP_ID}: application ids become path segments. */
  private static final Pattern APP_ID = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]{0,200}");

  private LocalDirs() {}

  /** Python's {@code os.getuid()}: the dir is per user, and its owner must be this one. */
  public static long uid() {
    return SparkCompat.processUid();
  }

  /** {@code applications.validate_app_id}'s rule. */
  public static boolean isSafeAppId(String appId) {
    return appId != null && APP_ID.matcher(appId).matches();
  }
}
