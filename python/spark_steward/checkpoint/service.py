"""The checkpoint service on the driver: Spark glue around
:class:`~spark_steward.checkpoint.store.CheckpointStore`.

At attach it builds the store on the storage dir and runs failover (FLIP-270): whatever a dead
application left pending or marked for deletion is cleaned on the IO pool, orphaned data past
``checkpoints.orphan-grace`` removed. It serves named series (:class:`CheckpointSeries`), owns
Spark's own reliable checkpoints (:mod:`spark_steward.checkpoint.spark_checkpoints`), and at
``spark.stop()`` waits up to ``cleanup.shutdown-timeout`` for outstanding cleanup.
"""

from __future__ import annotations

import builtins
import logging
import warnings
from dataclasses import dataclass
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from spark_steward.applications import CleanupBacklog
from spark_steward.checkpoint import data
from spark_steward.checkpoint import remote as remote_checkpoints
from spark_steward.checkpoint.lifecycle import (CheckpointEntry, CheckpointKind,
                                                 CheckpointState, spark_series, validate_series)
from spark_steward.checkpoint.merging.dataframes import ARTIFACT_FORMAT as MERGED_FORMAT
from spark_steward.checkpoint.merging.dataframes import restore_merged, save_merged
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import OrphanKey, RetryingCleaner, cleaner_from_conf
from spark_steward.checkpoint.config_keys import (CHECKPOINTS_COMPRESSION, CHECKPOINTS_MERGING,
                                                  CHECKPOINTS_ORPHAN_GRACE, CHECKPOINTS_RETAINED)
from spark_steward.config import CLEANUP_SHUTDOWN_TIMEOUT
from spark_steward.checkpoint.errors import CheckpointCorrupt, CheckpointError
from spark_steward.errors import StewardError
from spark_steward.kernel import jvm, remote_client
from spark_steward.kernel.runtime import RuntimeService, runtime_for
from spark_steward.kernel.session import require_classic, session_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)

ARTIFACT_FORMAT = "spark-steward-rows/1"


def describe_key(key: CheckpointCleanup) -> str:
    """A cleanup key as the cleaner's log lines name it."""
    return key.describe() if isinstance(key, OrphanKey) else f"checkpoint {key.describe()}"


class CheckpointService(RuntimeService):
    """The application's checkpoint store and the owner of Spark's own checkpoints."""

    name: ClassVar[str] = "checkpoints"
    rank: ClassVar[int] = 30
    # Ownership of Spark's checkpoints first, then the replacement of df.checkpoint().
    remote_ops: ClassVar[Mapping[str, str]] = {
        op: f"spark_steward.checkpoint.commands:serve_{op.split('.')[1]}"
        for op in ("checkpoints.save", "checkpoints.latest", "checkpoints.restore",
                   "checkpoints.ls", "checkpoints.drop")}
    driver_hooks: ClassVar[tuple[str, ...]] = ("spark_steward.checkpoint.ownership:install",
                                               "spark_steward.checkpoint.replace_builtin:install")

    def __init__(self) -> None:
        self.store: CheckpointStore | None = None
        self._runtime: DriverRuntime | None = None
        self.spark_checkpoints: Any = None

    @property
    def runtime(self) -> "DriverRuntime | None":
        """The runtime this service started in (None before start)."""
        return self._runtime

    def start(self, runtime: "DriverRuntime") -> None:
        conf = runtime.conf
        self._runtime = runtime
        cleaner: RetryingCleaner[CheckpointCleanup] = cleaner_from_conf(
            conf, "checkpoint-cleanup", describe_key)
        self.store = CheckpointStore(runtime.storage, runtime.app_id, cleaner,
                                     is_dead=runtime.registry.is_dead)
        report = self.store.recover(conf.get(CHECKPOINTS_ORPHAN_GRACE))
        if report.discarding or report.orphans:
            log.info("spark-steward checkpoint failover: cleaning %d checkpoint(s) and %d "
                     "orphaned folder(s) left by earlier applications; keeping %d",
                     len(report.discarding), len(report.orphans), len(report.kept))
        for path in report.corrupt:
            log.warning("checkpoint entry %s could not be read or fails verification; its "
                        "series' orphans are left alone (spark-steward checkpoints ls)",
                        runtime.storage.url_of(path))

    def metrics(self) -> Mapping[str, int]:
        """Checkpoints the store knows (this application's and those it cleans up after), by
        state: ``checkpoints.pending``, ``.completed``, ``.marked_for_deletion``."""
        if self.store is None:
            return {}
        states = Counter(e.state for e in self.store.entries())
        return {"checkpoints.pending": states[CheckpointState.PENDING],
                "checkpoints.completed": states[CheckpointState.COMPLETED],
                "checkpoints.marked_for_deletion": states[CheckpointState.DISCARDING]}

    def cleanup_backlog(self) -> CleanupBacklog | None:
        return None if self.store is None else self.store.cleaner.backlog()

    def session_closed(self, session_id: str) -> None:
        if self.spark_checkpoints is not None:
            self.spark_checkpoints.session_closed(session_id)

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        if self.spark_checkpoints is None:
            return {}
        owns: Mapping[str, tuple[int, int]] = self.spark_checkpoints.session_owns(session_id)
        return owns

    def before_context_stop(self, runtime: "DriverRuntime") -> None:
        if self.spark_checkpoints is not None:
            self.spark_checkpoints.stop()

    def stop(self, runtime: "DriverRuntime") -> None:
        store = self.store
        if store is None:
            return
        for entry in store.entries():
            if entry.app_id != runtime.app_id:
                continue
            if entry.state is CheckpointState.PENDING:
                store.discard(entry, "its application stopped before it completed")
            elif entry.kind is CheckpointKind.SPARK_DATAFRAME:
                store.discard(entry, "its application stopped")
        store.close(runtime.conf.get(CLEANUP_SHUTDOWN_TIMEOUT))

    def checkpoint_dataframe(self, df: "DataFrame") -> "DataFrame":
        """``df.checkpoint()`` with ``replace-builtin``: a merged save into the application's
        ``_spark.<app id>`` series, returned as a DataFrame over the saved segments."""
        store = self.require_store()
        assert self._runtime is not None
        series = spark_series(self._runtime.app_id)
        number = save_merged(self._runtime, store, series, df, None,
                             kind=CheckpointKind.SPARK_DATAFRAME)
        entry = store.get_completed(series, number)
        result = restore_merged(df.sparkSession, store, entry,
                                store.metadata.read_artifact(series, number))
        self._release_when_cleaned(result, entry)
        return result

    def _release_when_cleaned(self, df: "DataFrame", entry: CheckpointEntry) -> None:
        """Registers the RDD that reads ``entry`` with Spark's ContextCleaner, so the entry is
        discarded once nothing on the JVM references it (as Spark cleans its own checkpoints);
        without the cleaner (or ``checkpoints.transparent=false``) it goes at stop."""
        owner = self.spark_checkpoints
        if owner is None or not owner.active:
            return
        sc = df.sparkSession.sparkContext
        plan = jvm.dataframe_handle(df).queryExecution().logical()
        rdd = cleaner = None
        try:
            if str(plan.nodeName()) != "LogicalRDD":
                return
            rdd = plan.rdd()
            cleaner = jvm.context_handle(sc).cleaner()
            if cleaner.isDefined() and owner.serve(int(rdd.id()), entry):
                cleaner.get().registerRDDForCleanup(rdd)
        finally:
            jvm.release(rdd, plan, cleaner)

    # -- named series ------------------------------------------------------------------------

    def require_store(self) -> CheckpointStore:
        """The running checkpoint store; CheckpointError once spark-steward is detached."""
        if self.store is None:
            raise CheckpointError("the checkpoint store is not running (spark-steward detached)")
        return self.store


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint of a series, as :meth:`CheckpointSeries.ls` reports it."""

    series: str
    id: int
    state: str
    app_id: str
    created_at: float
    completed_at: float | None
    rows: int | None
    bytes: int | None


class CheckpointSeries:
    """A named series of DataFrame checkpoints: :meth:`save`, :meth:`latest`, :meth:`restore`,
    :meth:`ls`, :meth:`drop`. Build it with :func:`spark_steward.checkpoints`."""

    def __init__(self, name: str, retained: int | None = None,
                 spark: "SparkSession | None" = None) -> None:
        self.name = validate_series(name, internal_ok=False)
        if retained is not None and (not isinstance(retained, int) or retained < 1):
            raise CheckpointError(f"retained={retained!r} for series {name!r} is not valid: "
                                  "expected a whole number of at least 1")
        if spark is not None and remote_client.connect_session(spark) is None:
            require_classic(spark)  # at the call that names the session, not at a later save
        self._retained = retained
        self._spark = spark

    def __repr__(self) -> str:
        return f"CheckpointSeries({self.name!r})"

    def _service(self, spark: "SparkSession | None") -> tuple["DriverRuntime", CheckpointService]:
        runtime = runtime_for(spark or self._spark)
        return runtime, runtime.service(CheckpointService)

    def retained(self, runtime: "DriverRuntime") -> int:
        """How many completed checkpoints the series keeps (its own setting or
        ``checkpoints.retained``)."""
        return self._retained if self._retained is not None else \
            runtime.conf.get(CHECKPOINTS_RETAINED)

    def save(self, df: "DataFrame") -> int:
        """Writes ``df`` from the executors, completes the checkpoint and returns its id.

        The pending entry is durable before any data is written; a failed save is discarded
        (repeatably) and re-raised. Older completed checkpoints beyond ``retained`` are subsumed.
        With ``checkpoints.file-merging.enabled`` (the default) the partitions become segments
        of a few physical files.
        """
        remote = remote_client.connect_session(df)
        if remote is not None:
            return remote_checkpoints.save(remote, self.name, self._retained, df)
        runtime, service = self._service(df.sparkSession)
        store = service.require_store()
        runtime.require_shared_storage("checkpoints")
        if session_value(df.sparkSession, CHECKPOINTS_MERGING,
                         runtime.conf.get(CHECKPOINTS_MERGING)):
            return save_merged(runtime, store, self.name, df, self.retained(runtime))
        return self._save_files(runtime, store, df)

    def _save_files(self, runtime: "DriverRuntime", store: CheckpointStore, df: "DataFrame"
                    ) -> int:
        """One checksummed file per partition (file merging off)."""
        codec = session_value(df.sparkSession, CHECKPOINTS_COMPRESSION,
                              runtime.conf.get(CHECKPOINTS_COMPRESSION))

        def write(folder_url: str) -> list[data.DataFile]:
            # Through the module: the crash suite intercepts data.write_dataframe.
            return data.write_dataframe(df, data.hadoop_url(folder_url), codec)

        return save_files(store, self.name, write, df.schema.json(), self.retained(runtime))

    def latest(self, spark: "SparkSession | None" = None) -> "DataFrame":
        """The newest completed checkpoint as a DataFrame (also one an earlier application
        wrote); CheckpointNotFound when the series has none."""
        remote = remote_client.connect_session(spark or self._spark)
        if remote is not None:
            return remote_checkpoints.read(remote, self.name, None)
        runtime, service = self._service(spark)
        store = service.require_store()
        store.refresh(self.name)
        return self._read(runtime, store, store.latest(self.name), spark)

    def restore(self, checkpoint_id: int, spark: "SparkSession | None" = None) -> "DataFrame":
        """Completed checkpoint ``checkpoint_id`` of this series as a DataFrame."""
        remote = remote_client.connect_session(spark or self._spark)
        if remote is not None:
            return remote_checkpoints.read(remote, self.name, int(checkpoint_id))
        runtime, service = self._service(spark)
        store = service.require_store()
        store.refresh(self.name)
        return self._read(runtime, store, store.get_completed(self.name, int(checkpoint_id)),
                          spark)

    def ls(self, spark: "SparkSession | None" = None) -> "builtins.list[CheckpointInfo]":
        """Every checkpoint of the series with its state, oldest first."""
        remote = remote_client.connect_session(spark or self._spark)
        if remote is not None:
            return [CheckpointInfo(**item) for item in remote_checkpoints.ls(remote, self.name)]
        _, service = self._service(spark)
        store = service.require_store()
        store.refresh(self.name)
        return [CheckpointInfo(e.series, e.number, e.state.value, e.app_id, e.created_at,
                               e.completed_at, e.rows, e.bytes)
                for e in store.entries(self.name)]

    def drop(self, spark: "SparkSession | None" = None) -> "builtins.list[int]":
        """Discards every completed checkpoint of the series, repeatably on the cleanup pool
        (for merged ones: every physical file no other checkpoint needs); returns their ids.
        Saves still running are left to finish."""
        remote = remote_client.connect_session(spark or self._spark)
        if remote is not None:
            return remote_checkpoints.drop(remote, self.name)
        _, service = self._service(spark)
        store = service.require_store()
        store.refresh(self.name)
        doomed = [e for e in store.entries(self.name) if e.state is CheckpointState.COMPLETED]
        for entry in doomed:
            store.discard(entry, "its series was deleted")
        return [e.number for e in doomed]

    def list(self, spark: "SparkSession | None" = None) -> "builtins.list[CheckpointInfo]":
        """Deprecated name of :meth:`ls` (one verb per act across spark-steward)."""
        warnings.warn("CheckpointSeries.list() is deprecated: use CheckpointSeries.ls()",
                      DeprecationWarning, stacklevel=2)
        return self.ls(spark)

    def delete(self, spark: "SparkSession | None" = None) -> "builtins.list[int]":
        """Deprecated name of :meth:`drop` (one verb per act across spark-steward)."""
        warnings.warn("CheckpointSeries.delete() is deprecated: use CheckpointSeries.drop()",
                      DeprecationWarning, stacklevel=2)
        return self.drop(spark)

    def _read(self, runtime: "DriverRuntime", store: CheckpointStore, entry: CheckpointEntry,
              spark: "SparkSession | None") -> "DataFrame":
        from pyspark.sql import SparkSession

        session = spark or self._spark or SparkSession.getActiveSession()
        if session is None:
            raise CheckpointError("no active SparkSession to restore into")
        runtime.require_shared_storage("checkpoints")
        artifact = store.metadata.read_artifact(entry.series, entry.number)
        if artifact.get("format") == MERGED_FORMAT:
            return restore_merged(session, store, entry, artifact)
        try:
            files = [data.DataFile(**f) for f in artifact["files"]]
            schema = artifact["schema"]
        except (KeyError, TypeError) as exc:
            raise CheckpointCorrupt(f"checkpoint {entry.id}: artifact lacks {exc}") from None
        sizes = {e.path.rsplit("/", 1)[-1]: e.size for e in store.storage.walk_files(entry.data)}
        for f in files:
            if f.name not in sizes:
                raise CheckpointCorrupt(f"checkpoint {entry.id}: data file "
                                        f"{store.storage.url_of(entry.data + '/' + f.name)} "
                                        "is missing")
            if sizes[f.name] != f.bytes:
                raise CheckpointCorrupt(f"checkpoint {entry.id}: data file "
                                        f"{store.storage.url_of(entry.data + '/' + f.name)} has "
                                        f"{sizes[f.name]} bytes, recorded {f.bytes}")
        return data.read_dataframe(session, data.hadoop_url(store.storage.url_of(entry.data)),
                                   files, schema)


def save_files(store: CheckpointStore, series: str,
               write: Callable[[str], list[data.DataFile]], schema: str,
               retained: int | None) -> int:
    """A file-per-partition save, with no Spark in it: the pending entry, then ``write`` (given
    the data folder's URL; the executors' job), then the artifact and the completed entry,
    subsuming beyond ``retained``. Any failure discards the pending checkpoint and re-raises.
    Apart from the Spark job so the crash model (tests/unit/test_checkpoint_crash_model.py)
    runs this very sequence."""
    entry = store.begin(series)
    try:
        files = write(store.storage.url_of(entry.data))
        store.require_visible(entry, {f"{entry.data}/{f.name}": f.bytes for f in files})
        _remove_unlisted(store, entry, {f.name for f in files})
        artifact = {
            "format": ARTIFACT_FORMAT, "series": entry.series, "id": entry.number,
            "app_id": entry.app_id, "schema": schema, "files": [f.__dict__ for f in files],
        }
        done = store.complete(entry, artifact, rows=sum(f.rows for f in files),
                              bytes_=sum(f.bytes for f in files), files=len(files),
                              retained=retained)
    except BaseException as exc:
        store.discard(entry, f"save failed: {type(exc).__name__}")
        raise
    return done.number


def _remove_unlisted(store: CheckpointStore, entry: CheckpointEntry, listed: set[str]) -> None:
    """Files of task attempts that did not count (retries, speculation) go at once."""
    for item in store.storage.walk_files(entry.data):
        name = item.path.rsplit("/", 1)[-1]
        if name not in listed:
            try:
                store.storage.delete(item.path)
            except StewardError as exc:  # the folder goes with the checkpoint anyway
                log.info("could not remove %s now: %s", item.path, exc)
