"""Every ``spark.steward.*`` key in one table: name, type, default, doc.

Code reads typed values through :class:`StewardConf`, never raw strings. README's configuration
section is generated from :data:`KEYS` (``spark-steward conf --markdown``) and a test keeps the two
in sync. A bad value raises :class:`~spark_steward.errors.ConfigError` with one line naming the
key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

from spark_steward.errors import ConfigError
from spark_steward.lifecycle.retry import RetryStrategy

log = logging.getLogger(__name__)

PREFIX = "spark.steward."
STORAGE_OPTION_PREFIX = "spark.steward.storage.option."
#: Written by the driver's Python into the conf of a starting SparkContext: the values the JVM
#: shim acts on, resolved (:mod:`spark_steward.kernel.handover`). Not a user key.
RESOLVED_KEY = "spark.steward.resolved"
T = TypeVar("T")

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_NUMBER_WITH_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def _parse_bool(raw: str) -> bool:
    """Exactly what Spark accepts for its own boolean keys (``true``/``false``, any case,
    surrounding blanks ignored). The shim reads a session's switches with this grammar
    (``kernel.Handover.sessionSwitch``, held equal by tests/spark/test_handover_jvm.py): a value
    one side takes as "on" is never refused or read as "off" by the other."""
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ValueError("true or false")


def _parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError("a whole number") from None


def _parse_duration(raw: str) -> float:
    """Spark-style durations: ``500ms``, ``10s``, ``5min``, ``1h``; a bare number is seconds."""
    match = _NUMBER_WITH_UNIT.match(raw)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _DURATION_UNITS and unit != "":
        raise ValueError("a duration such as 500ms, 10s, 5min or 1h")
    return float(match.group(1)) * _DURATION_UNITS.get(unit, 1.0)


def _parse_size(raw: str) -> int:
    """Spark-style sizes: ``512k``, ``64m``, ``1g``; a bare number is bytes."""
    match = _NUMBER_WITH_UNIT.match(raw)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise ValueError("a size such as 512k, 64m or 1g")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _parse_float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ValueError("a number such as 2.0") from None


def _parse_retries(raw: str) -> int | None:
    """``infinite`` (None: retry until it succeeds) or a whole number of retries."""
    text = raw.strip().lower()
    if text in ("infinite", "inf", "unlimited"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError("a whole number of retries or infinite") from None
    if value < 0:
        raise ValueError("a whole number of retries (0 or more) or infinite")
    return value


def _parse_str(raw: str) -> str:
    return raw.strip()


@dataclass(frozen=True)
class ConfigType(Generic[T]):
    """How a key's raw string becomes a typed value."""

    name: str
    parse: Callable[[str], T]


BOOL: ConfigType[bool] = ConfigType("boolean", _parse_bool)
INT: ConfigType[int] = ConfigType("int", _parse_int)
DURATION: ConfigType[float] = ConfigType("duration", _parse_duration)
SIZE: ConfigType[int] = ConfigType("size", _parse_size)
FLOAT: ConfigType[float] = ConfigType("number", _parse_float)
STRING: ConfigType[str] = ConfigType("string", _parse_str)
RETRIES: ConfigType[int | None] = ConfigType("int or `infinite`", _parse_retries)


@dataclass(frozen=True)
class ConfigKey(Generic[T]):
    """One documented key. ``default_text`` is what README shows; ``minimum`` bounds numbers."""

    name: str
    type: ConfigType[T]
    default_text: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None

    def parse(self, raw: str) -> T:
        """Typed value of ``raw``; raises ConfigError naming this key, the value and the rule."""
        try:
            value = self.type.parse(str(raw))
        except ValueError as exc:
            raise ConfigError(f"{self.name}={raw!r} is not valid: expected {exc}") from None
        if self.choices and value not in self.choices:
            raise ConfigError(
                f"{self.name}={raw!r} is not valid: expected one of {', '.join(self.choices)}")
        if self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            raise ConfigError(f"{self.name}={raw!r} is not valid: must be at least {self.minimum:g}")
        return value

    @property
    def default(self) -> T:
        """The key's default value, parsed."""
        return self.parse(self.default_text) if self.default_text != "" else self.type.parse("")


KEYS: dict[str, ConfigKey[Any]] = {}


def _key(name: str, type_: ConfigType[T], default: str, doc: str, *,
         choices: tuple[str, ...] = (), minimum: float | None = None) -> ConfigKey[T]:
    key = ConfigKey(name, type_, default, doc, choices, minimum)
    KEYS[name] = key
    return key


def _default_root() -> Path:
    """``<tmp>/spark-steward-<uid>``: one per user, so two users on a host never share a default
    dir. Resolved on the driver and handed to the JVMs (:mod:`spark_steward.kernel.handover`)."""
    return Path(tempfile.gettempdir()) / f"spark-steward-{os.getuid()}"


def default_storage_dir() -> str:
    """The embedded default: a local directory, so nothing else has to run."""
    return (_default_root() / "storage").as_uri()


def default_local_dir() -> str:
    """The host-local working directory used when ``spark.steward.local.dir`` is empty."""
    return str(_default_root() / "local")


ENABLED = _key(
    "spark.steward.enabled", BOOL, "false",
    "Turns spark-steward on. Read from the runtime conf of the SparkSession in use at every "
    "decision, so `spark.conf.set(\"spark.steward.enabled\", \"false\")` turns it off for that "
    "session only.")
STORAGE_DIR = _key(
    "spark.steward.storage.dir", STRING, "",
    "Durable storage URL for metadata, application records and HA copies: any fsspec URL "
    "(`file:///…`, `s3://bucket/prefix`, `hdfs://…`, `memory://…` in tests). Empty means a local "
    "directory under the system temp dir, `<system temp dir>/spark-steward-<uid>/storage` (the "
    "embedded default, single-host only). On a local filesystem its folders and files are "
    "created for the application's user only (0700/0600).")
LOCAL_DIR = _key(
    "spark.steward.local.dir", STRING, "",
    "Host-local working directory on the driver and every executor host. Empty means "
    "`<system temp dir>/spark-steward-<uid>/local`. It must outlive executor processes "
    "(standalone and YARN hosts keep it; on Kubernetes mount a persistent volume there): files "
    "in it survive executor restarts and are removed when their application ends. It is private "
    "to the application's user: an existing one that is a symbolic link, another user's or "
    "writable by others is refused.")
LOCAL_MAX_BYTES = _key(
    "spark.steward.local.max-bytes", SIZE, "0",
    "Most bytes of host-local files (blob cache, `local.state` values, table replicas) one "
    "application keeps "
    "on each host (`0`: unbounded). The least recently used entries no task uses are evicted "
    "first; when that cannot make room a `put` fails with `LocalSpaceFull` and a blob read streams "
    "into a file of the task instead.", minimum=0)
EVENTS_BUFFER_CAPACITY = _key(
    "spark.steward.events.buffer-capacity", INT, "100000",
    "Events the JVM shim holds for Python before it drops (and counts) new ones. Read by the "
    "shim at SparkContext start.", minimum=1)
EVENTS_BATCH_SIZE = _key(
    "spark.steward.events.batch-size", INT, "10000",
    "Most events carried by one call from Python into the JVM.", minimum=1)
EVENTS_POLL_INTERVAL = _key(
    "spark.steward.events.poll-interval", DURATION, "100ms",
    "How long one drain call waits in the JVM for a first event; bounds event latency.",
    minimum=0.001)
HEARTBEAT_INTERVAL = _key(
    "spark.steward.heartbeat.interval", DURATION, "10s",
    "How often a live application refreshes its record in the storage dir.", minimum=0.01)
HEARTBEAT_TIMEOUT = _key(
    "spark.steward.heartbeat.timeout", DURATION, "2min",
    "A running application whose heartbeat is older than this is taken as crashed. Where the "
    "judging process shares the driver's hostname, boot and PID namespace, the driver process "
    "decides instead: vanished is crashed at once, running is live.", minimum=0.01)
BLOB_RETENTION_INTERVAL = _key(
    "spark.steward.blob.retention.interval", DURATION, "30min",
    "Staged cleanup period of blobs (FLIP-19 `blob.retention.interval`): an unreferenced blob, "
    "and a blob put before any job used it, stays at least this long and at most twice this "
    "long; re-use in that window rescues it.", minimum=0.001)
BLOB_HA = _key(
    "spark.steward.blob.ha", BOOL, "true",
    "When the storage dir is set explicitly, every blob is also written there (HA "
    "copy) before its put returns, and executors read it from there before asking the driver. "
    "The embedded default storage is never used for HA copies.")
BLOB_SERVER_PORT = _key(
    "spark.steward.blob.server.port", INT, "0",
    "Port of the driver's blob server (0 picks a free one). It listens on "
    "`spark.driver.bindAddress` (else `spark.driver.host`) and executors dial "
    "`spark.driver.host` at this port: behind NAT, forward it like `spark.driver.port`.",
    minimum=0)
BLOB_SERVER_MAX_CONNECTIONS = _key(
    "spark.steward.blob.server.max-connections", INT, "256",
    "Most concurrent authenticated blob server connections; more are refused with an error "
    "reply.", minimum=1)
BLOB_SERVER_MAX_UNAUTHENTICATED = _key(
    "spark.steward.blob.server.max-unauthenticated", INT, "64",
    "Most connections still in the handshake, counted apart from `max-connections`; when full, "
    "the oldest is dropped to admit a new one, so idle sockets cannot lock executors out.",
    minimum=1)
BLOB_SERVER_MAX_UNAUTHENTICATED_PER_PEER = _key(
    "spark.steward.blob.server.max-unauthenticated-per-peer", INT, "8",
    "Most connections one peer address may hold in the handshake; its oldest is dropped "
    "beyond that.", minimum=1)
BLOB_ENCRYPTION = _key(
    "spark.steward.blob.encryption", STRING, "auto",
    "TLS 1.3 for blob transfers, with a certificate the driver makes for the application and "
    "executors pin: `auto` (on when Spark's own transfers are encrypted: "
    "`spark.network.crypto.enabled`, `spark.ssl.enabled` or `spark.ssl.rpc.enabled`), `true` "
    "or `false`.", choices=("auto", "true", "false"))
BLOB_SERVER_HANDSHAKE_TIMEOUT = _key(
    "spark.steward.blob.server.handshake-timeout", DURATION, "5s",
    "Time a new connection has to prove the application's secret, apart from the transfer "
    "timeout (`network-timeout`).", minimum=0.05)
BLOB_SERVER_MAX_FRAME = _key(
    "spark.steward.blob.server.max-frame", SIZE, "64k",
    "Largest request frame the blob server reads; a larger declared length gets an error reply "
    "and the connection is closed.", minimum=256)
BLOB_NETWORK_TIMEOUT = _key(
    "spark.steward.blob.network-timeout", DURATION, "60s",
    "Socket timeout of blob server connections on both sides.", minimum=0.01)
BLOB_FETCH_ATTEMPTS = _key(
    "spark.steward.blob.fetch.attempts", INT, "3",
    "How often an executor tries each source (HA store, blob server) before a blob read fails.",
    minimum=1)
BLOB_SAME_HOST_LINK = _key(
    "spark.steward.blob.cache.same-host-link", BOOL, "true",
    "Executors on the driver's host hard-link the driver's verified copy into their cache "
    "instead of transferring it (then verify it like any other copy). `false` makes them use "
    "the HA store and the blob server as on any other host.")
BLOB_PEER_ENABLED = _key(
    "spark.steward.blob.peer.enabled", BOOL, "true",
    "Executor hosts fetch blobs of at least `peer.min-bytes` in pieces from each other and from "
    "the driver at once, each piece checked (crc32c) and the whole blob against its key; every "
    "executor JVM serves the verified pieces its host holds. `false`: every host fetches the "
    "whole blob from the HA store or the blob server.")
BLOB_PEER_MIN_BYTES = _key(
    "spark.steward.blob.peer.min-bytes", SIZE, "16m",
    "Smallest blob fetched from peers; smaller ones come whole from one source.", minimum=0)
BLOB_PEER_CONNECTIONS = _key(
    "spark.steward.blob.peer.connections", INT, "4",
    "Peers one host fetches pieces from at once (besides the driver).", minimum=1)
BLOB_PEER_MAX_CONNECTIONS = _key(
    "spark.steward.blob.peer.max-connections", INT, "16",
    "Most authenticated connections each executor's peer server serves at once; more are "
    "refused with a `busy` reply and fetch elsewhere.", minimum=1)
BLOB_PEER_RATE = _key(
    "spark.steward.blob.peer.rate", SIZE, "0",
    "Upload cap of each executor's peer server in bytes per second (`0`: none), so serving "
    "peers leaves room for the executor's shuffle traffic.", minimum=0)
BLOB_TRANSPARENT = _key(
    "spark.steward.blob.transparent", BOOL, "true",
    "Routes `sc.addFile`, `sc.addArchive` and `SparkFiles.get` of sessions with spark-steward on "
    "through the blob service (verified, cached, cleaned up).")
CHECKPOINTS_RETAINED = _key(
    "spark.steward.checkpoints.retained", INT, "1",
    "Completed checkpoints kept per series (Flink's `state.checkpoints.num-retained`); older "
    "ones are subsumed and deleted. `checkpoints(name, retained=n)` overrides it per series.",
    minimum=1)
CHECKPOINTS_ORPHAN_GRACE = _key(
    "spark.steward.checkpoints.orphan-grace", DURATION, "1h",
    "Checkpoint data or artifacts that no metadata entry owns are deleted at attach and by "
    "`spark-steward gc` once they are this old (a safety window for writers on storage that "
    "lists new objects late).", minimum=0)
CHECKPOINTS_TRANSPARENT = _key(
    "spark.steward.checkpoints.transparent", BOOL, "true",
    "Owns Spark's own reliable checkpoints (`sc.setCheckpointDir` with `df.checkpoint()` / "
    "`rdd.checkpoint()`) in sessions with spark-steward on: registered before they are written, "
    "deleted repeatably when Spark's cleaner drops the checkpointed RDD, at stop, and after a "
    "crash. Also turns on `spark.cleaner.referenceTracking.cleanCheckpoints` unless it is set.")
CHECKPOINTS_COMPRESSION = _key(
    "spark.steward.checkpoints.compression", STRING, "zstd",
    "Codec of the checkpoint data a save writes: `zstd` (level 1), `lz4` (LZ4 frame) or "
    "`none`. Merged segments use Arrow IPC buffer compression (any Arrow reader opens them); "
    "one-file-per-partition data compresses each block. Restore reads every codec and the "
    "uncompressed data of older versions whatever this says. Settable per session; a change "
    "makes the next save across the checkpoint boundary rewrite every segment once.",
    choices=("zstd", "lz4", "none"))
CHECKPOINTS_MERGING = _key(
    "spark.steward.checkpoints.file-merging.enabled", BOOL, "true",
    "Saves checkpoints file-merged (FLIP-306): each partition is one Arrow IPC segment and a "
    "save writes a few physical files instead of one per partition. Restore reads either "
    "layout whatever this says. Settable per session.")
CHECKPOINTS_MERGING_MAX_FILE_SIZE = _key(
    "spark.steward.checkpoints.file-merging.max-file-size", SIZE, "128m",
    "Largest physical file a merged save appends to; a segment that would pass it starts the "
    "next file (a single larger segment gets a file of its own).", minimum=1)
CHECKPOINTS_MERGING_ACROSS_BOUNDARY = _key(
    "spark.steward.checkpoints.file-merging.across-checkpoint-boundary", BOOL, "false",
    "A merged save reuses the segments of the series' retained checkpoints whose content "
    "(sha-256 of the segment) is unchanged instead of writing them again.")
CHECKPOINTS_MERGING_MAX_AMPLIFICATION = _key(
    "spark.steward.checkpoints.file-merging.max-space-amplification", FLOAT, "2.0",
    "Physical bytes over live bytes a series may reach before a save copies its live segments "
    "out of the most wasteful physical files so they can be deleted. Below 1 disables it.")
CHECKPOINTS_REPLACE_BUILTIN = _key(
    "spark.steward.checkpoints.replace-builtin", BOOL, "false",
    "Serves `df.checkpoint(eager)` as a file-merged checkpoint of the application's "
    "`_spark.<app id>` series instead of Spark's checkpoint dir: same rows, lineage cut, "
    "deleted when Spark's cleaner drops the DataFrame (with `checkpoints.transparent`), at stop, "
    "or by the next attach or `gc` after a crash. Settable per session.")
CACHE_MAX_BYTES = _key(
    "spark.steward.cache.max-bytes", SIZE, "0",
    "Most bytes of materialized cached tables an application keeps (`0`: unbounded). A new "
    "materialization that would exceed it first evicts the least recently used caches no live "
    "`CachedTable` object refers to, with a log line; when that cannot make room the table is used uncached "
    "with a warning, never a failed job.", minimum=0)
CACHE_HOST_REPLICAS = _key(
    "spark.steward.cache.host-replicas", STRING, "auto",
    "Executors keep a verified host-local replica of each cached-table file they read, in the "
    "working dir (`local.dir`, bounded by `local.max-bytes`), so later reads on that host skip "
    "the storage dir: `auto` (on unless the storage dir is a local filesystem), `true` or "
    "`false`. Settable per session.",
    choices=("auto", "true", "false"))
CACHE_TRANSPARENT = _key(
    "spark.steward.cache.transparent", BOOL, "false",
    "Routes `df.cache()` and `df.persist()` of sessions with spark-steward on through "
    "spark-steward's cached tables (materialized once as Parquet in the storage dir, verified, "
    "cleaned up); `df.unpersist()` invalidates.")
CACHE_ORPHAN_GRACE = _key(
    "spark.steward.cache.orphan-grace", DURATION, "1h",
    "Cached-table data, manifests and user records that no entry owns are deleted at attach and "
    "by `spark-steward gc` once they are this old (a safety window for writers on storage that "
    "lists new objects late).", minimum=0)
CACHE_SHARED_RETENTION = _key(
    "spark.steward.cache.shared-retention", DURATION, "1h",
    "A shared cached table no running application uses any more is kept this long for the "
    "next application computing the same plan, then deleted by the next attach or "
    "`spark-steward gc` (staged cleanup; `0`: deleted when its last user stops).", minimum=0)
STREAMS_ENABLED = _key(
    "spark.steward.streams.enabled", BOOL, "true",
    "Owns the checkpoint locations of Structured Streaming queries in sessions with "
    "spark-steward on: each is recorded at start (`spark-steward streams ls`), deletes Spark asks "
    "for that fail are retried until done, temp files of killed writers are swept, and "
    "`streams.drop` removes a location safely. Settable per session (takes effect for queries "
    "started afterwards).")
STREAMS_DELEGATE_CLASS = _key(
    "spark.steward.streams.delegate-class", STRING, "",
    "The checkpoint file manager spark-steward's streaming manager delegates to. Set at attach "
    "from a `spark.sql.streaming.checkpointFileManagerClass` you had configured; empty means "
    "Spark's default.")
STREAMS_ABANDONED_AFTER = _key(
    "spark.steward.streams.abandoned-after", DURATION, "7d",
    "A stopped query's location not run for this long is listed as `abandoned` (only listed: "
    "it is removed by `streams drop`, never on its own).", minimum=0)
STREAMS_DROP_GRACE = _key(
    "spark.steward.streams.drop-grace", DURATION, "10min",
    "A location is dropped only after neither its record nor any of its files changed for this "
    "long (a run of an application without spark-steward still writes files).", minimum=0)
STREAMS_TEMP_HORIZON = _key(
    "spark.steward.streams.temp-horizon", DURATION, "1h",
    "Temp files of Spark's atomic writes (`.<name>.<uuid>.tmp`) are swept once no run of their "
    "query is active, or while one runs once they are this old.", minimum=0)
STREAMS_SWEEP_INTERVAL = _key(
    "spark.steward.streams.sweep-interval", DURATION, "1min",
    "How often the driver retries the recorded failed deletes of running queries' locations "
    "(and always at a query's end, at attach and in `spark-steward gc`).", minimum=0.01)
STREAMS_PACK_ENABLED = _key(
    "spark.steward.streams.pack.enabled", BOOL, "false",
    "Packs the old immutable files of running queries' checkpoint locations (offsets, commits, "
    "HDFS state store deltas and snapshots of committed batches) into few physical files after "
    "each batch (FLIP-306); Spark still sees every file through spark-steward's checkpoint file "
    "manager. A packed location needs spark-steward (or `spark-steward streams unpack`) to be "
    "read again. Application-wide.")
STREAMS_PACK_KEEP_BATCHES = _key(
    "spark.steward.streams.pack.keep-batches", INT, "1",
    "Files of the last this many committed batches stay loose (a committed batch never runs "
    "again, so 0 would be safe; 1 leaves the batch Spark may still be reading).", minimum=0)
STREAMS_PACK_GRACE = _key(
    "spark.steward.streams.pack.grace", DURATION, "10s",
    "A pack's loose copies are removed this long after the pack became visible; longer than "
    "the 2 s a JVM caches its view of the packs, so no listing misses a file.", minimum=3)
STREAMS_PACK_MAX_AMPLIFICATION = _key(
    "spark.steward.streams.pack.max-space-amplification", FLOAT, "2.0",
    "When a location's packs store more than this many times the bytes of their live files, "
    "the live files of the most wasteful packs are copied into a new pack and the old packs "
    "deleted (as `checkpoints.file-merging.max-space-amplification`); below 1: never.",
    minimum=0)
STREAMS_PACK_MAX_MEMBER = _key(
    "spark.steward.streams.pack.max-member", SIZE, "4m",
    "Files larger than this stay loose (they are few, and a packed file is read whole into "
    "memory when opened).", minimum=0)
CLEANUP_STRATEGY = _key(
    "spark.steward.cleanup-strategy", STRING, "exponential-delay",
    "How failed cleanups (checkpoint discards) are retried, as Flink's `cleanup-strategy`: "
    "`exponential-delay`, `fixed-delay`, or `none` (one attempt and a warning naming what was "
    "left; it stays recorded so `spark-steward gc` or the next run finishes it).",
    choices=("exponential-delay", "fixed-delay", "none"))
CLEANUP_EXPONENTIAL_INITIAL = _key(
    "spark.steward.cleanup-strategy.exponential-delay.initial-backoff", DURATION, "1s",
    "First wait after a failed cleanup with the exponential-delay strategy; it doubles after "
    "each further failure.", minimum=0.001)
CLEANUP_EXPONENTIAL_MAX = _key(
    "spark.steward.cleanup-strategy.exponential-delay.max-backoff", DURATION, "1h",
    "Longest wait between cleanup retries with the exponential-delay strategy.", minimum=0.001)
CLEANUP_EXPONENTIAL_ATTEMPTS = _key(
    "spark.steward.cleanup-strategy.exponential-delay.attempts", RETRIES, "infinite",
    "How often a failed cleanup is retried with the exponential-delay strategy before it is "
    "given up (left recorded for `spark-steward gc`).")
CLEANUP_FIXED_DELAY = _key(
    "spark.steward.cleanup-strategy.fixed-delay.delay", DURATION, "1min",
    "Wait between cleanup retries with the fixed-delay strategy.", minimum=0.001)
CLEANUP_FIXED_ATTEMPTS = _key(
    "spark.steward.cleanup-strategy.fixed-delay.attempts", RETRIES, "infinite",
    "How often a failed cleanup is retried with the fixed-delay strategy before it is given "
    "up (left recorded for `spark-steward gc`).")
CLEANUP_THREADS = _key(
    "spark.steward.cleanup.io-threads", INT, "4",
    "Threads of the IO pool that runs cleanups off the threads that call save or stop.",
    minimum=1)
CLEANUP_SHUTDOWN_TIMEOUT = _key(
    "spark.steward.cleanup.shutdown-timeout", DURATION, "30s",
    "How long `spark.stop()` waits for outstanding cleanups; what is left stays recorded and "
    "the next attach or `spark-steward gc` finishes it.", minimum=0)
STORAGE_OPTIONS_DOC = (
    "`spark.steward.storage.option.<name>`", "string", "(none)",
    "Passed to the fsspec filesystem of the storage dir as keyword `<name>`, e.g. "
    "`spark.steward.storage.option.endpoint_url=http://127.0.0.1:9000` or `…option.anon=true` "
    "for s3://. `true`/`false` and whole numbers are passed as such. Travels to executors only "
    "inside the broadcast, never in local properties.")
SHIM_JAR = _key(
    "spark.steward.shim.jar", STRING, "",
    "Path of the JVM shim jar to load when the plugin is not on the classpath. Empty means the "
    "jar inside the installed package (`spark-steward jar`).")


class StewardConf:
    """Validated, typed view of the ``spark.steward.*`` pairs of one conf.

    Build it with :meth:`from_pairs`; every key is parsed up front so a bad value fails at attach,
    not in the middle of a job.
    """

    #: Spark keys that encrypt Spark's own transfers; blob transfers follow them (``auto``).
    SPARK_ENCRYPTION_KEYS = ("spark.network.crypto.enabled", "spark.ssl.enabled",
                             "spark.ssl.rpc.enabled")

    def __init__(self, values: Mapping[str, Any],
                 storage_options: Mapping[str, Any] | None = None, *,
                 spark_encrypts: bool = False) -> None:
        self._values = dict(values)
        self._storage_options = dict(storage_options or {})
        self.spark_encrypts = spark_encrypts

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]], *, warn_unknown: bool = True
                   ) -> "StewardConf":
        """The conf of ``(key, value)`` pairs (a SparkConf's), every spark.steward.* value
        validated; unknown keys are warned about."""
        values: dict[str, Any] = {}
        options: dict[str, Any] = {}
        spark_encrypts = False
        for name, raw in pairs:
            if name in cls.SPARK_ENCRYPTION_KEYS:
                try:
                    spark_encrypts |= _parse_bool(raw)
                except ValueError:
                    raise ConfigError(f"{name}={raw!r} is not a boolean (true or false)") from None
            if not name.startswith(PREFIX):
                continue
            if name.startswith(STORAGE_OPTION_PREFIX):
                option = name[len(STORAGE_OPTION_PREFIX):]
                if not option.isidentifier():
                    raise ConfigError(f"{name} is not valid: the part after "
                                      f"{STORAGE_OPTION_PREFIX} must be a keyword name")
                options[option] = parse_storage_option(raw)
                continue
            key = KEYS.get(name)
            if key is None:
                if warn_unknown and name != RESOLVED_KEY:
                    log.warning("%s", unknown_key_message(name))
                continue
            values[name] = key.parse(raw)
        return cls(values, options, spark_encrypts=spark_encrypts)

    def get(self, key: ConfigKey[T]) -> T:
        """The typed value of ``key``: the one set, else its default."""
        if key.name in self._values:
            return self._values[key.name]  # type: ignore[no-any-return]
        return key.default

    def is_set(self, key: ConfigKey[Any]) -> bool:
        """True when ``key`` was set explicitly."""
        return key.name in self._values

    def storage_dir(self) -> str:
        """The storage dir URL: ``spark.steward.storage.dir`` or the default under the temp dir."""
        return self.get(STORAGE_DIR) or default_storage_dir()

    def local_dir(self) -> str:
        """The host-local working directory: ``spark.steward.local.dir`` or its default."""
        return self.get(LOCAL_DIR) or default_local_dir()

    def blob_encryption(self) -> bool:
        """Whether blob transfers are encrypted (``spark.steward.blob.encryption``)."""
        mode = self.get(BLOB_ENCRYPTION)
        return self.spark_encrypts if mode == "auto" else mode == "true"

    def retry_strategy(self) -> "RetryStrategy":
        """The cleanup retry strategy these values describe."""
        kind = self.get(CLEANUP_STRATEGY)
        if kind == "none":
            return RetryStrategy.no_retry()
        if kind == "fixed-delay":
            return RetryStrategy.fixed(self.get(CLEANUP_FIXED_DELAY),
                                       self.get(CLEANUP_FIXED_ATTEMPTS))
        return RetryStrategy.exponential(self.get(CLEANUP_EXPONENTIAL_INITIAL),
                                         self.get(CLEANUP_EXPONENTIAL_MAX),
                                         self.get(CLEANUP_EXPONENTIAL_ATTEMPTS))

    def storage_options(self) -> dict[str, Any]:
        """fsspec keyword arguments from ``spark.steward.storage.option.*``."""
        return dict(self._storage_options)

    def as_dict(self) -> dict[str, Any]:
        """Effective value of every key, defaults included."""
        return {name: self.get(key) for name, key in KEYS.items()}


def parse_storage_option(raw: str) -> Any:
    """A storage option's text as the value fsspec expects (bool, int, float, else the string)."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def unknown_key_message(name: str) -> str:
    # Compare what follows the shared prefix, or every key looks close to every other.
    """The warning for an unknown spark.steward.* key, naming the closest known key."""
    suffixes = {key[len(PREFIX):]: key for key in KEYS}
    close = difflib.get_close_matches(name[len(PREFIX):], list(suffixes), n=1, cutoff=0.75)
    hint = (f"; did you mean {suffixes[close[0]]}?" if close
            else "; known keys: spark-steward conf --markdown")
    return f"unknown spark-steward key {name}{hint}"


def render_markdown_table() -> str:
    """The README configuration table, generated from :data:`KEYS`."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in KEYS.values():
        kind = key.type.name if not key.choices else " \\| ".join(f"`{c}`" for c in key.choices)
        default = f"`{key.default_text}`" if key.default_text else "(empty)"
        lines.append(f"| `{key.name}` | {kind} | {default} | {key.doc} |")
    name, kind, default, doc = STORAGE_OPTIONS_DOC
    lines.append(f"| {name} | {kind} | {default} | {doc} |")
    return "\n".join(lines)
