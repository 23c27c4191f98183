package io.sparksteward.shim.checkpoint;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Collections;
import java.util.Iterator;
import java.util.Locale;
import java.util.NoSuchElementException;
import java.util.zip.Checksum;

import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.IpcOption;
import org.apache.arrow.vector.ipc.message.MessageChannelReader;
import org.apache.arrow.vector.ipc.message.MessageResult;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.TaskCompletionListener;

/**
 * Partitions as Arrow IPC streams and back, for file-merged checkpoints: the JVM converts rows,
 * Python workers move the bytes with fsspec (every storage spark-steward reaches, object stores
 * included, with no Hadoop connector on the executors). Nothing here does storage IO.
 *
 * <p>{@link #encode} makes each partition one Arrow IPC stream (schema, record batches,
 * end-of-stream marker), its buffers compressed with the IPC format's own codecs (zstd, LZ4 frame
 * or none: {@link SegmentCompression}), so any Arrow reader ({@code pyarrow.ipc.open_stream})
 * reads a partition from its bytes alone. Decoding takes every codec, so segments written before
 * compression (plain streams) read as they always did. The stream reaches Python as the
 * elements of its partition:
 *
 * <pre>
 *   'D' | next piece of the stream   (zero or more; chunkBytes each, the last one shorter)
 *   'E' | {"partition":P,"rows":N,"length":L,"crc32c":"8 hex","sha256":"64 hex"}   (last)
 * </pre>
 *
 * Both checksums cover the whole stream. Rows are pulled only as elements are asked for: a task
 * holds about one record batch and one piece, whatever the size of its partition.
 *
 * <p>{@link #decode} turns such streams (plain bytes, split anyhow over a partition's elements)
 * back into rows. It checks the stream's schema against the expected one and requires the
 * end-of-stream marker, so a stream cut at a message boundary fails instead of losing rows.
 * Checking the bytes against recorded checksums is for the Python side, which has the records.
 *
 * <p>Arrow memory comes from child allocators of Spark's root allocator, closed at the end of a
 * stream and (if still open) when the task completes: killed or failed tasks leak none.
 */
public final class SegmentCodec {
  static final String ERROR = Errors.PREFIX + "checkpoint segment ";
  /** {@code segment_files.DATA}: an element holding the next piece of the stream. */
  static final char DATA = 'D';
  /** {@code segment_files.END}: the last element, the partition's record. */
  static final char END = 'E';

  private SegmentCodec() {}

  // -- driver side ------------------------------------------------------------------------------

  /**
   * The partitions of {@code df} as Arrow IPC streams: one output partition per input partition,
   * in order, elements as in the class comment. Rows are converted when the result is computed.
   * A plan with exchanges has its shuffle stages run here by adaptive execution, as for
   * {@code Dataset.rdd}; the last stage runs in the caller's job, with no SQL execution id (Spark
   * needs none to compute {@code toRdd}; that stage is only missing from the SQL UI).
   */
  public static JavaRDD<byte[]> encode(Dataset<Row> df, int chunkBytes, String codec) {
    if (chunkBytes <= 0) {
      throw new IllegalArgumentException(ERROR + "chunk size must be positive: " + chunkBytes);
    }
    SegmentCompression.codecType(codec); // an unknown codec fails here, not in each task
    SQLConf conf = df.sparkSession().sessionState().conf();
    StructType schema = df.schema();
    String timeZone = conf.sessionLocalTimeZone();
    arrowSchema(schema, timeZone); // types Arrow cannot hold fail here rather than in each task
    int maxRows = conf.arrowMaxRecordsPerBatch(); // <= 0: no limit, as in Spark
    EncodeTask task = new EncodeTask(schema, timeZone, maxRows > 0 ? maxRows : Integer.MAX_VALUE,
        chunkBytes, codec);
    return df.queryExecution().toRdd().toJavaRDD().mapPartitionsWithIndex(task, false);
  }

  /**
   * A DataFrame of {@code schemaJson} over Arrow IPC streams: partition i of {@code streams} holds
   * one stream's bytes in order, split over any number of elements (none: no rows), and becomes
   * partition i. Lazy: a stream that does not match the schema, is cut off or is corrupt fails
   * its task with an IOException naming the partition.
   */
  public static Dataset<Row> decode(SparkSession spark, JavaRDD<byte[]> streams,
                                    String schemaJson) {
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    JavaRDD<InternalRow> rows = streams.mapPartitionsWithIndex(new DecodeTask(schema), false);
    return SparkCompat.internalCreateDataFrame(spark, rows.rdd(), schema);
  }

  // -- shared --------------------------------------------------------------------------------

  static Schema arrowSchema(StructType schema, String timeZone) {
    return SparkCompat.arrowSchema(schema, timeZone);
  }

  static BufferAllocator allocator(String what, int partition) {
    // Typed Object first: naming RootAllocator makes javac read BaseAllocator's annotations,
    // whose checkerframework classes are not on the classpath (a warning, fatal with -Werror).
    Object root = ArrowUtils.rootAllocator();
    return ((BufferAllocator) root).newChildAllocator(
        "spark-steward segment " + what + " " + partition, 0, Long.MAX_VALUE);
  }

  /** Closes {@code vectors} and their allocator when the task completes, however it ends. */
  static void closeOnCompletion(AutoCloseable vectors, BufferAllocator allocator) {
    TaskContext task = TaskContext.get();
    if (task != null) {
      task.addTaskCompletionListener(new TaskCompletionListener() {
        @Override
        public void onTaskCompletion(TaskContext context) {
          close(vectors, allocator);
        }
      });
    }
  }

  /** Closes the vectors, then their allocator (which throws if they left memory behind). */
  static void close(AutoCloseable vectors, BufferAllocator allocator) {
    try {
      vectors.close();
    } catch (Exception e) {
      throw Errors.sneaky(e);
    } finally {
      allocator.close(); // idempotent
    }
  }

  // -- encoding ------------------------------------------------------------------------------

  static final class EncodeTask
      implements Function2<Integer, Iterator<InternalRow>, Iterator<byte[]>> {
    private final StructType schema;
    private final String timeZone;
    private final int maxRows;
    private final int chunkBytes;
    private final String codec;

    EncodeTask(StructType schema, String timeZone, int maxRows, int chunkBytes, String codec) {
      this.schema = schema;
      this.timeZone = timeZone;
      this.maxRows = maxRows;
      this.chunkBytes = chunkBytes;
      this.codec = codec;
    }

    @Override
    public Iterator<byte[]> call(Integer partition, Iterator<InternalRow> rows)
        throws IOException {
      return new Encoder(partition, rows);
    }

    /**
     * Writes a record batch only when less than a piece of the stream is pending; the checksums
     * are taken over the pieces as they leave (every byte leaves once, in order).
     */
    final class Encoder implements Iterator<byte[]> {
      private final int partition;
      private final Iterator<InternalRow> rows;
      private final Pending pending = new Pending(Math.min(chunkBytes, 1 << 20) + (64 << 10));
      private final Checksum crc = Checksums.crc32c();
      private final MessageDigest sha;
      private final VectorSchemaRoot root;
      private final BufferAllocator allocator;
      private final ArrowWriter writer;
      private final ArrowStreamWriter stream; // holds no Arrow memory of its own
      private long rowCount;
      private long length;
      private boolean ended;
      private boolean done;

      Encoder(int partition, Iterator<InternalRow> rows) throws IOException {
        this.partition = partition;
        this.rows = rows;
        try {
          sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
          throw new IllegalStateException(ERROR + "no SHA-256 in this JVM", e);
        }
        allocator = allocator("encode", partition);
        root = VectorSchemaRoot.create(arrowSchema(schema, timeZone), allocator); // no buffers yet
        closeOnCompletion(root, allocator);
        writer = ArrowWriter.create(root);
        stream = new ArrowStreamWriter(root, null, Channels.newChannel(pending),
            IpcOption.DEFAULT, SegmentCompression.FACTORY, SegmentCompression.codecType(codec));
        stream.start(); // the schema message, into pending: no rows are read
      }

      @Override
      public boolean hasNext() {
        return !done;
      }

      @Override
      public byte[] next() {
        if (done) {
          throw new NoSuchElementException();
        }
        try {
          while (!ended && pending.size() < chunkBytes) {
            writeBatchOrEnd();
          }
        } catch (IOException e) {
          throw Errors.sneaky(e);
        }
        if (pending.size() > 0) {
          byte[] piece = pending.take(DATA, chunkBytes);
          crc.update(piece, 1, piece.length - 1);
          sha.update(piece, 1, piece.length - 1);
          length += piece.length - 1;
          return piece;
        }
        done = true;
        String record = String.format(Locale.ROOT, END
            + "{\"partition\":%d,\"rows\":%d,\"length\":%d,\"crc32c\":\"%s\",\"sha256\":\"%s\"}",
            partition, rowCount, length, Checksums.hex32((int) crc.getValue()),
            Checksums.hex(sha.digest()));
        return record.getBytes(StandardCharsets.UTF_8);
      }

      /** One batch of at most maxRows rows (cut at about chunkBytes), or the end of stream. */
      private void writeBatchOrEnd() throws IOException {
        if (!rows.hasNext()) {
          stream.end();
          ended = true;
          close(root, allocator); // what is left of the stream is pending
          return;
        }
        int count = 0;
        long size = 0; // estimated as Spark's ArrowConverters do
        while (count < maxRows && size < chunkBytes && rows.hasNext()) {
          InternalRow row = rows.next();
          writer.write(row);
          size += row instanceof UnsafeRow ? ((UnsafeRow) row).getSizeInBytes()
              : 16L * row.numFields();
          count++;
        }
        writer.finish();
        stream.writeBatch();
        writer.reset();
        rowCount += count;
      }
    }
  }

  /** The stream bytes written and not yet taken. */
  static final class Pending extends ByteArrayOutputStream {
    private final int initial;

    Pending(int initial) {
      super(initial);
      this.initial = initial;
    }

    /** An element: {@code type}, then the next (at most max) bytes. */
    synchronized byte[] take(char type, int max) {
      int n = Math.min(max, count);
      byte[] element = new byte[1 + n];
      element[0] = (byte) type;
      System.arraycopy(buf, 0, element, 1, n);
      count -= n;
      if (count == 0 && buf.length > 4 * initial) {
        buf = new byte[initial]; // drop a giant batch's buffer
      } else {
        System.arraycopy(buf, n, buf, 0, count); // less than a piece is left
      }
      return element;
    }
  }

  // -- decoding ------------------------------------------------------------------------------

  static final class DecodeTask
      implements Function2<Integer, Iterator<byte[]>, Iterator<InternalRow>> {
    private final StructType schema;
    /**
     * Whether rows go out as Arrow's own row views, without a copy of ours: the plan's scan
     * (RDDScanExec) projects each row into an UnsafeRow before it asks for the next, as it does
     * for the rows of Spark's own Arrow conversions. Only where no nested part of the schema is
     * declared NOT NULL: top-level NOT NULL columns are checked per batch, nested ones would need
     * a walk of every value, so such schemas keep the copy (every field nullable) as before.
     */
    private final boolean direct;

    DecodeTask(StructType schema) {
      this.schema = schema;
      boolean nestedNullable = true;
      for (StructField field : schema.fields()) {
        nestedNullable &= nestedNullable(field.dataType());
      }
      this.direct = nestedNullable;
    }

    private static boolean nestedNullable(DataType type) {
      if (type instanceof StructType) {
        for (StructField field : ((StructType) type).fields()) {
          if (!field.nullable() || !nestedNullable(field.dataType())) {
            return false;
          }
        }
        return true;
      }
      if (type instanceof ArrayType) {
        ArrayType array = (ArrayType) type;
        return array.containsNull() && nestedNullable(array.elementType());
      }
      if (type instanceof MapType) {
        MapType map = (MapType) type;
        return map.valueContainsNull() && nestedNullable(map.keyType())
            && nestedNullable(map.valueType());
      }
      return true;
    }

    @Override
    public Iterator<InternalRow> call(Integer partition, Iterator<byte[]> pieces) {
      return pieces.hasNext() ? new Decoder(partition, pieces) : Collections.emptyIterator();
    }

    /**
     * Emits the rows of one stream: Arrow's row views, valid until the next batch loads (see
     * {@link DecodeTask#direct}), or UnsafeRows, which outlive their Arrow batch.
     */
    final class Decoder implements Iterator<InternalRow> {
      private final int partition;
      private final PieceStream in;
      private UnsafeProjection projection; // made at the first row, only when rows are copied
      private final BufferAllocator allocator;
      private final MessageReader messages;
      private final ArrowStreamReader reader;
      private Iterator<InternalRow> batch = Collections.emptyIterator();
      private long rows;
      private boolean opened;
      private boolean finished;

      Decoder(int partition, Iterator<byte[]> pieces) {
        this.partition = partition;
        in = new PieceStream(pieces);
        allocator = allocator("decode", partition);
        messages = new MessageReader(in, allocator);
        // reads nothing yet; takes uncompressed (older) and compressed segments alike
        reader = new ArrowStreamReader(messages, allocator, SegmentCompression.FACTORY);
        closeOnCompletion(reader, allocator);
      }

      @Override
      public boolean hasNext() {
        try {
          while (!batch.hasNext() && !finished) {
            if (!opened) {
              open();
            }
            if (reader.loadNextBatch()) {
              VectorSchemaRoot root = reader.getVectorSchemaRoot();
              ColumnVector[] columns = new ColumnVector[root.getFieldVectors().size()];
              for (int i = 0; i < columns.length; i++) {
                columns[i] = new ArrowColumnVector(root.getVector(i));
                if (direct && !schema.fields()[i].nullable()
                    && root.getVector(i).getNullCount() > 0) {
                  throw fail("holds nulls in field " + i + " (" + schema.fields()[i].name()
                      + "), which the schema declares NOT NULL");
                }
              }
              batch = new ColumnarBatch(columns, root.getRowCount()).rowIterator();
              rows += root.getRowCount();
            } else {
              finish();
            }
          }
          return batch.hasNext();
        } catch (IOException | RuntimeException e) {
          finished = true;
          Throwable failure = e;
          if (!in.upstreamFailed && !String.valueOf(e.getMessage()).startsWith(ERROR)) {
            failure = fail("is unreadable at byte " + messages.bytesRead() + " (" + rows
                + " rows read): " + e).initCause(e);
          }
          try {
            close(reader, allocator);
          } catch (RuntimeException suppressed) {
            failure.addSuppressed(suppressed);
          }
          throw Errors.sneaky(failure);
        }
      }

      @Override
      public InternalRow next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        if (direct) {
          return batch.next();
        }
        if (projection == null) { // code generation per task: only where the copy is needed
          projection = UnsafeProjection.create(schema); // every field nullable, whatever it says
        }
        return projection.apply(batch.next());
      }

      private IOException fail(String what) {
        return new IOException(ERROR + "of partition " + partition + " " + what);
      }

      /**
       * Reads the stream's schema and compares it with the expected one as Spark types (what
       * Arrow holds them as: a UDT as its SQL type, a timestamp in any zone), ignoring names and
       * nullability: columns are read by position, rows projected to the expected types.
       */
      private void open() throws IOException {
        opened = true;
        StructField[] got = ArrowUtils.fromArrowSchema(
            reader.getVectorSchemaRoot().getSchema()).fields();
        StructField[] want = ArrowUtils.fromArrowSchema(arrowSchema(schema, "UTC")).fields();
        if (got.length != want.length) {
          throw fail("has " + got.length + " fields, the schema has " + want.length);
        }
        for (int i = 0; i < want.length; i++) {
          if (!DataType.equalsStructurally(want[i].dataType(), got[i].dataType(), true)) {
            throw fail("does not match the schema: field " + i + " (" + want[i].name() + ") is "
                + got[i].dataType().simpleString() + " in the segment, "
                + want[i].dataType().simpleString() + " in the schema");
          }
        }
      }

      private void finish() throws IOException {
        if (!messages.sawEnd) {
          throw fail("is cut off after " + messages.bytesRead() + " bytes (" + rows
              + " rows): no end-of-stream marker");
        }
        if (in.read() != -1) {
          throw fail("has bytes after its end-of-stream marker at byte " + messages.bytesRead());
        }
        finished = true;
        close(reader, allocator);
      }
    }
  }

  /**
   * Tells the end-of-stream marker from the end of the input, which Arrow does not: at both
   * {@code readNext} returns null. Only the marker reads exactly 8 bytes before null (0xFFFFFFFF
   * then length 0: a continuation token with any other length reads a message or throws).
   */
  static final class MessageReader extends MessageChannelReader {
    boolean sawEnd;

    MessageReader(InputStream in, BufferAllocator allocator) {
      super(new ReadChannel(Channels.newChannel(in)), allocator);
    }

    @Override
    public MessageResult readNext() throws IOException {
      long before = bytesRead();
      MessageResult result = super.readNext();
      sawEnd = result == null && bytesRead() - before == 8;
      return result;
    }
  }

  /**
   * The bytes of a partition's elements, in order. Notes a failure of the elements' source (a
   * Python worker's error, a killed task: not the stream's fault); closing it reads no further.
   */
  static final class PieceStream extends InputStream {
    private final Iterator<byte[]> pieces;
    private ByteArrayInputStream piece = new ByteArrayInputStream(new byte[0]);
    boolean upstreamFailed;

    PieceStream(Iterator<byte[]> pieces) {
      this.pieces = pieces;
    }

    private boolean fill() {
      try {
        while (piece.available() == 0 && pieces.hasNext()) {
          piece = new ByteArrayInputStream(pieces.next());
        }
        return piece.available() > 0;
      } catch (RuntimeException e) {
        upstreamFailed = true;
        throw e;
      }
    }

    @Override
    public int read() {
      return fill() ? piece.read() : -1;
    }

    @Override
    public int read(byte[] b, int off, int len) {
      return len == 0 ? 0 : fill() ? piece.read(b, off, len) : -1;
    }

    @Override
    public int available() {
      return piece.available();
    }
  }
}
