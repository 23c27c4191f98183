package io.sparksteward.shim.checkpoint;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.zip.Checksum;

import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFileSystem;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.TaskCompletionListener;

/**
 * The data path of the checkpoint store: executors write a DataFrame's partitions to files and
 * read them back, all in the JVM (no Python worker sees a row).
 *
 * <p>One file per partition, {@code part-<partition %05d>-<tag>-<task attempt id>}. Format (all
 * integers little-endian):
 *
 * <pre>
 *   header:  "SSCK" | int32 version (2) | int32 number of fields of the rows | int32 codec
 *   blocks:  int32 stored length | int32 row count | int32 crc32c(stored) | int32 raw length
 *            | stored (the raw payload packed with the codec: 0 none, 1 zstd, 2 LZ4 frame)
 *   raw:     row count times (int32 length | UnsafeRow bytes)
 * </pre>
 *
 * Version 1 (written before compression) has a 12-byte header without the codec and 12-byte
 * block headers without the raw length, its payload stored raw; readers take both.
 *
 * A block holds rows up to ~1 MiB of raw payload (a single larger row makes a block of its own). A
 * reader verifies a block's crc32c before it emits any of its rows, and at the end of the file
 * checks the row count, the size and the crc32c of the whole file against the writer's record.
 * An empty partition still writes a file (the header alone), so a restore has every partition.
 *
 * <p>On filesystems a task writes {@code .<name>.tmp} in the same folder, hsyncs and renames it;
 * on object stores (s3a, gs, ...) it writes the final name directly (visible at close). Failed
 * attempts delete their file when they can; retried or speculative attempts may leave files
 * under other names: only the records {@link #write} returns count.
 */
public final class CheckpointData {
  static final int VERSION = 2;
  static final int FILE_HEADER = 12;
  static final int FILE_HEADER_V2 = 16;
  static final int BLOCK_HEADER = 12;
  static final int BLOCK_HEADER_V2 = 16;
  static final int BLOCK_TARGET = 1 << 20;
  static final String ERROR = Errors.PREFIX + "checkpoint data ";
  private static final byte[] MAGIC = "SSCK".getBytes(StandardCharsets.US_ASCII);
  /** Schemes whose files appear whole at close and have no cheap rename: written in place. */
  private static final Set<String> OBJECT_STORES = Collections.unmodifiableSet(new HashSet<>(
      Arrays.asList("s3", "s3a", "s3n", "gs", "oss", "cos", "cosn", "obs", "ks3", "tos")));

  private CheckpointData() {}

  // -- driver side ------------------------------------------------------------------------------

  /**
   * Writes every partition of {@code df} under {@code dirUrl} in one Spark job and returns one
   * JSON array with a record per partition, in partition order:
   * {@code {"partition":0,"name":"part-00000-...","rows":10,"bytes":532,"crc32c":"0a1b2c3d"}}.
   * Only these files count: other task attempts may leave files (never under a listed name).
   */
  public static String write(Dataset<Row> df, String dirUrl, String attemptTag, String codec) {
    int blockCodec = SegmentCompression.blockCodec(codec); // an unknown one fails here
    if (!attemptTag.matches("[A-Za-z0-9_]{1,64}")) {
      throw new IllegalArgumentException(
          ERROR + "attempt tag must be 1-64 letters, digits or '_': " + attemptTag);
    }
    SparkSession spark = df.sparkSession();
    QueryExecution qe = df.queryExecution();
    StructType schema = df.schema();
    Broadcast<SerializableConfiguration> conf = broadcastConf(spark);
    try {
      List<String> records = SQLExecution.withNewExecutionId(
          qe, scala.Option.apply("spark-steward checkpoint write"),
          new scala.runtime.AbstractFunction0<List<String>>() {
            @Override
            public List<String> apply() {
              RDD<InternalRow> rows = qe.toRdd();
              return rows.toJavaRDD()
                  .mapPartitionsWithIndex(new WriteTask(conf, dirUrl, attemptTag, schema,
                      blockCodec), false)
                  .collect();
            }
          });
      // collect() keeps partition order
      return "[" + String.join(",", records) + "]";
    } finally {
      conf.destroy();
    }
  }

  /**
   * A DataFrame over files written by {@link #write}, one partition per file in the given order.
   * {@code files} has one line per file: {@code name size rows crc32c-hex}, separated by single
   * spaces. Reading is lazy: verification errors surface as IOExceptions in the tasks.
   */
  public static Dataset<Row> read(SparkSession spark, String dirUrl, String files,
                                  String schemaJson) {
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    List<FileSpec> specs = new ArrayList<>();
    for (String line : files.split("\n")) {
      if (!line.trim().isEmpty()) {
        specs.add(FileSpec.parse(line));
      }
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    JavaRDD<InternalRow> rows;
    if (specs.isEmpty()) {
      rows = jsc.emptyRDD();
    } else {
      rows = jsc.parallelize(specs, specs.size()).mapPartitionsWithIndex(
          new ReadTask(broadcastConf(spark), dirUrl, schema.length()), false);
    }
    return SparkCompat.internalCreateDataFrame(spark, rows.rdd(), schema);
  }

  private static Broadcast<SerializableConfiguration> broadcastConf(SparkSession spark) {
    Configuration conf = spark.sessionState().newHadoopConf();
    return JavaSparkContext.fromSparkContext(spark.sparkContext())
        .broadcast(new SerializableConfiguration(conf));
  }

  // -- shared --------------------------------------------------------------------------------

  static String fileUrl(String dirUrl, String name) {
    return dirUrl.endsWith("/") ? dirUrl + name : dirUrl + "/" + name;
  }

  /** The FileSystem of {@code dir}; a ChecksumFileSystem's raw one (no .crc side files). */
  static FileSystem fileSystem(Path dir, Configuration conf) throws IOException {
    FileSystem fs = dir.getFileSystem(conf);
    return fs instanceof ChecksumFileSystem ? ((ChecksumFileSystem) fs).getRawFileSystem() : fs;
  }

  /** The little-endian int at {@code pos} of {@code bytes}. */
  static int getIntLE(byte[] bytes, int pos) {
    return (bytes[pos] & 0xff) | (bytes[pos + 1] & 0xff) << 8 | (bytes[pos + 2] & 0xff) << 16
        | bytes[pos + 3] << 24;
  }

  static void putIntLE(byte[] bytes, int pos, int value) {
    bytes[pos] = (byte) value;
    bytes[pos + 1] = (byte) (value >> 8);
    bytes[pos + 2] = (byte) (value >> 16);
    bytes[pos + 3] = (byte) (value >> 24);
  }

  // -- writing -------------------------------------------------------------------------------

  /** One task: its partition to one file; returns its JSON record. */
  static final class WriteTask
      implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
    private final Broadcast<SerializableConfiguration> conf;
    private final String dirUrl;
    private final String tag;
    private final StructType schema;
    private final int codec;

    WriteTask(Broadcast<SerializableConfiguration> conf, String dirUrl, String tag,
              StructType schema, int codec) {
      this.conf = conf;
      this.dirUrl = dirUrl;
      this.tag = tag;
      this.schema = schema;
      this.codec = codec;
    }

    @Override
    public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws Exception {
      TaskContext task = TaskContext.get();
      long attempt = task == null ? System.nanoTime() : task.taskAttemptId();
      String name = String.format(Locale.ROOT, "part-%05d-%s-%d", partition, tag, attempt);
      Path dir = new Path(dirUrl);
      FileSystem fs = fileSystem(dir, conf.value().value());
      String scheme = String.valueOf(fs.getUri().getScheme()).toLowerCase(Locale.ROOT);
      boolean inPlace = OBJECT_STORES.contains(scheme);
      Path target = new Path(dir, name);
      Path tmp = inPlace ? target : new Path(dir, "." + name + ".tmp");
      BlockWriter writer = new BlockWriter(schema, codec);
      boolean done = false;
      try {
        try (FSDataOutputStream out = fs.create(tmp, false)) {
          writer.writeAll(rows, out);
          if (!inPlace) { // an object store's upload completes at close; sync is no-op or costly
            out.hsync();
          }
        }
        if (!inPlace && !fs.rename(tmp, target)) {
          throw new IOException(ERROR + "file " + fileUrl(dirUrl, name) + ": rename from "
              + tmp.getName() + " failed");
        }
        done = true;
      } finally {
        if (!done) {
          try {
            fs.delete(tmp, false);
          } catch (IOException | RuntimeException ignored) {
            // the caller deletes unlisted files; this only tidies up early
          }
        }
      }
      String record = String.format(Locale.ROOT,
          "{\"partition\":%d,\"name\":\"%s\",\"rows\":%d,\"bytes\":%d,\"crc32c\":\"%s\"}",
          partition, name, writer.rows, writer.bytes, Checksums.hex32(writer.fileCrc()));
      return Collections.singletonList(record).iterator();
    }
  }

  /**
   * Packs rows into blocks in one reused buffer, each compressed with the file's codec; one write
   * per block. Writes format 2; readers take 1 and 2.
   */
  static final class BlockWriter {
    private final StructType schema;
    private final int codec;
    private final Checksum blockCrc = Checksums.crc32c();
    private final Checksum fileCrc = Checksums.crc32c();
    private byte[] buf = new byte[BLOCK_TARGET + 1024];
    private final byte[] blockHeader = new byte[BLOCK_HEADER_V2];
    private int pos;
    private int blockRows;
    long rows;
    long bytes;

    BlockWriter(StructType schema, int codec) {
      this.schema = schema;
      this.codec = codec;
    }

    int fileCrc() {
      return (int) fileCrc.getValue();
    }

    void writeAll(Iterator<InternalRow> it, FSDataOutputStream out) throws IOException {
      byte[] header = new byte[FILE_HEADER_V2];
      System.arraycopy(MAGIC, 0, header, 0, 4);
      putIntLE(header, 4, VERSION);
      putIntLE(header, 8, schema.length());
      putIntLE(header, 12, codec);
      out.write(header);
      fileCrc.update(header, 0, header.length);
      bytes = header.length;
      UnsafeProjection projection = null;
      while (it.hasNext()) {
        InternalRow row = it.next();
        UnsafeRow unsafe;
        if (row instanceof UnsafeRow) {
          unsafe = (UnsafeRow) row;
        } else {
          if (projection == null) { // every field nullable: safe whatever the plan claims
            DataType[] types = new DataType[schema.length()];
            for (int i = 0; i < types.length; i++) {
              types[i] = schema.fields()[i].dataType();
            }
            projection = UnsafeProjection.create(types);
          }
          unsafe = projection.apply(row);
        }
        int size = unsafe.getSizeInBytes();
        if (size > Integer.MAX_VALUE - 1024 - pos) {
          throw new IOException(ERROR + "a row of " + size + " bytes is too large");
        }
        int need = 4 + size;
        if (blockRows > 0 && pos + need > BLOCK_TARGET) {
          flush(out);
        }
        if (pos + need > buf.length) { // one row larger than a block: a block of its own
          byte[] bigger = new byte[need];
          System.arraycopy(buf, 0, bigger, 0, pos);
          buf = bigger;
        }
        putIntLE(buf, pos, size);
        Platform.copyMemory(unsafe.getBaseObject(), unsafe.getBaseOffset(), buf,
            Platform.BYTE_ARRAY_OFFSET + pos + 4, size);
        pos += need;
        blockRows++;
      }
      if (blockRows > 0) {
        flush(out);
      }
    }

    private void flush(FSDataOutputStream out) throws IOException {
      byte[] stored = buf;
      int length = pos;
      if (codec != SegmentCompression.BLOCK_NONE) {
        stored = SegmentCompression.packBlock(codec, buf, 0, pos);
        length = stored.length;
      }
      blockCrc.reset();
      blockCrc.update(stored, 0, length);
      putIntLE(blockHeader, 0, length);
      putIntLE(blockHeader, 4, blockRows);
      putIntLE(blockHeader, 8, (int) blockCrc.getValue());
      putIntLE(blockHeader, 12, pos);
      out.write(blockHeader);
      out.write(stored, 0, length);
      fileCrc.update(blockHeader, 0, blockHeader.length);
      fileCrc.update(stored, 0, length);
      bytes += blockHeader.length + length;
      rows += blockRows;
      pos = 0;
      blockRows = 0;
      if (buf.length > BLOCK_TARGET + 1024) {
        buf = new byte[BLOCK_TARGET + 1024]; // drop a giant row's buffer
      }
    }
  }

  // -- reading -------------------------------------------------------------------------------

  /** What the writer recorded for one file. */
  static final class FileSpec implements Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final long size;
    final long rows;
    final int crc;

    FileSpec(String name, long size, long rows, int crc) {
      this.name = name;
      this.size = size;
      this.rows = rows;
      this.crc = crc;
    }

    static FileSpec parse(String line) {
      String[] parts = line.trim().split(" ");
      if (parts.length != 4) {
        throw new IllegalArgumentException(
            ERROR + "file list line must be 'name size rows crc32c': " + line);
      }
      return new FileSpec(parts[0], Long.parseLong(parts[1]), Long.parseLong(parts[2]),
          (int) Long.parseLong(parts[3], 16));
    }
  }

  /** One task: one file, verified block by block. */
  static final class ReadTask
      implements Function2<Integer, Iterator<FileSpec>, Iterator<InternalRow>> {
    private final Broadcast<SerializableConfiguration> conf;
    private final String dirUrl;
    private final int numFields;

    ReadTask(Broadcast<SerializableConfiguration> conf, String dirUrl, int numFields) {
      this.conf = conf;
      this.dirUrl = dirUrl;
      this.numFields = numFields;
    }

    @Override
    public Iterator<InternalRow> call(Integer partition, Iterator<FileSpec> specs) {
      if (!specs.hasNext()) {
        return Collections.emptyIterator();
      }
      FileSpec spec = specs.next();
      BlockReader reader = new BlockReader(conf.value().value(), dirUrl, spec, numFields);
      TaskContext task = TaskContext.get();
      if (task != null) {
        task.addTaskCompletionListener(new TaskCompletionListener() {
          @Override
          public void onTaskCompletion(TaskContext context) {
            reader.close();
          }
        });
      }
      return reader;
    }
  }

  /** Emits the rows of one file; each row is an UnsafeRow over its block's own byte array. */
  static final class BlockReader implements Iterator<InternalRow> {
    private final Configuration conf;
    private final String url;
    private final FileSpec spec;
    private final int numFields;
    private final Checksum fileCrc = Checksums.crc32c();
    private byte[] header = new byte[BLOCK_HEADER];
    private int codec = SegmentCompression.BLOCK_NONE;
    private FSDataInputStream in;
    private long offset;
    private long rows;
    private int blockIndex = -1;
    private byte[] block = new byte[0];
    private int blockRows;
    private int emitted;
    private int rowPos;
    private boolean finished;

    BlockReader(Configuration conf, String dirUrl, FileSpec spec, int numFields) {
      this.conf = conf;
      this.url = fileUrl(dirUrl, spec.name);
      this.spec = spec;
      this.numFields = numFields;
    }

    private IOException fail(String what) {
      close();
      return new IOException(ERROR + "file " + url + ": " + what);
    }

    @Override
    public boolean hasNext() {
      try {
        while (emitted == blockRows) {
          if (finished) {
            return false;
          }
          if (in == null) {
            open();
          }
          if (offset == spec.size) {
            finish();
            return false;
          }
          readBlock();
        }
        return true;
      } catch (IOException e) {
        throw Errors.sneaky(e);
      }
    }

    @Override
    public InternalRow next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      int size = rowPos + 4 <= block.length ? getIntLE(block, rowPos) : -1;
      if (size < 0 || rowPos + 4L + size > block.length) {
        throw Errors.sneaky(fail("block " + blockIndex + " row " + emitted
            + " length " + size + " runs past the block"));
      }
      UnsafeRow row = new UnsafeRow(numFields);
      row.pointTo(block, Platform.BYTE_ARRAY_OFFSET + rowPos + 4, size);
      rowPos += 4 + size;
      emitted++;
      if (emitted == blockRows && rowPos != block.length) {
        throw Errors.sneaky(fail("block " + blockIndex + " has "
            + (block.length - rowPos) + " bytes after its last row"));
      }
      return row;
    }

    private void open() throws IOException {
      Path path = new Path(url);
      try {
        in = fileSystem(path, conf).open(path);
      } catch (FileNotFoundException e) {
        throw fail("missing file (" + e.getMessage() + ")");
      }
      byte[] fileHeader = new byte[FILE_HEADER];
      readFully(fileHeader, "file header");
      for (int i = 0; i < 4; i++) {
        if (fileHeader[i] != MAGIC[i]) {
          throw fail("bad magic (not a spark-steward checkpoint data file)");
        }
      }
      int version = getIntLE(fileHeader, 4);
      if (version != 1 && version != VERSION) {
        throw fail("format version " + version + " is not supported (only 1 and " + VERSION
            + ")");
      }
      int fields = getIntLE(fileHeader, 8);
      if (fields != numFields) {
        throw fail("rows have " + fields + " fields, the schema has " + numFields);
      }
      fileCrc.update(fileHeader, 0, fileHeader.length);
      if (version == 2) {
        byte[] codecBytes = new byte[4];
        readFully(codecBytes, "file header codec");
        codec = getIntLE(codecBytes, 0);
        if (codec != SegmentCompression.BLOCK_NONE && codec != SegmentCompression.BLOCK_ZSTD
            && codec != SegmentCompression.BLOCK_LZ4) {
          throw fail("codec " + codec + " is not one of 0 (none), 1 (zstd), 2 (lz4)");
        }
        fileCrc.update(codecBytes, 0, 4);
        header = new byte[BLOCK_HEADER_V2];
      }
    }

    private void readBlock() throws IOException {
      blockIndex++;
      readFully(header, "block " + blockIndex + " header");
      int payload = getIntLE(header, 0);
      int count = getIntLE(header, 4);
      int recorded = getIntLE(header, 8);
      int raw = header.length == BLOCK_HEADER_V2 ? getIntLE(header, 12) : payload;
      if (payload < 0 || count < 0 || raw < 0 || payload > spec.size - offset) {
        throw fail("block " + blockIndex + " header at byte " + (offset - header.length)
            + " is corrupt (payload " + payload + " bytes, " + count + " rows, "
            + (spec.size - offset) + " bytes left of the recorded " + spec.size + ")");
      }
      fileCrc.update(header, 0, header.length);
      byte[] data = new byte[payload];
      readFully(data, "block " + blockIndex + " payload");
      int actual = (int) Checksums.crc32c(data, 0, payload);
      if (actual != recorded) {
        throw fail("block " + blockIndex + " crc32c " + Checksums.hex32(actual) + " != recorded "
            + Checksums.hex32(recorded));
      }
      fileCrc.update(data, 0, payload);
      if (count == 0 && payload != 0) {
        throw fail("block " + blockIndex + " has " + payload + " bytes and no rows");
      }
      try {
        data = SegmentCompression.unpackBlock(codec, data, raw);
      } catch (IllegalStateException e) {
        throw fail("block " + blockIndex + ": " + e.getMessage());
      }
      block = data;
      blockRows = count;
      emitted = 0;
      rowPos = 0;
      rows += count;
    }

    private void readFully(byte[] into, String what) throws IOException {
      if (offset + into.length > spec.size) {
        throw fail(what + " at byte " + offset + " runs past the recorded size " + spec.size);
      }
      try {
        in.readFully(into, 0, into.length);
      } catch (EOFException e) {
        throw fail("short file: " + what + " at byte " + offset + " cut off (recorded size "
            + spec.size + ")");
      }
      offset += into.length;
    }

    private void finish() throws IOException {
      if (in.read() != -1) {
        throw fail("file is longer than the recorded " + spec.size + " bytes");
      }
      if (rows != spec.rows) {
        throw fail("has " + rows + " rows, recorded " + spec.rows);
      }
      int actual = (int) fileCrc.getValue();
      if (actual != spec.crc) {
        throw fail("file crc32c " + Checksums.hex32(actual) + " != recorded " + Checksums.hex32(spec.crc));
      }
      finished = true;
      close();
    }

    void close() {
      if (in != null) {
        try {
          in.close();
        } catch (IOException ignored) {
          // nothing was written; a failed close of a reader loses nothing
        }
        in = null;
      }
    }
  }

  /**
   * Throws a checked exception (an IOException out of an Iterator) unchanged, so the task failure
   * Spark reports reads "java.io.IOException: spark-steward: checkpoint data ...".
   */
  @SuppressWarnings("unchecked")
  static <E extends Throwable> E sneaky(Throwable t) throws E {
    throw (E) t;
  }
}
