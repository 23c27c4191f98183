package io.sparksteward.shim.kernel;

import java.io.IOException;

/**
 * The shim's errors for users, in one place: the prefix every message it writes starts with (in
 * exceptions and in log lines), the exceptions built with it, and the one way to rethrow a checked
 * exception through an interface that declares none.
 *
 * <p>Python finds the shim's own words in a Java exception chain by {@link #PREFIX} ({@code
 * spark_steward.kernel.jvm.JAVA_ERROR_PREFIX}); tests/unit/test_shared_constants.py keeps the two
 * equal and fails when a Java file spells the prefix out instead of naming {@link #PREFIX}.
 *
 * <p>{@link #PREFIX} is a compile-time constant, so {@code PREFIX + "text {}"} is still one
 * constant string (a log format) and every message is byte-identical to the spelled-out one. A
 * capability with a longer prefix of its own (such as {@code "spark-steward: checkpoint data "})
 * declares it as {@code Errors.PREFIX + "..."}.
 */
public final class Errors {
  public static final String PREFIX = "spark-steward: ";

  private Errors() {}

  /** {@code new IOException(PREFIX + message)}. */
  public static IOException io(String message) {
    return new IOException(PREFIX + message);
  }

  /** {@code new IOException(PREFIX + message, cause)}. */
  public static IOException io(String message, Throwable cause) {
    return new IOException(PREFIX + message, cause);
  }

  /** {@code new IllegalStateException(PREFIX + message)}. */
  public static IllegalStateException illegalState(String message) {
    return new IllegalStateException(PREFIX + message);
  }

  /** {@code new IllegalStateException(PREFIX + message, cause)}. */
  public static IllegalStateException illegalState(String message, Throwable cause) {
    return new IllegalStateException(PREFIX + message, cause);
  }

  /** {@code new UnsupportedOperationException(PREFIX + message)}. */
  public static UnsupportedOperationException unsupported(String message) {
    return new UnsupportedOperationException(PREFIX + message);
  }

  /**
   * Throws {@code t} unchanged, checked or not, where the method being implemented declares no
   * checked exception (an Iterator, a Scala trait, a MethodHandle call): the failure Spark reports
   * then reads "java.io.IOException: spark-steward: ...", not a wrapper's words. Written {@code
   * throw Errors.sneaky(e);} so the compiler sees the statement end the block.
   */
  public static RuntimeException sneaky(Throwable t) {
    throw Errors.<RuntimeException>raise(t);
  }

  @SuppressWarnings("unchecked")
  private static <E extends Throwable> E raise(Throwable t) throws E {
    throw (E) t;
  }
}
