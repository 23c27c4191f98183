"""The cached-table service on the driver (FLIP-36): the catalog of every table cached in this
application, and the resolver the shim's optimizer rule asks when a query reads one.

A cached table's DataFrame is built on a marker leaf (the shim's ``CachedTables``).
When Spark optimizes a query that contains one, the rule calls :meth:`TableService.resolve` on
the thread that runs the query. The first time, that materializes the table: the store records
it, the original plan is written as Parquet to the storage dir by a nested Spark job, and its
manifest (files, sizes, rows, crc32c) is recorded. Every later query gets the folder to read
after a quick check of the files against the manifest (one listing). Whatever goes wrong makes
the query compute the original plan instead: missing or changed files are recomputed and
materialized again, a table that does not fit ``cache.max-bytes`` is used uncached.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
import uuid
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from spark_steward.applications import CleanupBacklog
from spark_steward.cleaner import EntryKey, RetryingCleaner, cleaner_from_conf
from spark_steward.config import CLEANUP_SHUTDOWN_TIMEOUT, CLEANUP_THREADS
from spark_steward.tables.config_keys import (CACHE_MAX_BYTES, CACHE_ORPHAN_GRACE,
                                              CACHE_SHARED_RETENTION)
from spark_steward.errors import StewardError
from spark_steward.tables.errors import CacheError, UnidentifiedCode
from spark_steward.kernel import jvm
from spark_steward.kernel.runtime import RuntimeService
from spark_steward.kernel.session import session_value
from spark_steward.lifecycle.lru import CacheUsage, choose_evictions
from spark_steward.tables.code_identity import parse_broadcasts, python_identity, unframe
from spark_steward.tables.lifecycle import TableEntry, private_key, shared_key
from spark_steward.tables.manifest import Manifest, build_manifest, find_problem
from spark_steward.tables.replicas import read_url
from spark_steward.tables.store import TableCleanup, TableStore, describe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)

#: How long invalidate() waits for the files to be gone before leaving it to the cleaner.
INVALIDATE_WAIT = 30.0


@dataclass(eq=False)
class CatalogRecord:
    """One ``cache()`` call: its original plan and, once materialized, what to read."""

    table_id: str
    source: "DataFrame"
    shared: bool
    session_uuid: str
    description: str
    entry: TableEntry | None = None
    manifest: Manifest | None = None
    last_used: float = 0.0
    holders: int = 0  # live CachedTable objects (and transparently cached DataFrames)
    closed: bool = False
    warned_unshareable: bool = False
    warned_unshared: bool = False  # told once that the storage dir is not shared
    #: A write of it left no file the driver can see: not written again, queries compute.
    unreachable: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)


@dataclass
class RemoteTables:
    """The tables one Connect session cached through the thin client."""

    session_uuid: str
    tables: dict[str, Any] = field(default_factory=dict)


class _Resolver:
    """The callback the shim's rule calls (a Python ``java.util.function.Function``)."""

    def __init__(self, service: "TableService") -> None:
        self._service = weakref.ref(service)

    def apply(self, request: str) -> str:
        service = self._service()
        return "source" if service is None else service.resolve(str(request))

    class Java:
        implements = ["java.util.function.Function"]


class TableService(RuntimeService):
    """The catalog of the application's cached tables and their store."""

    name: ClassVar[str] = "tables"
    rank: ClassVar[int] = 40
    driver_hooks: ClassVar[tuple[str, ...]] = ("spark_steward.tables.hooks:install",)
    remote_ops: ClassVar[Mapping[str, str]] = {
        op: f"spark_steward.tables.commands:serve_{op.split('.')[1]}"
        for op in ("tables.cache", "tables.invalidate", "tables.state", "tables.close")}

    def __init__(self) -> None:
        self.store: TableStore | None = None
        self._runtime: DriverRuntime | None = None
        self._records: dict[str, CatalogRecord] = {}
        self._lock = threading.Lock()
        self._resolver: _Resolver | None = None
        self._shim: Any = None
        #: Queries' reads of cached tables (not explain's): ``hits`` read files materialized
        #: before, ``misses`` materialized (or adopted) them first, ``fallbacks`` computed the
        #: original plan instead.
        self.reads: Counter[str] = Counter()
        #: Tables cached by Connect sessions (the thin client), held here for the client until
        #: it invalidates them, closes its tables or its session ends.
        self._remote: dict[str, RemoteTables] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, runtime: "DriverRuntime") -> None:
        conf = runtime.conf
        self._runtime = runtime
        cleaner: RetryingCleaner[TableCleanup] = cleaner_from_conf(conf, "table-cleanup",
                                                                    describe)
        self.store = TableStore(runtime.storage, runtime.app_id, cleaner,
                                is_dead=runtime.registry.is_dead,
                                shared_retention=conf.get(CACHE_SHARED_RETENTION))
        report = self.store.recover(conf.get(CACHE_ORPHAN_GRACE))
        if report.discarding or report.orphans:
            log.info("spark-steward cached tables: removing %d table(s) and %d orphaned path(s) "
                     "left by earlier applications; keeping %d", len(report.discarding),
                     len(report.orphans), len(report.kept))

    def _facade(self) -> Any:
        """The shim's facade, with this service's resolver installed (lazily: a job that never
        caches a table never starts the JVM-to-Python callback server)."""
        if self._shim is None:
            runtime = self._require_runtime()
            sc = runtime.sc
            jvm.ensure_callback_server(sc)
            shim = jvm.facade(sc)
            self._resolver = _Resolver(self)
            shim.call("setTableResolver", self._resolver)
            self._shim = shim
        return self._shim

    def metrics(self) -> Mapping[str, int]:
        tables = [r.entry for r in self.records() if r.entry is not None]
        return {"tables.cached": len(tables), "tables.bytes": sum(t.bytes for t in tables),
                **{f"tables.{k}": self.reads[k] for k in ("hits", "misses", "fallbacks")}}

    def cleanup_backlog(self) -> CleanupBacklog | None:
        return None if self.store is None else self.store.cleaner.backlog()

    def before_context_stop(self, runtime: "DriverRuntime") -> None:
        self._release_all()

    def stop(self, runtime: "DriverRuntime") -> None:
        self._release_all()  # an explicit detach() without spark.stop() lands here only
        if self.store is not None:
            self.store.close(runtime.conf.get(CLEANUP_SHUTDOWN_TIMEOUT))

    def _release_all(self) -> None:
        """Every table of the application goes; queries on them compute their plans."""
        if self._shim is not None:
            try:
                self._shim.call("clearTableResolver")
            except Exception as exc:  # the JVM is going away; nothing to resolve any more
                log.debug("could not clear the cached-table resolver: %s", exc)
        with self._lock:
            records = list(self._records.values())
            self._records.clear()
        for record in records:
            self._release(record, "its application stopped")

    @property
    def runtime(self) -> "DriverRuntime | None":
        """The runtime this service started in (None before start)."""
        return self._runtime

    def _require_runtime(self) -> "DriverRuntime":
        if self._runtime is None or self.store is None:
            raise CacheError("the cached-table service is not running (spark-steward detached)")
        return self._runtime

    def _require_store(self) -> TableStore:
        if self.store is None:
            raise CacheError("the cached-table service is not running (spark-steward detached)")
        return self.store

    # -- the catalog ---------------------------------------------------------------------------

    def register(self, df: "DataFrame", *, shared: bool) -> tuple[CatalogRecord, Any]:
        """A new catalog record for ``df`` and the JVM DataFrame over its marker. Analysis only."""
        self._require_runtime()
        session = df.sparkSession
        table_id = uuid.uuid4().hex[:16]
        source = jvm.to_dataframe(jvm.dataframe_handle(df), session)
        description = _describe(df)
        marker = self._facade().call("tableMarker", jvm.session_handle(session), table_id,
                                         jvm.dataframe_handle(df), description)
        record = CatalogRecord(table_id, source, shared, jvm.session_uuid(session), description)
        with self._lock:
            self._records[table_id] = record
        return record, marker

    def fresh(self, jdf: Any) -> Any:
        """``jdf`` with a query execution of its own (see ``CachedTables.fresh``)."""
        return self._facade().call("freshDataset", jdf)

    def hold(self, record: CatalogRecord, holder: object) -> None:
        """``holder`` (a Python object) refers to the table until it is garbage collected:
        tables with holders are not evicted."""
        with record.lock:
            record.holders += 1
        weakref.finalize(holder, self._unhold, record)

    @staticmethod
    def _unhold(record: CatalogRecord) -> None:
        with record.lock:
            record.holders -= 1

    def invalidate(self, record: CatalogRecord) -> None:
        """Deletes the table's files now (waiting up to 30 s for the storage to confirm; after
        that the cleaner keeps retrying); the next use materializes it again."""
        with record.lock:
            entry = record.entry
            record.entry = record.manifest = None
        if entry is not None:
            self._release_entry(entry, "invalidated", wait=INVALIDATE_WAIT)

    def close_session(self, session_uuid: str, *, wait: float = INVALIDATE_WAIT) -> int:
        """Releases every table cached in one SparkSession; queries on them afterwards compute
        their original plans. Returns how many were released."""
        with self._lock:
            records = [r for r in self._records.values() if r.session_uuid == session_uuid]
            for record in records:
                del self._records[record.table_id]
            for remote in self._remote.values():
                if remote.session_uuid == session_uuid:
                    remote.tables.clear()
        for record in records:
            self._release(record, "its session was closed", wait=wait)
        return len(records)

    # -- Connect sessions (the thin client) ----------------------------------------------------

    def hold_remote(self, session_id: str, table: Any) -> None:
        """Keeps ``table`` (a CachedTable made for Connect session ``session_id``) for it."""
        with self._lock:
            remote = self._remote.get(session_id)
            if remote is None:
                remote = self._remote[session_id] = RemoteTables(table._steward_record.session_uuid)
            remote.tables[table.table_id] = table

    def remote_table(self, session_id: str, table_id: str) -> Any:
        """The CachedTable ``table_id`` of Connect session ``session_id``: another session's
        tables are not found (CacheError)."""
        with self._lock:
            remote = self._remote.get(session_id)
            table = None if remote is None else remote.tables.get(table_id)
        if table is None:
            raise CacheError(f"no cached table {table_id!r} in this Spark Connect session (it "
                             "was closed, or another session cached it)")
        return table

    def session_closed(self, session_id: str) -> None:
        """A Connect session ended: its tables are released with the retried cleanup."""
        with self._lock:
            remote = self._remote.pop(session_id, None)
        if remote is not None:
            count = self.close_session(remote.session_uuid, wait=0.0)
            if count:
                log.info("spark-steward released %d cached table(s) of Connect session %s",
                         count, session_id)

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        with self._lock:
            remote = self._remote.get(session_id)
            tables = [] if remote is None else list(remote.tables.values())
        manifests = [m for m in (t._steward_record.manifest for t in tables) if m is not None]
        files = [f for m in manifests for f in m.files]
        owns = {"cached tables": (len(files), sum(f.size for f in files))} if tables else {}
        runtime = self._runtime
        if runtime is not None and not runtime.stopped:
            # What the session's df.cache() and localCheckpoint() hold in Spark's block managers
            # (a Connect server with spark-steward's interceptor; None elsewhere).
            held = jvm.call(runtime.sc, "connectSessionHoldings", session_id)
            if held is not None and int(held[0]) > 0:
                owns["spark caches"] = (int(held[0]), int(held[1]))
        return owns

    def _release(self, record: CatalogRecord, reason: str, wait: float = 0.0) -> None:
        with record.lock:
            record.closed = True
            entry = record.entry
            record.entry = record.manifest = None
        if entry is not None:
            self._release_entry(entry, reason, wait=wait)

    def _release_entry(self, entry: TableEntry, reason: str, *, wait: float = 0.0) -> None:
        store = self._require_store()
        try:
            submitted = store.release(entry, reason)
        except StewardError as exc:
            log.warning("could not release cached table %s (%s): %s; `spark-steward gc` "
                        "removes it", entry.id, reason, exc)
            return
        if submitted and wait > 0:
            deadline = time.monotonic() + wait
            key = EntryKey(entry.key, entry.attempt)
            while key in store.cleaner.outstanding() and time.monotonic() < deadline:
                time.sleep(0.02)

    def has_tables(self) -> bool:
        """Whether any table was cached in this application (its marker rule is in use)."""
        return self._shim is not None

    def records(self) -> list[CatalogRecord]:
        """Every table cached in this application (a snapshot of the catalog)."""
        with self._lock:
            return list(self._records.values())

    # -- resolving a query's read --------------------------------------------------------------

    def resolve(self, request: str) -> str:
        """What a query planned now reads for a table: ``files\\t<url>`` or ``source``.

        ``request`` is ``<table id>\\t<run|explain>``. Never raises: a failure is logged and
        the query computes the original plan.
        """
        table_id, _, mode = request.partition("\t")
        counted = mode != "explain"
        with self._lock:
            record = self._records.get(table_id)
        if record is None:
            log.warning("cached table %s was released (close() or the end of spark-steward); "
                        "this query computes its original plan", table_id)
            self.reads["fallbacks"] += counted
            return "source"
        try:
            with record.lock:
                url = self._usable_url(record)
                outcome = "hits" if url is not None else "misses"
                if url is None and counted and not record.closed:
                    url = self._materialize(record)
                if url is not None:
                    record.last_used = time.time()
                    self.reads[outcome] += counted
                    return f"files\t{url}"
                self.reads["fallbacks"] += counted
                return "source"
        except Exception as exc:
            log.warning("cached table %s: %s; this query computes its original plan",
                        table_id, _one_line(exc))
            self.reads["fallbacks"] += counted
            return "source"

    def _usable_url(self, record: CatalogRecord) -> str | None:
        store = self._require_store()
        entry, manifest = record.entry, record.manifest
        if entry is None or manifest is None:
            return None
        data_rel = store.data_rel(entry)
        problem = find_problem(store.storage, data_rel, manifest, full=False)
        if problem is None:
            return self._read_url(record, data_rel)
        log.warning("cached table %s (%s): %s; recomputing it from its original plan",
                    entry.key, record.description, problem)
        record.entry = record.manifest = None
        self._release_entry(entry, f"its files failed verification: {problem}")
        return None

    def _hadoop_url(self, data_rel: str) -> str:
        return jvm.hadoop_url(self._require_store().storage.url_of(data_rel), "cached tables",
                              CacheError)

    def _read_url(self, record: CatalogRecord, data_rel: str) -> str:
        return read_url(self._require_runtime(), record.source.sparkSession,
                        self._require_store().storage, data_rel)

    def _materialize(self, record: CatalogRecord) -> str | None:
        runtime = self._require_runtime()
        if record.unreachable:
            return None
        if not runtime.storage_shared:
            # Executors on other hosts would write the Parquet files into their own temp dirs.
            if not record.warned_unshared:
                record.warned_unshared = True
                log.warning("cached table %s is not materialized: spark.steward.storage.dir is "
                            "not set on this cluster (the embedded default is on the driver's "
                            "host only); its queries compute the original plan",
                            record.description)
            return None
        store = self._require_store()
        key = self._key_for(record)
        if record.shared:
            adopted = self._adopt(record, key)
            if adopted is not None:
                return adopted
            existing = store.read_entry(key)
            if existing is not None and not store.is_dead(existing.app_id):
                # another live application is writing (or just wrote) it: do not race it
                key = private_key(runtime.app_id, uuid.uuid4().hex[:12])
        entry = store.begin(key, shared=key.startswith("s-"), description=record.description)
        data_rel = store.data_rel(entry)
        try:
            self._write(record, self._hadoop_url(data_rel))
            manifest = build_manifest(store.storage, data_rel, entry.key, entry.attempt,
                                      record.source.schema.json(),
                                      runtime.conf.get(CLEANUP_THREADS))
            if not manifest.files:  # Spark writes a file even for an empty result
                record.unreachable = True
                raise CacheError(
                    f"the Parquet files the executors wrote are not visible from the driver in "
                    f"{store.storage.url_of(data_rel)}: spark.steward.storage.dir "
                    f"({store.storage.url}) must be a location every host shares (a shared "
                    "mount, s3://, hdfs://), not a path on each host's own disk")
        except BaseException:
            store.discard(entry, "its materialization failed")
            raise
        if entry.shared and self._key_for(record) != entry.key:
            # an input changed between the key and the write: the files may hold either
            store.discard(entry, "its inputs changed while it was materialized")
            log.info("cached table %s (%s): its inputs changed while it was materialized; "
                     "this query computes the original plan", entry.key, record.description)
            return None
        if not self._make_room(record, manifest.bytes):
            store.discard(entry, "it does not fit spark.steward.cache.max-bytes")
            log.warning("cached table %s (%s, %d bytes) does not fit spark.steward.cache."
                        "max-bytes=%d even after evicting every unreferenced cache; it is used "
                        "uncached", entry.key, record.description, manifest.bytes,
                        session_value(record.source.sparkSession, CACHE_MAX_BYTES,
                                      runtime.conf.get(CACHE_MAX_BYTES)))
            return None
        try:
            record.entry = store.complete(entry, manifest)
        except StewardError:  # replaced or discarded meanwhile: this attempt's files go now
            store.discard(entry, "it was replaced before it completed")
            raise
        record.manifest = manifest
        log.info("materialized cached table %s (%s): %d rows, %d bytes in %d file(s)",
                 entry.key, record.description, manifest.rows, manifest.bytes,
                 len(manifest.files))
        return self._read_url(record, data_rel)

    def _adopt(self, record: CatalogRecord, key: str) -> str | None:
        """Reuses the shared table ``key`` another application materialized, after verifying
        every file against its crc32c (once per application)."""
        store = self._require_store()
        found = store.lookup(key)
        if found is None:
            return None
        entry, manifest = found
        data_rel = store.data_rel(entry)
        store.add_user(key)
        problem = find_problem(store.storage, data_rel, manifest, full=True,
                               threads=self._require_runtime().conf.get(CLEANUP_THREADS))
        if problem is not None:
            log.warning("shared cached table %s: %s; materializing it again", key, problem)
            store.discard(entry, f"its files failed verification: {problem}")
            return None
        record.entry, record.manifest = entry, manifest
        log.info("reusing shared cached table %s (%s), materialized by %s", key,
                 record.description, entry.app_id)
        return self._read_url(record, data_rel)

    def _key_for(self, record: CatalogRecord) -> str:
        runtime = self._require_runtime()
        if record.shared:
            text, reason = self._shared_identity(record)
            if text is not None:
                return shared_key(hashlib.sha256(text.encode("utf-8")).hexdigest())
            if not record.warned_unshareable:
                record.warned_unshareable = True
                log.info("cached table %s (%s) is cached for this application only, not "
                         "shared: %s", record.table_id, record.description, reason)
        return private_key(runtime.app_id, record.table_id)

    def _shared_identity(self, record: CatalogRecord) -> tuple[str | None, str]:
        """(the text that identifies what decides ``record``'s rows, "") or (None, why it
        cannot be had): the shim's part (plan, schema, options, SQL settings, input files)
        and the code of every Python function in the plan (:mod:`.code_identity`)."""
        answer = unframe(bytes(self._facade().call(
            "sharedTableIdentity", jvm.dataframe_handle(record.source))).decode("utf-8"))
        if answer[0] != "ok":
            return None, answer[1]
        runtime = self._require_runtime()
        context = (jvm.broadcast_id(runtime.context_broadcast) if runtime.context_broadcast
                   else None)
        commands = [(base64.b64decode(answer[i]), parse_broadcasts(answer[i + 1]))
                    for i in range(2, len(answer), 2)]
        try:
            code = python_identity(commands, context) if commands else ""
        except UnidentifiedCode as exc:
            return None, str(exc)
        return f"{answer[1]}\n{code}", ""

    def _write(self, record: CatalogRecord, url: str) -> None:
        sc = self._require_runtime().sc
        before = sc.getLocalProperty("spark.job.description")
        sc.setJobDescription(f"spark-steward: materializing cached table {record.table_id} "
                             f"({record.description})")
        try:
            record.source.write.mode("errorifexists").parquet(url)
        finally:
            sc.setJobDescription(before)  # type: ignore[arg-type]

    def _make_room(self, record: CatalogRecord, incoming: int) -> bool:
        """Evicts least recently used unreferenced tables until ``incoming`` bytes fit."""
        limit = session_value(record.source.sparkSession, CACHE_MAX_BYTES,
                              self._require_runtime().conf.get(CACHE_MAX_BYTES))
        if limit <= 0:
            return True
        others = [r for r in self.records() if r is not record and r.entry is not None]
        candidates = [CacheUsage(r.table_id, r.entry.bytes if r.entry else 0, r.last_used,
                                 r.holders > 0 or _busy(r)) for r in others]
        chosen = choose_evictions(candidates, sum(c.bytes for c in candidates), incoming, limit)
        if chosen is None:
            return False
        by_id = {r.table_id: r for r in others}
        for table_id in chosen:
            victim = by_id[table_id]
            if not victim.lock.acquire(blocking=False):  # being read or written right now
                log.info("not evicting cached table %s: in use", victim.table_id)
                continue
            try:
                entry = victim.entry
                victim.entry = victim.manifest = None
            finally:
                victim.lock.release()
            if entry is not None:
                log.info("evicting cached table %s (%s, %d bytes, unreferenced, least recently "
                         "used) to fit spark.steward.cache.max-bytes=%d", entry.key,
                         victim.description, entry.bytes, limit)
                self._release_entry(entry, "evicted to fit spark.steward.cache.max-bytes")
        return True


def _busy(record: CatalogRecord) -> bool:
    """Whether another thread is resolving or materializing ``record`` now."""
    if record.lock.acquire(blocking=False):
        record.lock.release()
        return False
    return True


def _describe(df: "DataFrame") -> str:
    """A short text of the plan for ``cache ls`` and log lines: its top operators."""
    try:
        plan = jvm.dataframe_handle(df).queryExecution().analyzed()
        names: list[str] = []
        node = plan
        while node is not None and len(names) < 4:
            names.append(str(node.nodeName()))
            children = node.children()
            node = children.head() if children.nonEmpty() else None
        return " <- ".join(names)[:200]
    except Exception:  # a description is for humans; never fail a cache() for it
        return ""


def _one_line(exc: BaseException) -> str:
    if hasattr(exc, "java_exception"):
        return jvm.java_message(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
