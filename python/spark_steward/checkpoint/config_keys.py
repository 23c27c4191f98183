"""The checkpoint capability's ``spark.steward.checkpoints.*`` keys.

Declared here, listed with every other key by :data:`spark_steward.config.KEYS` (this module is
the ``config`` of the capability's declaration), and read typed through
:meth:`spark_steward.config.StewardConf.get`.
"""

from __future__ import annotations

from spark_steward.config import BOOL, DURATION, FLOAT, INT, SIZE, STRING, ConfigKey

CHECKPOINTS_RETAINED = ConfigKey(
    "spark.steward.checkpoints.retained", INT, "1",
    "Completed checkpoints kept per series (Flink's `state.checkpoints.num-retained`); older "
    "ones are subsumed and deleted. `checkpoints(name, retained=n)` overrides it per series.",
    minimum=1)
CHECKPOINTS_ORPHAN_GRACE = ConfigKey(
    "spark.steward.checkpoints.orphan-grace", DURATION, "1h",
    "Checkpoint data or artifacts that no metadata entry owns are deleted at attach and by "
    "`spark-steward gc` once they are this old (a safety window for writers on storage that "
    "lists new objects late).", minimum=0)
CHECKPOINTS_TRANSPARENT = ConfigKey(
    "spark.steward.checkpoints.transparent", BOOL, "true",
    "Owns Spark's own reliable checkpoints (`sc.setCheckpointDir` with `df.checkpoint()` / "
    "`rdd.checkpoint()`) in sessions with spark-steward on: registered before they are written, "
    "deleted repeatably when Spark's cleaner drops the checkpointed RDD, at stop, and after a "
    "crash. Also turns on `spark.cleaner.referenceTracking.cleanCheckpoints` unless it is set.")
CHECKPOINTS_COMPRESSION = ConfigKey(
    "spark.steward.checkpoints.compression", STRING, "zstd",
    "Codec of the checkpoint data a save writes: `zstd` (level 1), `lz4` (LZ4 frame) or "
    "`none`. Merged segments use Arrow IPC buffer compression (any Arrow reader opens them); "
    "one-file-per-partition data compresses each block. Restore reads every codec and the "
    "uncompressed data of older versions whatever this says. Settable per session; a change "
    "makes the next save across the checkpoint boundary rewrite every segment once.",
    choices=("zstd", "lz4", "none"))
CHECKPOINTS_MERGING = ConfigKey(
    "spark.steward.checkpoints.file-merging.enabled", BOOL, "true",
    "Saves checkpoints file-merged (FLIP-306): each partition is one Arrow IPC segment and a "
    "save writes a few physical files instead of one per partition. Restore reads either "
    "layout whatever this says. Settable per session.")
CHECKPOINTS_MERGING_MAX_FILE_SIZE = ConfigKey(
    "spark.steward.checkpoints.file-merging.max-file-size", SIZE, "128m",
    "Largest physical file a merged save appends to; a segment that would pass it starts the "
    "next file (a single larger segment gets a file of its own).", minimum=1)
CHECKPOINTS_MERGING_ACROSS_BOUNDARY = ConfigKey(
    "spark.steward.checkpoints.file-merging.across-checkpoint-boundary", BOOL, "false",
    "A merged save reuses the segments of the series' retained checkpoints whose content "
    "(sha-256 of the segment) is unchanged instead of writing them again.")
CHECKPOINTS_MERGING_MAX_AMPLIFICATION = ConfigKey(
    "spark.steward.checkpoints.file-merging.max-space-amplification", FLOAT, "2.0",
    "Physical bytes over live bytes a series may reach before a save copies its live segments "
    "out of the most wasteful physical files so they can be deleted. Below 1 disables it.")
CHECKPOINTS_REPLACE_BUILTIN = ConfigKey(
    "spark.steward.checkpoints.replace-builtin", BOOL, "false",
    "Serves `df.checkpoint(eager)` as a file-merged checkpoint of the application's "
    "`_spark.<app id>` series instead of Spark's checkpoint dir: same rows, lineage cut, "
    "deleted when Spark's cleaner drops the DataFrame (with `checkpoints.transparent`), at stop, "
    "or by the next attach or `gc` after a crash. Settable per session.")
