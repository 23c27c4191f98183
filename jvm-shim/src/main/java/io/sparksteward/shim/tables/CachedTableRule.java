package io.sparksteward.shim.tables;

import java.util.ArrayList;
import java.util.List;

import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;

import scala.runtime.AbstractPartialFunction;

/**
 * Replaces each {@link CachedTableMarker} leaf when a query is optimized: asks the driver's
 * Python runtime (which materializes the table on its first use and verifies its files), then
 * puts in a Parquet scan of the files, or the optimized original plan when the table is used
 * uncached. Runs in the session's "User Provided Optimizers" batch, so it needs no static conf.
 *
 * <p>The replacement keeps the marker's output attributes (same expression ids), so every
 * operator above it resolves unchanged.
 */
public final class CachedTableRule extends Rule<LogicalPlan> {
  private final SparkSession session;

  CachedTableRule(SparkSession session) {
    this.session = session;
  }

  @Override
  public String ruleName() {
    return "io.sparksteward.shim.CachedTableRule";
  }

  static CachedTableMarker markerOf(LogicalPlan plan) {
    Table table = null;
    if (plan instanceof DataSourceV2ScanRelation) {
      table = ((DataSourceV2ScanRelation) plan).relation().table();
    } else if (plan instanceof DataSourceV2Relation) {
      table = ((DataSourceV2Relation) plan).table();
    }
    return table instanceof CachedTableMarker ? (CachedTableMarker) table : null;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (plan.find(CachedTables.fn(p -> markerOf(p) != null)).isEmpty()) {
      return plan;
    }
    return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan p) {
        return markerOf(p) != null;
      }

      @Override
      public LogicalPlan apply(LogicalPlan p) {
        return replace(markerOf(p), p);
      }
    });
  }

  private LogicalPlan replace(CachedTableMarker marker, LogicalPlan leaf) {
    List<AttributeReference> output = new ArrayList<>();
    for (Attribute a : SparkCompat.output(leaf)) {
      output.add((AttributeReference) a);
    }
    String url = CachedTables.resolve(session, marker.id());
    if (url != null) {
      return filesRelation(marker, url, output);
    }
    LogicalPlan optimized = session.sessionState().optimizer().execute(marker.source());
    List<NamedExpression> aliases = new ArrayList<>();
    List<Attribute> produced = SparkCompat.output(optimized);
    for (int i = 0; i < output.size(); i++) {
      aliases.add(SparkCompat.alias(produced.get(i), output.get(i)));
    }
    return SparkCompat.project(aliases, optimized);
  }

  /**
   * A scan of the Parquet folder {@code url} with the marker's attributes. The folder of one
   * materialization never changes (the driver checked it against its manifest just now), so its
   * relation and file listing are made once and reused by every later query.
   */
  private LogicalPlan filesRelation(CachedTableMarker marker, String url,
      List<AttributeReference> output) {
    LogicalRelation relation = (LogicalRelation) marker.lastRelation(url);
    if (relation == null) {
      LogicalPlan read = session.read().schema(marker.structType())
          .option("parquet.page.verify-checksum.enabled", "true")
          .parquet(url).queryExecution().analyzed();
      if (!(read instanceof LogicalRelation)) {
        throw Errors.illegalState("reading " + url
            + " gave an unexpected plan " + read.nodeName());
      }
      relation = (LogicalRelation) read;
      marker.rememberRelation(url, relation);
    }
    return SparkCompat.logicalRelation(relation, output);
  }
}
