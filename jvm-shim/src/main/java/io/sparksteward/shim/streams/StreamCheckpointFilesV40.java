package io.sparksteward.shim.streams;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.CheckpointFileManager;

/**
 * The streaming checkpoint file manager for Spark 3.5 and 4.0 (the trait in {@code
 * ...execution.streaming}): only what names that trait; the body is {@link
 * CheckpointFilesAdapter}'s. Spark constructs it by name with {@code (Path, Configuration)}. Not
 * final: {@code io.sparksteward.shim.StreamCheckpointFilesV40}, the name an older conf may hold,
 * extends it.
 */
public class StreamCheckpointFilesV40 extends CheckpointFilesAdapter<CheckpointFileManager>
    implements CheckpointFileManager {
  private static final Calls<CheckpointFileManager> CALLS = new Calls<>(
      CheckpointFileManager::open, CheckpointFileManager::list, CheckpointFileManager::list,
      CheckpointFileManager::mkdirs, CheckpointFileManager::exists, CheckpointFileManager::delete,
      CheckpointFileManager::isLocal, CheckpointFileManager::createCheckpointDirectory);

  public StreamCheckpointFilesV40(Path path, Configuration conf) {
    super(CheckpointFileManager.create(path, StreamFiles.delegateConf(conf)), CALLS, path, conf);
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    files.refuseExisting(path, overwriteIfPossible);
    return delegate.createAtomic(path, overwriteIfPossible);
  }
}
