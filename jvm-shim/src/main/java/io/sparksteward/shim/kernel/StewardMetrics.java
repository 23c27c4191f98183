package io.sparksteward.shim.kernel;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import com.codahale.metrics.Counter;
import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;

/**
 * spark-steward's numbers in Spark's metrics system: registered in the driver plugin's {@code
 * PluginContext.metricRegistry()}, so every configured sink (Prometheus servlet, JMX, CSV, ...)
 * reports them as {@code plugin.io.sparksteward.shim.StewardPlugin.<name>} of the driver.
 *
 * <p>Sinks poll metrics on their own threads, so nothing here calls into Python: Python pushes a
 * snapshot of every number ({@link #push}, through {@code PythonFacade.pushMetrics}) from its
 * heartbeat thread and once at {@code spark.stop()}, and the metrics read what was pushed last.
 * Levels (what is held now) are {@link Gauge}s over a map. Totals are Dropwizard {@link
 * Counter}s, as Spark's own totals are (e.g. {@code HiveExternalCatalog.fileCacheHits}), so sinks
 * report them as counts: each push adds the increase of Python's running total since the last
 * push; a total that went down (it cannot, within one application) adds nothing.
 *
 * <p>The names are a fixed, documented list (docs/observability.md), registered before Spark
 * registers the plugin's metrics source; a pushed name not in it is ignored. Only Dropwizard and
 * Java APIs: the class is the same for Spark built with Scala 2.12 or 2.13.
 */
public final class StewardMetrics {

  /** Levels, reported as gauges; kept in the order docs/observability.md lists them. */
  static final String[] GAUGES = {
    "blobs.held", "blobs.bytes",
    "tables.cached", "tables.bytes",
    "checkpoints.pending", "checkpoints.completed", "checkpoints.marked_for_deletion",
    "streams.running",
    "cleanup.pending", "cleanup.given_up",
  };

  /** Running totals, reported as counters. */
  static final String[] COUNTERS = {
    "blobs.transfers.server", "blobs.transfers.ha", "blobs.transfers.linked",
    "blobs.transfers.peers",
    "tables.hits", "tables.misses", "tables.fallbacks",
    "cleanup.retries", "events.dropped",
  };

  private static volatile StewardMetrics current;

  private final Map<String, Long> levels = new ConcurrentHashMap<>();
  private final Map<String, Counter> counters;
  private final Map<String, Long> totals = new ConcurrentHashMap<>();

  private StewardMetrics(MetricRegistry registry) {
    Map<String, Counter> made = new LinkedHashMap<>();
    for (String name : GAUGES) {
      levels.put(name, 0L);
      registry.register(name, (Gauge<Long>) () -> levels.get(name));
    }
    for (String name : COUNTERS) {
      made.put(name, registry.counter(name));
    }
    counters = Collections.unmodifiableMap(made);
  }

  /** Registers every metric in {@code registry} and makes it the one pushes go to. */
  public static synchronized StewardMetrics register(MetricRegistry registry) {
    StewardMetrics metrics = new StewardMetrics(registry);
    current = metrics;
    return metrics;
  }

  /** Stops taking pushes for {@code metrics} (its SparkContext stopped). */
  public static synchronized void unregister(StewardMetrics metrics) {
    if (current == metrics) {
      current = null;
    }
  }

  /**
   * Takes Python's snapshot, one {@code name=value} per line, into the metrics registered last;
   * returns how many names it took, -1 when none are registered (the plugin is not configured,
   * or spark-steward was off when the SparkContext started).
   */
  public static long pushCurrent(String snapshot) {
    StewardMetrics metrics = current;
    return metrics == null ? -1 : metrics.push(snapshot);
  }

  /** See {@link #pushCurrent}; synchronized so two pushes never add the same increase twice. */
  synchronized long push(String snapshot) {
    long taken = 0;
    for (String line : snapshot.split("\n")) {
      int eq = line.indexOf('=');
      if (eq <= 0) {
        continue;
      }
      String name = line.substring(0, eq).trim();
      long value;
      try {
        value = Long.parseLong(line.substring(eq + 1).trim());
      } catch (NumberFormatException e) {
        continue;
      }
      if (levels.containsKey(name)) {
        levels.put(name, value);
        taken++;
      } else if (counters.containsKey(name)) {
        long before = totals.getOrDefault(name, 0L);
        if (value > before) {
          counters.get(name).inc(value - before);
          totals.put(name, value);
        }
        taken++;
      }
    }
    return taken;
  }
}
