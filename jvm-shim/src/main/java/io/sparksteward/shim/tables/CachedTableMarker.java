package io.sparksteward.shim.tables;

import java.util.EnumSet;
import java.util.Set;

import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The leaf a cached table's DataFrame is built on: a DSv2 table that holds the table id and the
 * original (analyzed) plan, and that is never scanned itself.
 *
 * <p>Every query built on the table keeps this leaf until {@link CachedTableRule} replaces it at
 * optimization time, when the query is about to run, by a Parquet scan of the materialized files
 * or by the original plan. Being a leaf, the optimizer cannot push anything into it, so what is
 * cached is exactly the plan the user cached (the role of Flink's CacheSink).
 */
public final class CachedTableMarker implements SupportsRead {
  private final String id;
  private final StructType schema;
  private final LogicalPlan source;
  private final String description;
  /** The Parquet relation of the folder last resolved: the same folder is listed only once. */
  private volatile Object[] lastRead;

  CachedTableMarker(String id, StructType schema, LogicalPlan source, String description) {
    this.id = id;
    this.schema = schema;
    this.source = source;
    this.description = description;
  }

  /** The relation read from {@code url} last time, or null for another folder. */
  Object lastRelation(String url) {
    Object[] last = lastRead;
    return last != null && last[0].equals(url) ? last[1] : null;
  }

  void rememberRelation(String url, Object relation) {
    lastRead = new Object[] {url, relation};
  }

  public String id() {
    return id;
  }

  /** The analyzed plan of the DataFrame that was cached. */
  public LogicalPlan source() {
    return source;
  }

  @Override
  public String name() {
    return "spark-steward cached table " + id + (description.isEmpty() ? "" : " (" + description + ")");
  }

  StructType structType() {
    return schema;
  }

  /** Abstract in Spark 3.5 and 4.0, which call it; 4.1 on derive it from {@link #columns}. */
  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Column[] columns() {
    return SparkCompat.v2Columns(schema);
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return () -> new Scan() {
      @Override
      public StructType readSchema() {
        return schema;
      }

      @Override
      public String description() {
        return name();
      }

      @Override
      public Batch toBatch() {
        throw Errors.illegalState("cached table " + id + " was planned in a SparkSession "
            + "without the spark-steward rule that reads it; use the table in the session "
            + "that cached it (or call spark_steward.attach on this session first)");
      }
    };
  }
}
