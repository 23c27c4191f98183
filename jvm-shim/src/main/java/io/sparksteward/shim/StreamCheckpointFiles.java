package io.sparksteward.shim;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * The streaming checkpoint file manager's name before the shim had packages, kept so that a
 * conf written then still loads: a {@code spark.sql.streaming.checkpointFileManagerClass} (or
 * {@code spark.steward.streams.delegate-class}) in a spark-defaults.conf, read by a session
 * spark-steward has not attached to. spark-steward itself sets the new name.
 *
 * @deprecated use {@link io.sparksteward.shim.streams.StreamCheckpointFiles} (Spark 4.1+).
 */
@Deprecated
public final class StreamCheckpointFiles
    extends io.sparksteward.shim.streams.StreamCheckpointFiles {
  public StreamCheckpointFiles(Path path, Configuration conf) {
    super(path, conf);
  }
}
