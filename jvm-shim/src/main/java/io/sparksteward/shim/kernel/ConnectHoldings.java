package io.sparksteward.shim.kernel;

import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;

/**
 * What a Spark Connect session holds in Spark's own caches ({@code df.cache()}, {@code
 * df.localCheckpoint()}), for {@code spark-steward status}: answered by the Connect side's
 * interceptor ({@code io.sparksteward.shim.connect.SessionCaches}, compiled only against lines
 * with a Connect jar), which registers here; this side knows no Connect class.
 */
public final class ConnectHoldings {
  private static final AtomicReference<Function<String, long[]>> CURRENT =
      new AtomicReference<>();

  private ConnectHoldings() {}

  /** Registers the answer: session id to {cached blocks, their bytes in memory and on disk}. */
  public static void set(Function<String, long[]> holdings) {
    CURRENT.set(holdings);
  }

  /** {blocks, bytes} session {@code sessionId} holds, or null where nobody answers. */
  public static long[] of(String sessionId) {
    Function<String, long[]> holdings = CURRENT.get();
    return holdings == null ? null : holdings.apply(sessionId);
  }
}
