package io.sparksteward.shim;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * The Spark 3.5/4.0 streaming checkpoint file manager's name before the shim had packages, kept
 * so that a conf written then still loads (see {@link StreamCheckpointFiles}).
 *
 * @deprecated use {@link io.sparksteward.shim.streams.StreamCheckpointFilesV40} (Spark 3.5, 4.0).
 */
@Deprecated
public final class StreamCheckpointFilesV40
    extends io.sparksteward.shim.streams.StreamCheckpointFilesV40 {
  public StreamCheckpointFilesV40(Path path, Configuration conf) {
    super(path, conf);
  }
}
