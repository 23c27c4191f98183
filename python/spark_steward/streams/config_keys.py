"""The streams capability's ``spark.steward.streams.*`` keys.

Declared here, listed with every other key by :data:`spark_steward.config.KEYS` (this module is
the ``config`` of the capability's declaration), and read typed through
:meth:`spark_steward.config.StewardConf.get`.
"""

from __future__ import annotations

from spark_steward.config import BOOL, DURATION, FLOAT, INT, SIZE, STRING, ConfigKey, JvmValue

STREAMS_ENABLED = ConfigKey(
    "spark.steward.streams.enabled", BOOL, "true",
    "Owns the checkpoint locations of Structured Streaming queries in sessions with "
    "spark-steward on: each is recorded at start (`spark-steward streams ls`), deletes Spark asks "
    "for that fail are retried until done, temp files of killed writers are swept, and "
    "`streams.drop` removes a location safely. Settable per session (takes effect for queries "
    "started afterwards).")
STREAMS_DELEGATE_CLASS = ConfigKey(
    "spark.steward.streams.delegate-class", STRING, "",
    "The checkpoint file manager spark-steward's streaming manager delegates to. Set at attach "
    "from a `spark.sql.streaming.checkpointFileManagerClass` you had configured; empty means "
    "Spark's default.")
STREAMS_ABANDONED_AFTER = ConfigKey(
    "spark.steward.streams.abandoned-after", DURATION, "7d",
    "A stopped query's location not run for this long is listed as `abandoned` (only listed: "
    "it is removed by `streams drop`, never on its own).", minimum=0)
STREAMS_DROP_GRACE = ConfigKey(
    "spark.steward.streams.drop-grace", DURATION, "10min",
    "A location is dropped only after neither its record nor any of its files changed for this "
    "long (a run of an application without spark-steward still writes files).", minimum=0)
STREAMS_TEMP_HORIZON = ConfigKey(
    "spark.steward.streams.temp-horizon", DURATION, "1h",
    "Temp files of Spark's atomic writes (`.<name>.<uuid>.tmp`) are swept once no run of their "
    "query is active, or while one runs once they are this old.", minimum=0)
STREAMS_SWEEP_INTERVAL = ConfigKey(
    "spark.steward.streams.sweep-interval", DURATION, "1min",
    "How often the driver retries the recorded failed deletes of running queries' locations "
    "(and always at a query's end, at attach and in `spark-steward gc`).", minimum=0.01)
STREAMS_PACK_ENABLED = ConfigKey(
    "spark.steward.streams.pack.enabled", BOOL, "false",
    "Packs the old immutable files of running queries' checkpoint locations (offsets, commits, "
    "HDFS state store deltas and snapshots of committed batches) into few physical files after "
    "each batch (FLIP-306); Spark still sees every file through spark-steward's checkpoint file "
    "manager. A packed location needs spark-steward (or `spark-steward streams unpack`) to be "
    "read again. Application-wide.")
STREAMS_PACK_KEEP_BATCHES = ConfigKey(
    "spark.steward.streams.pack.keep-batches", INT, "1",
    "Files of the last this many committed batches stay loose (a committed batch never runs "
    "again, so 0 would be safe; 1 leaves the batch Spark may still be reading).", minimum=0)
STREAMS_PACK_GRACE = ConfigKey(
    "spark.steward.streams.pack.grace", DURATION, "10s",
    "A pack's loose copies are removed this long after the pack became visible; longer than "
    "the 2 s a JVM caches its view of the packs, so no listing misses a file.", minimum=3)
STREAMS_PACK_MAX_AMPLIFICATION = ConfigKey(
    "spark.steward.streams.pack.max-space-amplification", FLOAT, "2.0",
    "When a location's packs store more than this many times the bytes of their live files, "
    "the live files of the most wasteful packs are copied into a new pack and the old packs "
    "deleted (as `checkpoints.file-merging.max-space-amplification`); below 1: never.",
    minimum=0)
STREAMS_PACK_MAX_MEMBER = ConfigKey(
    "spark.steward.streams.pack.max-member", SIZE, "4m",
    "Files larger than this stay loose (they are few, and a packed file is read whole into "
    "memory when opened). At most `256m`: the JVM refuses a larger member, so a pack holding "
    "one could not be read by Spark.", minimum=0, maximum=256 << 20)

#: What the streaming checkpoint file managers act on where a session does not set its own
#: switch (the shim's ``streams.StreamFiles``).
JVM_VALUES = (
    JvmValue("streams_enabled", bool, lambda conf: conf.get(STREAMS_ENABLED)),
)
