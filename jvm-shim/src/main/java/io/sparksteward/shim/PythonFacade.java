package io.sparksteward.shim;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.function.Function;

import io.sparksteward.shim.blob.ConnectArtifacts;
import io.sparksteward.shim.checkpoint.CheckpointCleanWatch;
import io.sparksteward.shim.checkpoint.CheckpointData;
import io.sparksteward.shim.checkpoint.SegmentCodec;
import io.sparksteward.shim.checkpoint.SegmentFiles;
import io.sparksteward.shim.kernel.ConnectCommands;
import io.sparksteward.shim.kernel.ConnectHoldings;
import io.sparksteward.shim.kernel.EventBridge;
import io.sparksteward.shim.kernel.RuntimeHost;
import io.sparksteward.shim.kernel.StewardMetrics;
import io.sparksteward.shim.kernel.TaskContextRelay;
import io.sparksteward.shim.streams.StreamFiles;
import io.sparksteward.shim.tables.CachedTables;
import org.apache.spark.SparkContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * The only class of the shim Python calls ({@code spark_steward.kernel.jvm}): one static method
 * per operation, each delegating to the class that implements it. Python reaches it straight
 * through py4j when the shim is on the driver class path (the plugin or {@code spark.jars}),
 * else by reflection on this class loaded from the jar by one class loader per SparkContext, so
 * every class of the shim the driver uses lives in that one loader. Method names are unique (no
 * overloads): the reflective path finds methods by name.
 *
 * <p>Objects returned here ({@link EventBridge}, Datasets, RDDs) are handles for Python to pass
 * back; Python calls no method of the other shim classes. Spark and Hadoop instantiate {@link
 * StewardPlugin}, {@code tables.ReplicaFileSystem} and the {@code streams} checkpoint file
 * managers by name, which is why they are public.
 *
 * <p>With {@link StewardPlugin}, the assembly layer of the shim: the one place (with the
 * deprecated aliases beside it) that imports the capability packages, as Python's top facade
 * does; the kernel ({@code io.sparksteward.shim.kernel}) imports no capability, and no
 * capability another (tests/unit/test_shim_shape.py).
 */
public final class PythonFacade {

  private PythonFacade() {}

  // -- events (EventBridge) ----------------------------------------------------------------------

  /**
   * Installs the event listener for {@code sc} once, holding up to {@code capacity} events for
   * Python, and returns its bridge (idempotent: the plugin's, when it installed one).
   */
  public static EventBridge installEventBridge(SparkContext sc, int capacity) {
    return EventBridge.install(sc, capacity);
  }

  /**
   * Whether a bridge serving {@code sc} is installed already (by the plugin at context start, or
   * an earlier attach): {@link #installEventBridge} then returns that one.
   */
  public static boolean eventBridgeInstalled(SparkContext sc) {
    EventBridge bridge = EventBridge.current();
    return bridge != null && bridge.serves(sc);
  }

  /** Up to {@code max} events as one JSON batch; waits up to {@code waitMillis} for the first. */
  public static String drainEvents(EventBridge bridge, int max, long waitMillis)
      throws InterruptedException {
    return bridge.drain(max, waitMillis);
  }

  /** Waits for Spark's listener bus to hand over every posted event; -1 on timeout. */
  public static long flushEvents(EventBridge bridge, long timeoutMillis) {
    return bridge.flush(timeoutMillis);
  }

  // -- the hosted runtime (RuntimeHost) -------------------------------------------------------

  /** For the runtime the plugin hosts: its SparkContext once built, null after the timeout. */
  public static SparkContext hostedContext(long timeoutMillis) throws InterruptedException {
    return RuntimeHost.awaitContext(timeoutMillis);
  }

  // -- Spark Connect commands (ConnectCommands) -------------------------------------------------

  /** Makes {@code handler} the answer to spark-steward's Connect commands on this server. */
  public static void setConnectCommands(ConnectCommands handler) {
    ConnectCommands.Registry.set(handler);
  }

  /** Drops the handler: Connect commands are refused until a runtime registers again. */
  public static void clearConnectCommands() {
    ConnectCommands.Registry.clear();
  }

  /** The runtime's executor context (JSON) for Connect clients' tasks (TaskContextRelay). */
  public static void publishTaskContext(String json) {
    TaskContextRelay.publish(json);
  }

  /**
   * {blocks, bytes} Connect session {@code sessionId} holds in Spark's caches ({@code
   * df.cache()}, {@code df.localCheckpoint()}), or null on a server without the interceptor.
   */
  public static long[] connectSessionHoldings(String sessionId) {
    return ConnectHoldings.of(sessionId);
  }

  /** What Connect sessions' {@code spark.addArtifacts} left since the last call (JSON). */
  public static String drainConnectArtifacts() {
    return ConnectArtifacts.drain();
  }

  // -- metrics (StewardMetrics) -------------------------------------------------------------------

  /**
   * Python's snapshot of its numbers ({@code name=value} lines) for Spark's metrics sinks; how
   * many names were taken, -1 when the plugin registered no metrics.
   */
  public static long pushMetrics(String snapshot) {
    return StewardMetrics.pushCurrent(snapshot);
  }

  // -- Spark's own checkpoints (CheckpointCleanWatch) --------------------------------------------

  /** Attaches the checkpoint clean watch to {@code sc}'s ContextCleaner; false without one. */
  public static boolean installCleanWatch(SparkContext sc) {
    return CheckpointCleanWatch.install(sc);
  }

  /** Whether {@link #installCleanWatch} has attached the watch to {@code sc}. */
  public static boolean cleanWatchInstalled(SparkContext sc) {
    return CheckpointCleanWatch.installed(sc);
  }

  /** Turns Spark's cleaning of checkpoints on unless the user set it; whether it is on now. */
  public static boolean enableCleanCheckpoints(SparkContext sc) {
    return CheckpointCleanWatch.enableCleanCheckpoints(sc);
  }

  // -- streaming checkpoint locations (StreamFiles) ---------------------------------------------

  /** Makes spark-steward's manager the checkpoint file manager of sessions made from {@code sc}
   *  on, acting on {@code handover} (Python's, encoded); the class name, for sessions that exist
   *  already. */
  public static String installStreamFiles(SparkContext sc, String handover) {
    return StreamFiles.install(sc, handover);
  }

  // -- checkpoint data (CheckpointData) ------------------------------------------------------------

  /** Writes every partition of {@code df} into {@code dirUrl}; the JSON records of the files. */
  public static String writeCheckpointData(Dataset<Row> df, String dirUrl, String attemptTag,
      String codec) {
    return CheckpointData.write(df, dirUrl, attemptTag, codec);
  }

  /** A DataFrame over checkpoint data files listed in {@code files} (lazy). */
  public static Dataset<Row> readCheckpointData(SparkSession spark, String dirUrl, String files,
      String schemaJson) {
    return CheckpointData.read(spark, dirUrl, files, schemaJson);
  }

  // -- cached tables (CachedTables) ----------------------------------------------------------------

  /** Makes {@code resolver} the driver runtime's answer for cached-table queries. */
  public static void setTableResolver(Function<String, String> resolver) {
    CachedTables.setResolver(resolver);
  }

  /** Drops the resolver: queries compute cached tables' original plans. */
  public static void clearTableResolver() {
    CachedTables.clearResolver();
  }

  /** A DataFrame over the marker of cached table {@code id} with the rows of {@code source}. */
  public static Dataset<Row> tableMarker(SparkSession session, String id, Dataset<Row> source,
      String description) {
    return CachedTables.marker(session, id, source, description);
  }

  /** {@code ds} with a query execution of its own. */
  public static Dataset<Row> freshDataset(Dataset<Row> ds) {
    return CachedTables.fresh(ds);
  }

  /** The id of the cached table {@code ds} is directly built on, or null. */
  public static String tableMarkerId(Dataset<Row> ds) {
    return CachedTables.markerId(ds);
  }

  /**
   * ["ok", identity text, then per Python function its command and broadcasts] for shared
   * caches, or ["unsupported", why], framed as one UTF-8 text: see TableIdentity.
   */
  public static byte[] sharedTableIdentity(Dataset<Row> ds) throws IOException {
    // bytes, not a String: py4j unescapes a String's newlines one by one (40 ms for 6,000)
    return CachedTables.sharedIdentity(ds).getBytes(StandardCharsets.UTF_8);
  }

  // -- file-merged checkpoints (SegmentCodec, SegmentFiles) ------------------------------------

  /** The partitions of {@code df} as Arrow IPC streams in pieces of {@code chunkBytes}. */
  public static JavaRDD<byte[]> encodeSegments(Dataset<Row> df, int chunkBytes, String codec) {
    return SegmentCodec.encode(df, chunkBytes, codec);
  }

  /** A DataFrame of {@code schemaJson} over Arrow IPC streams, one per partition (lazy). */
  public static Dataset<Row> decodeSegments(SparkSession spark, JavaRDD<byte[]> streams,
      String schemaJson) {
    return SegmentCodec.decode(spark, streams, schemaJson);
  }

  /** A DataFrame over segments read by the executors' JVMs from Hadoop-readable files. */
  public static Dataset<Row> readSegmentFiles(SparkSession spark, String listing,
      String schemaJson, String label) {
    return SegmentFiles.read(spark, listing, schemaJson, label);
  }
}
