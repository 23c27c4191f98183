package io.sparksteward.shim.checkpoint;

import java.io.DataInputStream;
import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.Serializable;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.NoSuchElementException;
import java.util.zip.Checksum;

import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.TaskCompletionListener;

/**
 * Restores a file-merged checkpoint from storage the executors' JVMs can open (Hadoop's
 * FileSystem: {@code file:}, {@code hdfs:}): each partition reads its segment's byte range,
 * verifies its crc32c and is decoded by {@link SegmentCodec}. No Python worker is involved, so a
 * restore of many partitions costs what a JVM task costs. Storage only Python can reach (an
 * object store without a Hadoop connector) is read by Python workers instead.
 *
 * <p>The crc32c can only be compared after the last byte; a mismatch then fails the task (and
 * the action) with an error naming the checkpoint, the partition, the file and the byte range,
 * worded like the Python reader's.
 */
public final class SegmentFiles {
  static final int PIECE = 4 << 20;

  private SegmentFiles() {}

  /**
   * A DataFrame over the segments in {@code listing}, one partition per line in order; each line
   * is {@code url offset length crc32c-hex partition}. {@code label} (e.g. "checkpoint s/7")
   * starts every error message.
   */
  public static Dataset<Row> read(SparkSession spark, String listing, String schemaJson,
                                  String label) {
    List<Spec> specs = new ArrayList<>();
    for (String line : listing.split("\n")) {
      if (!line.trim().isEmpty()) {
        specs.add(Spec.parse(line));
      }
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    boolean local = true;
    for (Spec spec : specs) {
      local &= "file".equalsIgnoreCase(new Path(spec.url).toUri().getScheme());
    }
    // Local files are read as RandomAccessFiles: no Hadoop configuration to broadcast at each
    // restore (Spark's own checkpoint broadcasts its at save). bench/RESULTS.md, issue 25.
    Broadcast<SerializableConfiguration> conf = local ? null
        : jsc.broadcast(new SerializableConfiguration(spark.sessionState().newHadoopConf()));
    JavaRDD<byte[]> pieces = jsc.parallelize(specs, Math.max(1, specs.size()))
        .mapPartitionsWithIndex(new ReadTask(conf, label), false);
    return SegmentCodec.decode(spark, pieces, schemaJson);
  }

  /** One segment: where it is and what its bytes must hash to. */
  static final class Spec implements Serializable {
    private static final long serialVersionUID = 1L;
    final String url;
    final long offset;
    final long length;
    final int crc;
    final int partition;

    Spec(String url, long offset, long length, int crc, int partition) {
      this.url = url;
      this.offset = offset;
      this.length = length;
      this.crc = crc;
      this.partition = partition;
    }

    /** One line, its four numbers taken from the right: the URL may hold spaces. */
    static Spec parse(String line) {
      String rest = line.trim();
      String[] numbers = new String[4];
      for (int i = numbers.length - 1; i >= 0; i--) {
        int space = rest.lastIndexOf(' ');
        if (space <= 0) {
          throw new IllegalArgumentException(SegmentCodec.ERROR
              + "list line must be 'url offset length crc32c partition': " + line);
        }
        numbers[i] = rest.substring(space + 1);
        rest = rest.substring(0, space);
      }
      return new Spec(rest, Long.parseLong(numbers[0]), Long.parseLong(numbers[1]),
          (int) Long.parseLong(numbers[2], 16), Integer.parseInt(numbers[3]));
    }
  }

  static final class ReadTask implements Function2<Integer, Iterator<Spec>, Iterator<byte[]>> {
    private final Broadcast<SerializableConfiguration> conf;
    private final String label;

    ReadTask(Broadcast<SerializableConfiguration> conf, String label) {
      this.conf = conf;
      this.label = label;
    }

    @Override
    public Iterator<byte[]> call(Integer index, Iterator<Spec> specs) {
      return specs.hasNext()
          ? new Pieces(conf == null ? null : conf.value().value(), specs.next(), label)
          : Collections.emptyIterator();
    }
  }

  /** The bytes of one segment in pieces of at most {@link #PIECE}, verified at the end. */
  static final class Pieces implements Iterator<byte[]> {
    private final Configuration conf;
    private final Spec spec;
    private final String what;
    private final Checksum crc = Checksums.crc32c();
    private DataInputStream in; // FSDataInputStream is one too
    private long left;

    Pieces(Configuration conf, Spec spec, String label) {
      this.conf = conf;
      this.spec = spec;
      this.what = String.format(Locale.ROOT, "%s: segment of partition %d in %s (bytes %d..%d)",
          label, spec.partition, spec.url, spec.offset, spec.offset + spec.length);
      this.left = spec.length;
    }

    private IOException fail(String problem, Throwable cause) {
      close();
      return new IOException(what + ": " + problem, cause);
    }

    private void open() throws IOException {
      Path path = new Path(spec.url);
      try {
        if (conf == null) { // a local file, as Hadoop's RawLocalFileSystem names it
          RandomAccessFile file = new RandomAccessFile(new File(path.toUri().getPath()), "r");
          in = new DataInputStream(Channels.newInputStream(file.getChannel())); // closes file
          requireSize(file.length());
          file.seek(spec.offset);
        } else {
          FileSystem fs = CheckpointData.fileSystem(path, conf);
          requireSize(fs.getFileStatus(path).getLen());
          FSDataInputStream stream = fs.open(path);
          in = stream;
          stream.seek(spec.offset);
        }
      } catch (java.io.FileNotFoundException e) {
        throw fail("the file is missing", e);
      }
      TaskContext task = TaskContext.get();
      if (task != null) {
        task.addTaskCompletionListener(new TaskCompletionListener() {
          @Override
          public void onTaskCompletion(TaskContext context) {
            close();
          }
        });
      }
    }

    private void requireSize(long size) throws IOException {
      if (size < spec.offset + spec.length) {
        throw fail("the file has only " + size + " bytes (truncated)", null);
      }
    }

    @Override
    public boolean hasNext() {
      return left > 0;
    }

    @Override
    public byte[] next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      try {
        if (in == null) {
          open();
        }
        byte[] piece = new byte[(int) Math.min(PIECE, left)];
        try {
          in.readFully(piece);
        } catch (java.io.EOFException e) {
          throw fail("the file ended early (truncated)", e);
        }
        crc.update(piece, 0, piece.length);
        left -= piece.length;
        if (left == 0) {
          close();
          if ((int) crc.getValue() != spec.crc) {
            throw fail("crc32c " + Checksums.hex32((int) crc.getValue()) + " != recorded "
                + Checksums.hex32(spec.crc) + " (the bytes changed on storage)", null);
          }
        }
        return piece;
      } catch (IOException e) {
        throw Errors.sneaky(e);
      }
    }

    void close() {
      if (in != null) {
        try {
          in.close();
        } catch (IOException ignored) {
          // read-only: nothing to lose
        }
        in = null;
      }
    }
  }
}
