package org.apache.spark.sql.execution.streaming.checkpointing;

import java.io.OutputStream;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;

/**
 * Compile-time stand-in for Spark 4.1+'s CheckpointFileManager trait (only on javac's
 * classpath, never in the jar): the shim builds against one Spark line, and this package's
 * trait exists only from 4.1 on. Same binary names and descriptors as the trait.
 */
public interface CheckpointFileManager {
  static CheckpointFileManager create(Path path, org.apache.hadoop.conf.Configuration conf) {
    throw new UnsupportedOperationException("stub");
  }

  CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible);

  FSDataInputStream open(Path path);

  FileStatus[] list(Path path, PathFilter filter);

  default FileStatus[] list(Path path) {
    throw new UnsupportedOperationException("stub");
  }

  void mkdirs(Path path);

  boolean exists(Path path);

  void delete(Path path);

  boolean isLocal();

  Path createCheckpointDirectory();

  default void close() {}

  /** The companion object's nested class: binary name CheckpointFileManager$Cancellable... */
  abstract class CancellableFSDataOutputStream extends FSDataOutputStream {
    public CancellableFSDataOutputStream(OutputStream out) {
      super(out, null);
    }

    public abstract void cancel();
  }
}
