package io.sparksteward.shim.blob;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;

/**
 * At most one warning of a kind per 10 s, with a count of the ones left out: a storm of bad
 * connections must not become a storm in the executor's log.
 */
final class LogThrottle {
  private static final long LOG_EVERY_NANOS = TimeUnit.SECONDS.toNanos(10);

  private final Logger log;
  private final Map<String, Long> last = new HashMap<>();
  private final Map<String, Integer> held = new HashMap<>();

  LogThrottle(Logger log) {
    this.log = log;
  }

  void warn(String kind, String format, Object... args) {
    int suppressed;
    synchronized (this) {
      long now = System.nanoTime();
      Long at = last.get(kind);
      if (at != null && now - at < LOG_EVERY_NANOS) {
        held.merge(kind, 1, Integer::sum);
        return;
      }
      last.put(kind, now);
      Integer h = held.remove(kind);
      suppressed = h == null ? 0 : h;
    }
    log.warn(suppressed == 0 ? format
        : format + " (" + suppressed + " more like it since the last report)", args);
  }
}
