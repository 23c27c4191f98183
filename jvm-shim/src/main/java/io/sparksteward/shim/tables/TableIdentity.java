package io.sparksteward.shim.tables;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.attribute.FileTime;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TimeZone;
import java.util.TreeMap;
import java.util.function.Supplier;

import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileChecksum;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.api.python.PythonBroadcast;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.internal.config.ConfigEntry;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PythonFuncExpression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.internal.SQLConf$;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Tuple2;
import scala.runtime.AbstractFunction0;

/**
 * The identity of a plan for cached tables shared across applications: a text equal for two
 * plans only when they compute the same rows. It covers the canonicalized plan (printed without
 * any truncation), the output schema, every file relation's format, options and schemas, every
 * input file's identity (see {@link #fileIdentity}), the rows of local relations, every SQL
 * configuration value that can change a result, and, handed to Python, the pickled command and
 * broadcasts of every Python function (whose code Python identifies, including functions pickled
 * by reference). A plan whose rows it cannot pin down gets a reason instead, and is not shared.
 */
final class TableIdentity {
  private static final Logger LOG = LoggerFactory.getLogger(TableIdentity.class);
  /** Input files without an identity a same-size rewrite cannot fool are hashed up to this. */
  static final long HASH_LIMIT_BYTES = 64L << 20;

  /**
   * SQL configuration keys that change how fast a plan runs, never its rows: left out of the
   * identity so that applications tuned differently still share. Everything else under
   * {@code spark.sql.} that differs from its default is part of the identity
   * (docs/cached-tables.md).
   */
  static final List<String> PERFORMANCE_PREFIXES = Collections.unmodifiableList(Arrays.asList(
      "spark.sql.adaptive.", "spark.sql.ui.", "spark.sql.codegen.", "spark.sql.cbo.",
      "spark.sql.statistics.", "spark.sql.inMemoryColumnarStorage.", "spark.sql.streaming.",
      "spark.sql.sources.parallelPartitionDiscovery."));
  static final List<String> PERFORMANCE_KEYS = Collections.unmodifiableList(Arrays.asList(
      "spark.sql.shuffle.partitions", "spark.sql.autoBroadcastJoinThreshold",
      "spark.sql.broadcastTimeout", "spark.sql.files.maxPartitionBytes",
      "spark.sql.files.openCostInBytes", "spark.sql.files.minPartitionNum",
      "spark.sql.files.maxPartitionNum", "spark.sql.leafNodeDefaultParallelism",
      "spark.sql.execution.arrow.maxRecordsPerBatch", "spark.sql.execution.arrow.pyspark.enabled",
      "spark.sql.execution.arrow.pyspark.fallback.enabled", "spark.sql.join.preferSortMergeJoin",
      "spark.sql.warehouse.dir", "spark.sql.debug.maxToStringFields",
      "spark.sql.maxPlanStringLength", "spark.sql.maxMetadataStringLength"));

  /** The session's Hadoop configuration, made only for files outside the local file system. */
  private final Supplier<Configuration> hadoopConf;
  private final Map<String, FileSystem> fileSystems = new HashMap<>();
  private final List<String> parts = new ArrayList<>();
  /** Per Python function: its pickled command in base64, then "id=sha256,..." of its broadcasts. */
  private final List<String> python = new ArrayList<>();
  private long hashedBytes;
  private String problem;

  private TableIdentity(Supplier<Configuration> hadoopConf) {
    this.hadoopConf = hadoopConf;
  }

  /**
   * ["ok", SHA-256 of the text, command, broadcasts, ...] for a plan that can be shared
   * ({@code plan} with cached-table markers already inlined), or ["unsupported", reason], framed
   * by {@link #frame} (one string crosses py4j: a list's elements cost a round trip each).
   */
  static String of(Dataset<Row> ds, LogicalPlan plan) throws IOException {
    SQLConf conf = ds.sparkSession().sessionState().conf();
    Configuration[] made = new Configuration[1];
    TableIdentity identity = new TableIdentity(() -> {
      if (made[0] == null) {
        made[0] = ds.sparkSession().sessionState().newHadoopConf();
      }
      return made[0];
    });
    identity.visit(plan);
    List<String> out = new ArrayList<>();
    if (identity.problem != null) {
      out.add("unsupported");
      out.add(identity.problem);
      return frame(out);
    }
    Collections.sort(identity.parts);
    StringBuilder text = new StringBuilder();
    text.append("spark ").append(SparkCompat.sparkVersion()).append('\n');
    text.append("schema ").append(ds.schema().json()).append('\n');
    for (String line : settings(conf)) {
      text.append(line).append('\n');
    }
    text.append(untruncatedTree(conf, plan.canonicalized())).append('\n');
    text.append(String.join("\n", identity.parts));
    out.add("ok");
    // its digest, not the text (~10 KB with 50 files): py4j's answers past 8 KB wait out a
    // delayed ACK (about 40 ms); the text itself is logged at DEBUG
    if (LOG.isDebugEnabled()) {
      LOG.debug("shared table identity:\n" + text);
    }
    MessageDigest digest = sha256();
    digest.update(text.toString().getBytes(StandardCharsets.UTF_8));
    out.add(Checksums.hex(digest.digest()));
    out.addAll(identity.python);
    return frame(out);
  }

  /** "count\n" then "length\nitem" for each item, lengths in code points (as Python counts). */
  static String frame(List<String> items) {
    StringBuilder out = new StringBuilder().append(items.size()).append('\n');
    for (String item : items) {
      out.append(item.codePointCount(0, item.length())).append('\n').append(item);
    }
    return out.toString();
  }

  /**
   * Every SQL configuration value that can change a result: each {@code spark.sql.} key set to
   * something other than its default, less {@link #PERFORMANCE_KEYS}; and the effective values
   * whose defaults come from the environment rather than from Spark's version (the session time
   * zone defaults to the JVM's, ANSI mode to SPARK_ANSI_SQL_MODE, some defaults to testing mode).
   */
  static List<String> settings(SQLConf conf) {
    Map<String, String> chosen = new TreeMap<>();
    for (Tuple2<String, String> kv : SparkCompat.<Tuple2<String, String>>list(conf.getAllConfs())) {
      String key = kv._1();
      if (!key.startsWith("spark.sql.") || isPerformanceKey(key)) {
        continue;
      }
      ConfigEntry<?> entry = SQLConf$.MODULE$.getConfigEntry(key);
      if (entry != null && kv._2().equals(entry.defaultValueString())) {
        continue;
      }
      chosen.put(key, kv._2());
    }
    List<String> out = new ArrayList<>();
    for (Map.Entry<String, String> e : chosen.entrySet()) {
      out.add("conf " + e.getKey() + "=" + e.getValue());
    }
    out.add("env timeZone=" + conf.sessionLocalTimeZone() + " jvmTimeZone="
        + TimeZone.getDefault().getID() + " ansi=" + conf.ansiEnabled() + " testing="
        + org.apache.spark.util.Utils.isTesting() + " locale=" + Locale.getDefault());
    return out;
  }

  static boolean isPerformanceKey(String key) {
    if (PERFORMANCE_KEYS.contains(key)) {
      return true;
    }
    for (String prefix : PERFORMANCE_PREFIXES) {
      if (key.startsWith(prefix)) {
        return true;
      }
    }
    return false;
  }

  /**
   * The plan's tree string with no field list, expression or plan text cut short: with the
   * defaults (25 fields) two plans differing only past the 25th column printed the same.
   */
  private static String untruncatedTree(SQLConf session, LogicalPlan plan) {
    SQLConf wide = session.clone();
    wide.setConfString("spark.sql.debug.maxToStringFields", String.valueOf(Integer.MAX_VALUE));
    wide.setConfString("spark.sql.maxPlanStringLength", String.valueOf(Integer.MAX_VALUE - 15));
    return SQLConf$.MODULE$.withExistingConf(wide, new AbstractFunction0<String>() {
      @Override
      public String apply() {
        return plan.treeString();
      }
    });
  }

  private void visit(LogicalPlan plan) throws IOException {
    if (problem != null) {
      return;
    }
    if (plan.isStreaming()) {
      problem = "it is a streaming plan";
      return;
    }
    List<LogicalPlan> children = SparkCompat.children(plan);
    if (children.isEmpty()) {
      leaf(plan);
    }
    for (Expression e : SparkCompat.expressions(plan)) {
      expression(e);
    }
    for (LogicalPlan child : children) {
      visit(child);
    }
  }

  private void leaf(LogicalPlan plan) throws IOException {
    if (plan instanceof LogicalRelation
        && ((LogicalRelation) plan).relation() instanceof HadoopFsRelation) {
      relation((HadoopFsRelation) ((LogicalRelation) plan).relation());
    } else if (plan instanceof LocalRelation) {
      LocalRelation local = (LocalRelation) plan;
      MessageDigest digest = sha256();
      UnsafeProjection exact = UnsafeProjection.create(local.schema());
      for (InternalRow row : SparkCompat.localRows(local)) {
        byte[] bytes = exact.apply(row).getBytes(); // a row's exact bytes, not its text
        digest.update(Long.toString(bytes.length).getBytes(StandardCharsets.UTF_8));
        digest.update((byte) ':');
        digest.update(bytes);
      }
      parts.add("local " + Checksums.hex(digest.digest()));
    } else if (!(plan instanceof Range || plan instanceof OneRowRelation)) {
      problem = "it reads " + plan.nodeName() + ", whose content spark-steward cannot identify "
          + "(shared caches need file sources, ranges or local data)";
    }
  }

  /** Format, options (keys in lower case, as Spark reads them), schemas and every input file. */
  private void relation(HadoopFsRelation fs) throws IOException {
    Map<String, String> options = new TreeMap<>();
    for (Tuple2<String, String> kv : SparkCompat.<Tuple2<String, String>>list(fs.options())) {
      options.put(kv._1().toLowerCase(Locale.ROOT), kv._2());
    }
    parts.add("relation " + fs.fileFormat().getClass().getName() + " options=" + options
        + " data=" + fs.dataSchema().json() + " partitions=" + fs.partitionSchema().json()
        + " buckets=" + fs.bucketSpec());
    for (String file : fs.location().inputFiles()) {
      Path path = new Path(file);
      String identity = "file".equals(path.toUri().getScheme()) ? localFile(path) : null;
      if (identity == null) {
        identity = hadoopFile(path);
      }
      if (identity == null) {
        return;
      }
      parts.add("file " + file + " " + identity);
    }
  }

  /**
   * Size, modification time and what tells a rewrite from the file read before even when it kept
   * both ({@code cp -p}, {@code rsync -t}): the inode's device, number and change time, which
   * every write sets and no user can. One stat call, without Hadoop's file system (about 1 ms a
   * file through it). Null where the file system has no POSIX attributes.
   */
  private static String localFile(Path path) throws IOException {
    Map<String, Object> unix;
    try {
      unix = Files.readAttributes(Paths.get(path.toUri()),
          "unix:size,lastModifiedTime,dev,ino,ctime");
    } catch (UnsupportedOperationException | IllegalArgumentException e) {
      return null;
    }
    return unix.get("size") + " " + ((FileTime) unix.get("lastModifiedTime")).toMillis()
        + " inode " + unix.get("dev") + ":" + unix.get("ino") + " ctime "
        + ((FileTime) unix.get("ctime")).toInstant();
  }

  /**
   * Size, modification time and, beyond them, an object store's ETag, else the file system's
   * checksum (HDFS), else a SHA-256 of the content within {@link #HASH_LIMIT_BYTES} for the
   * plan. Null, with {@link #problem} set, when none of these can be had.
   */
  private String hadoopFile(Path path) throws IOException {
    URI uri = path.toUri();
    String root = uri.getScheme() + "://" + (uri.getAuthority() == null ? "" : uri.getAuthority());
    FileSystem fileSystem = fileSystems.get(root);
    if (fileSystem == null) {
      fileSystem = path.getFileSystem(hadoopConf.get());
      fileSystems.put(root, fileSystem);
    }
    FileStatus status = fileSystem.getFileStatus(path);
    String known = status.getLen() + " " + status.getModificationTime() + " ";
    if (status instanceof org.apache.hadoop.fs.EtagSource) {
      String etag = ((org.apache.hadoop.fs.EtagSource) status).getEtag();
      if (etag != null && !etag.isEmpty()) {
        return known + "etag " + etag;
      }
    }
    if (!"file".equals(fileSystem.getUri().getScheme())) {
      FileChecksum checksum = fileSystem.getFileChecksum(path);
      if (checksum != null) {
        return known + "checksum " + checksum.getAlgorithmName() + " "
            + Checksums.hex(checksum.getBytes());
      }
    }
    hashedBytes += status.getLen();
    if (hashedBytes > HASH_LIMIT_BYTES) {
      problem = "its input files on " + uri.getScheme() + ":// have no identity a same-size "
          + "rewrite cannot fool (inode change time, ETag or checksum), and they are over "
          + (HASH_LIMIT_BYTES >> 20) + " MiB to hash";
      return null;
    }
    MessageDigest digest = sha256();
    byte[] buffer = new byte[1 << 16];
    try (InputStream in = fileSystem.open(path)) {
      for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
        digest.update(buffer, 0, n);
      }
    }
    return known + "sha256 " + Checksums.hex(digest.digest());
  }

  private void expression(Expression e) throws IOException {
    if (problem != null) {
      return;
    }
    String name = e.getClass().getSimpleName().toLowerCase(Locale.ROOT);
    if (name.startsWith("current") || name.equals("now") || name.startsWith("localtimestamp")) {
      problem = "it reads the clock or the session (" + e.prettyName() + ")";
      return;
    }
    if (!e.deterministic()) {
      problem = "it is not deterministic (" + e.prettyName() + ")";
      return;
    }
    if (e instanceof PythonFuncExpression) {
      python((PythonFuncExpression) e);
    } else if (e instanceof UserDefinedExpression) {
      problem = "it calls " + e.prettyName() + ", a JVM user-defined function whose code "
          + "spark-steward cannot identify";
      return;
    }
    if (e instanceof SubqueryExpression) {
      visit(((SubqueryExpression) e).plan());
    }
    for (Expression child : SparkCompat.children(e)) {
      expression(child);
    }
  }

  /** The function's kind and result type here; its code (the pickled command) for Python. */
  private void python(PythonFuncExpression e) {
    parts.add("python " + e.name() + " eval=" + e.evalType() + " type="
        + ((Expression) e).dataType().json()
        + " deterministic=" + e.udfDeterministic() + " python=" + e.func().pythonVer()
        + " index=" + python.size() / 2);
    List<Byte> command = SparkCompat.pythonCommand(e);
    byte[] bytes = new byte[command.size()];
    for (int i = 0; i < bytes.length; i++) {
      bytes[i] = command.get(i);
    }
    python.add(Base64.getEncoder().encodeToString(bytes));
    List<String> broadcasts = new ArrayList<>();
    for (Broadcast<PythonBroadcast> b : e.func().broadcastVars()) {
      broadcasts.add(b.id() + "=" + broadcastDigest(b));
    }
    python.add(String.join(",", broadcasts));
  }

  /** SHA-256 of a Python broadcast's pickled value (its file on the driver); "" if unreadable. */
  private static String broadcastDigest(Broadcast<PythonBroadcast> b) {
    try {
      String path = b.value().path();
      if (path == null) {
        return "";
      }
      MessageDigest digest = sha256();
      byte[] buffer = new byte[1 << 16];
      try (InputStream in = Files.newInputStream(Paths.get(path))) {
        for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
          digest.update(buffer, 0, n);
        }
      }
      return Checksums.hex(digest.digest());
    } catch (IOException | RuntimeException e) {
      return "";
    }
  }

  private static MessageDigest sha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
