package io.sparksteward.shim;

/**
 * The start of every message the shim writes for users, in exceptions and in log lines. Python
 * finds the shim's own words in a Java exception chain by it ({@code
 * spark_steward.kernel.jvm.JAVA_ERROR_PREFIX}); tests/unit/test_shared_constants.py keeps the two
 * equal and fails when a Java file spells the prefix out instead of naming {@link #PREFIX}.
 *
 * <p>{@link #PREFIX} is a compile-time constant, so {@code PREFIX + "text {}"} is still one
 * constant string (a log format) and every message is byte-identical to the spelled-out one.
 */
final class Messages {
  static final String PREFIX = "spark-steward: ";

  private Messages() {
  }
}
