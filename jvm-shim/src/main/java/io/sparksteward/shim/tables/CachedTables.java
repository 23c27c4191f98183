package io.sparksteward.shim.tables;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import java.util.function.Predicate;

import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.ExperimentalMethods;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.runtime.AbstractPartialFunction;

/**
 * Cached tables, called by Python through {@code PythonFacade}: builds the marker DataFrame of a
 * cached table, installs the rule that replaces it, holds the driver runtime's resolver and
 * computes the identity of a plan for caches shared across applications.
 */
public final class CachedTables {
  /** Set by Python's DataFrame.explain on its thread: plan without materializing. */
  static final String EXPLAIN_PROPERTY = "spark.steward.cache.explain";

  private static volatile Function<String, String> resolver;

  private CachedTables() {}

  /** The driver runtime's answer to "what should this query read for table id?". */
  public static void setResolver(Function<String, String> value) {
    resolver = value;
  }

  public static void clearResolver() {
    resolver = null;
  }

  /**
   * A DataFrame over the marker of cached table {@code id}, whose rows are those of
   * {@code source}. Analysis only: nothing runs.
   */
  public static Dataset<Row> marker(SparkSession session, String id, Dataset<Row> source,
      String description) {
    installRule(session);
    LogicalPlan analyzed = source.queryExecution().analyzed();
    CachedTableMarker table = new CachedTableMarker(id, source.schema(), analyzed, description);
    return SparkCompat.ofRows(session,
        DataSourceV2Relation.create(table, scala.Option.empty(), scala.Option.empty()));
  }

  /**
   * {@code ds} with a query execution of its own. Spark keeps the optimized plan of a Dataset
   * for all its later actions; a cached table hands each use a fresh one, so every action asks
   * again what to read (after an invalidation, a fallback or an explain).
   */
  public static Dataset<Row> fresh(Dataset<Row> ds) {
    return SparkCompat.ofRows(ds.sparkSession(), ds.queryExecution().commandExecuted());
  }

  /** The id of the cached table {@code ds} is directly built on, or null. */
  public static String markerId(Dataset<Row> ds) {
    CachedTableMarker marker = CachedTableRule.markerOf(ds.queryExecution().analyzed());
    return marker == null ? null : marker.id();
  }

  static synchronized void installRule(SparkSession session) {
    ExperimentalMethods experimental = session.experimental();
    List<Rule<LogicalPlan>> rules = SparkCompat.extraOptimizations(experimental);
    for (Rule<LogicalPlan> rule : rules) {
      if (rule instanceof CachedTableRule) {
        return;
      }
    }
    rules.add(new CachedTableRule(session));
    SparkCompat.setExtraOptimizations(experimental, rules);
  }

  /**
   * The folder URL to read for table {@code id}, or null to use its original plan. Asks the
   * Python resolver, which materializes the table on its first use.
   */
  private static final ThreadLocal<Boolean> RESOLVING = ThreadLocal.withInitial(() -> false);
  private static volatile java.util.function.Consumer<String> resolved;

  /** Calls {@code then} with a table's id after each time it was resolved (and so ready). */
  public static void onResolved(java.util.function.Consumer<String> then) {
    resolved = then;
  }

  /** Whether this thread is inside {@link #resolve}: materializing a table, maybe. */
  public static boolean resolving() {
    return RESOLVING.get();
  }

  static String resolve(SparkSession session, String id) {
    Function<String, String> current = resolver;
    if (current == null) {
      return null;
    }
    String explain = session.sparkContext().getLocalProperty(EXPLAIN_PROPERTY);
    String answer;
    // Python materializes the table through py4j on this very thread (a callback's calls run
    // on the calling thread): rules that put markers in must leave that job alone.
    boolean outer = !RESOLVING.get();
    RESOLVING.set(true);
    try {
      answer = current.apply(id + "\t" + ("true".equals(explain) ? "explain" : "run"));
    } finally {
      if (outer) {
        RESOLVING.remove();
      }
    }
    java.util.function.Consumer<String> then = resolved;
    if (outer && then != null) {
      then.accept(id);
    }
    if (answer == null || answer.equals("source")) {
      return null;
    }
    if (answer.startsWith("files\t")) {
      return answer.substring("files\t".length());
    }
    throw Errors.illegalState(answer.startsWith("error\t")
        ? answer.substring("error\t".length()) : "unexpected answer for cached table " + id);
  }

  // -- identity of a plan, for shared caches ----------------------------------------------------

  /**
   * The identity of {@code ds}'s plan, with cached-table markers replaced by their sources, for
   * caches shared across applications: see {@link TableIdentity#of}.
   */
  public static String sharedIdentity(Dataset<Row> ds) throws IOException {
    return TableIdentity.of(ds, inlineMarkers(ds.queryExecution().analyzed()));
  }

  private static LogicalPlan inlineMarkers(LogicalPlan plan) {
    return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan p) {
        return CachedTableRule.markerOf(p) != null;
      }

      @Override
      public LogicalPlan apply(LogicalPlan p) {
        LogicalPlan source = inlineMarkers(CachedTableRule.markerOf(p).source());
        List<Attribute> produced = SparkCompat.output(source);
        List<Attribute> wanted = SparkCompat.output(p);
        List<NamedExpression> aliases = new ArrayList<>();
        for (int i = 0; i < wanted.size(); i++) {
          aliases.add(SparkCompat.alias(produced.get(i), wanted.get(i)));
        }
        return SparkCompat.project(aliases, source);
      }
    });
  }

  // -- small Scala interop helper --------------------------------------------------------------

  static <T> scala.Function1<T, Object> fn(Predicate<T> predicate) {
    return predicate::test;
  }
}
