"""Every shim class the conformance suite reaches, by its Java name: the one place to change
when a class moves (the JVM-side helper takes the names from here, never from its own code)."""

from __future__ import annotations

#: The executor JVM's peer blob server, started standalone through its ``main``.
PEER_SERVER = "io.sparksteward.shim.blob.PeerServer"

#: Spark's streaming checkpoint file manager with packs served: Spark 4.1+, then 3.5 and 4.0.
STREAM_CHECKPOINT_FILES = "io.sparksteward.shim.streams.StreamCheckpointFiles"
STREAM_CHECKPOINT_FILES_V40 = "io.sparksteward.shim.streams.StreamCheckpointFilesV40"

#: The host-local working dir's manifest records, as the JVM's table replicas write them.
LOCAL_MANIFEST = "io.sparksteward.shim.kernel.LocalManifest"

#: A merged checkpoint's segment read by byte range: one listing line, and its reader.
SEGMENT_FILES = "io.sparksteward.shim.checkpoint.SegmentFiles"
SEGMENT_SPEC = SEGMENT_FILES + "$Spec"
SEGMENT_PIECES = SEGMENT_FILES + "$Pieces"

#: The conformance suite's own JVM-side helper (tests/conformance/java).
CONFORMANCE_DRIVER = "io.sparksteward.conformance.ConformanceDriver"


def stream_checkpoint_files() -> str:
    """The streaming checkpoint file manager of the installed Spark line (the trait it
    implements moved in 4.1)."""
    import pyspark

    major, minor = (int(part) for part in pyspark.__version__.split(".")[:2])
    return STREAM_CHECKPOINT_FILES if (major, minor) >= (4, 1) else STREAM_CHECKPOINT_FILES_V40
