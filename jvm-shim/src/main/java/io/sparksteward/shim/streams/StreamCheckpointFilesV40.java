package io.sparksteward.shim.streams;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.CheckpointFileManager;

/**
 * The streaming checkpoint file manager for Spark 3.5 and 4.0 (the trait in
 * {@code ...execution.streaming}); {@link StreamFiles} holds what it adds
 * (retried deletes, packs served). Spark constructs it
 * by name with {@code (Path, Configuration)}. Not final: {@code
 * io.sparksteward.shim.StreamCheckpointFilesV40}, the name an older conf may hold, extends it.
 */
public class StreamCheckpointFilesV40 implements CheckpointFileManager {
  private final CheckpointFileManager delegate;
  private final StreamFiles files;

  public StreamCheckpointFilesV40(Path path, Configuration conf) {
    this.delegate = CheckpointFileManager.create(path, StreamFiles.delegateConf(conf));
    this.files = new StreamFiles(path, conf);
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    files.refuseExisting(path, overwriteIfPossible);
    return delegate.createAtomic(path, overwriteIfPossible);
  }

  @Override
  public FSDataInputStream open(Path path) {
    return files.open(path, () -> delegate.open(path));
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return files.list(path, filter, () -> delegate.list(path, filter));
  }

  @Override
  public FileStatus[] list(Path path) {
    return files.list(path, null, () -> delegate.list(path));
  }

  @Override
  public void mkdirs(Path path) {
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return files.exists(path, () -> delegate.exists(path));
  }

  @Override
  public void delete(Path path) {
    files.delete(path, () -> delegate.delete(path));
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }
}
