package io.sparksteward.shim.blob;

import java.util.concurrent.TimeUnit;

/** One upload cap shared by every connection: bytes per second, reserved in steps. */
final class TokenBucket {
  final long rate;
  /** Bytes a connection sends per reservation: about 1/16 s of the rate, 4 KiB to maxStep. */
  final int step;
  private double tokens;
  private long last = System.nanoTime();

  TokenBucket(long rate, int maxStep) {
    this.rate = rate;
    this.step = (int) Math.max(4096, Math.min(maxStep, rate / 16));
    this.tokens = step;
  }

  /** Takes {@code n} bytes' worth, waiting while the bucket is in debt. */
  void take(long n) throws InterruptedException {
    long waitNanos;
    synchronized (this) {
      long now = System.nanoTime();
      tokens = Math.min(step, tokens + (now - last) * (double) rate / 1e9);
      last = now;
      tokens -= n;
      waitNanos = tokens >= 0 ? 0 : (long) (-tokens * 1e9 / rate);
    }
    if (waitNanos > 0) {
      TimeUnit.NANOSECONDS.sleep(waitNanos);
    }
  }
}
