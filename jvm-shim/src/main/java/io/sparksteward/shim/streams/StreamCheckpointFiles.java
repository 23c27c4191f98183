package io.sparksteward.shim.streams;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * The streaming checkpoint file manager for Spark 4.1 and later (the trait moved to
 * {@code ...streaming.checkpointing}): only what names that trait; the body is
 * {@link CheckpointFilesAdapter}'s. Spark constructs it by name with {@code (Path,
 * Configuration)}. Not final: {@code io.sparksteward.shim.StreamCheckpointFiles}, the name an
 * older conf may hold, extends it.
 */
public class StreamCheckpointFiles extends CheckpointFilesAdapter<CheckpointFileManager>
    implements CheckpointFileManager {
  private static final Calls<CheckpointFileManager> CALLS = new Calls<>(
      CheckpointFileManager::open, CheckpointFileManager::list, CheckpointFileManager::list,
      CheckpointFileManager::mkdirs, CheckpointFileManager::exists, CheckpointFileManager::delete,
      CheckpointFileManager::isLocal, CheckpointFileManager::createCheckpointDirectory);

  public StreamCheckpointFiles(Path path, Configuration conf) {
    super(CheckpointFileManager.create(path, StreamFiles.delegateConf(conf)), CALLS, path, conf);
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    files.refuseExisting(path, overwriteIfPossible);
    return delegate.createAtomic(path, overwriteIfPossible);
  }

  /** New in 4.1's trait. */
  @Override
  public void close() {
    delegate.close();
  }
}
