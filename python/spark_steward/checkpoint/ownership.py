"""Ownership of Spark's own reliable checkpoints (``sc.setCheckpointDir`` + ``df.checkpoint()``
/ ``rdd.checkpoint()``) by the checkpoint store, for jobs that never heard of spark-steward.

- The ``<dir>/<uuid>`` folder ``setCheckpointDir`` creates is registered as a pending
  ``spark-context-dir`` checkpoint right away: every RDD checkpoint of the context is written
  below it, so whatever is written later is owned before it is written.
- Each checkpointed RDD gets its own entry (``spark-rdd``): pending when ``rdd.checkpoint()``
  marks it, completed once its folder exists.
- Spark's ContextCleaner (with ``spark.cleaner.referenceTracking.cleanCheckpoints``, turned on
  here unless set) tries the delete once when nothing references the RDD; its
  ``checkpointCleaned`` event makes the store discard the entry, retried until it is gone.
- At ``spark.stop()`` every entry of the application is discarded; after a crash the next attach
  or ``spark-steward gc`` does it (the application is dead).
- On a Spark Connect server no user call reaches Python: a client's ``df.checkpoint()`` runs in
  the server's JVM. The runtime hosted there gives the context a checkpoint dir in the
  application's owned storage when it has none (so the call works at all), and tells each
  ``rdd-<id>`` folder's session from the jobs' Connect tags: the first job of a session whose
  stages hold RDD ``<id>`` and after which the folder exists. The folder is that session's,
  discarded when the session closes or expires (a client killed without releasing its
  DataFrames included); an untagged folder is the application's.

Nothing here changes what the user's calls return or raise.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable

from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint import spark_checkpoints as hooks
from spark_steward.checkpoint.lifecycle import (CheckpointEntry, CheckpointKind,
                                                 CheckpointState, spark_series)
from spark_steward.checkpoint.store import CheckpointStore
from spark_steward.checkpoint.config_keys import CHECKPOINTS_TRANSPARENT
from spark_steward.errors import StewardError
from spark_steward.kernel import jvm
from spark_steward.kernel.events import (CheckpointCleaned, JobEnd, JobStart, RddCleaned,
                                         SparkEvent)
from spark_steward.kernel.sessions import session_of_tags

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from spark_steward.checkpoint.service import CheckpointService
    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)


class SparkCheckpointOwner:
    """Listener of the checkpoint hooks; registers into ``store`` under ``_spark.<app id>``."""

    def __init__(self, runtime: "DriverRuntime", store: CheckpointStore) -> None:
        self.runtime = runtime
        self.store = store
        self.series = spark_series(runtime.app_id)
        self._rdds: dict[int, CheckpointEntry] = {}
        self._dirs: dict[str, CheckpointEntry] = {}
        #: ``df.checkpoint()`` results the store served (replace-builtin), by their RDD's id
        self._served: dict[int, CheckpointEntry] = {}
        self._lock = threading.Lock()
        self._unsubscribe: Callable[[], None] | None = None
        self.active = False
        #: Running jobs of Connect sessions: job id -> (session id, the RDDs of its stages).
        self._session_jobs: dict[int, tuple[str, frozenset[int]]] = {}
        #: What each open Connect session owns: session id -> {rdd id: (entry, files, bytes)}.
        self._by_session: dict[str, dict[int, tuple[CheckpointEntry, int, int]]] = {}
        #: The checkpoint dir the session folders are looked for in (None: no dir).
        self._context_dir: str | None = None

    def start(self) -> None:
        """Installs the hooks that own Spark's checkpoints, when ``checkpoints.transparent`` is on.
        """
        if not self.runtime.conf.get(CHECKPOINTS_TRANSPARENT):
            return
        hooks.enable_clean_checkpoints(self.runtime.sc)
        hooks.install_clean_watch(self.runtime.sc)
        hooks.install_checkpoint_hooks(_Dispatch())
        self._unsubscribe = self.runtime.dispatcher.subscribe(self._on_event,
                                                              "spark-checkpoints")
        self.active = True
        self._default_dir_for_connect()
        # A checkpoint dir set before attach (explicit attach in a notebook) is owned from now.
        existing = hooks.checkpoint_dir(self.runtime.sc)
        if existing:
            self.checkpoint_dir_set(self.runtime.sc, existing)

    def stop(self) -> None:
        """Discards every entry of this application (at ``spark.stop()``)."""
        if not self.active:
            return
        self.active = False
        if self._unsubscribe is not None:
            self._unsubscribe()
        for entry in self.store.entries(self.series):
            self.store.discard(entry, "its application stopped")

    def _on(self, sc: "SparkContext", session: "SparkSession | None" = None) -> bool:
        """On for the DataFrame's own session when known, else pyspark's active one."""
        return self.active and sc is self.runtime.sc and self.runtime.enabled_for(session)

    # -- hook callbacks --------------------------------------------------------------------------

    def checkpoint_dir_set(self, sc: "SparkContext", url: str) -> None:
        """Hook: ``sc.setCheckpointDir(url)`` was called; the folder is recorded as this
        application's."""
        if not self._on(sc):
            return
        with self._lock:
            self._context_dir = url
            if url in self._dirs:
                return
            self._dirs[url] = self.store.begin(self.series, kind=CheckpointKind.SPARK_CONTEXT_DIR,
                                               data=url)

    def before_rdd_checkpoint(self, sc: "SparkContext", rdd_id: int, path: str | None) -> None:
        """Hook: Spark is about to write RDD ``rdd_id``'s checkpoint at ``path``; registered before
        any data."""
        if not self._on(sc) or path is None:
            return
        self._register(rdd_id, path, written=False)

    def dataframe_checkpointed(self, sc: "SparkContext", rdd_id: int, path: str | None,
                               written: bool, session: "SparkSession | None" = None) -> None:
        """Hook: a DataFrame was checkpointed into ``path``; registered so it is cleaned with the
        rest."""
        if not self._on(sc, session) or path is None:
            return
        self._register(rdd_id, path, written=written)

    def _register(self, rdd_id: int, path: str, *, written: bool) -> None:
        with self._lock:
            entry = self._rdds.get(rdd_id)
            if entry is None:
                entry = self.store.begin(self.series, kind=CheckpointKind.SPARK_RDD, data=path)
            if written and entry.state is CheckpointState.PENDING:
                entry = self.store.complete(entry)
            self._rdds[rdd_id] = entry

    # -- events ------------------------------------------------------------------------------

    def serve(self, rdd_id: int, entry: CheckpointEntry) -> bool:
        """Discards ``entry`` once Spark's cleaner cleans RDD ``rdd_id`` (which the caller has
        registered with it); False when this owner is not listening (then it goes at stop)."""
        if not self.active:
            return False
        with self._lock:
            self._served[rdd_id] = entry
        return True

    def _on_event(self, event: SparkEvent) -> None:
        if isinstance(event, RddCleaned):
            with self._lock:
                served = self._served.pop(event.rdd_id, None)
            if served is not None:
                self.store.discard(served, f"Spark's cleaner dropped RDD {event.rdd_id}, which "
                                           "read it")
        elif isinstance(event, CheckpointCleaned):
            with self._lock:
                entry = self._rdds.pop(event.rdd_id, None)
            if entry is not None:
                self.store.discard(entry, f"Spark's cleaner dropped RDD {event.rdd_id}")
        elif isinstance(event, JobStart):
            session = session_of_tags(event.job_tags)
            if session is not None and self._context_dir is not None:
                with self._lock:
                    self._session_jobs[event.job_id] = (session[0], frozenset(event.rdd_ids))
        elif isinstance(event, JobEnd):
            self._complete_written()
            with self._lock:
                job = self._session_jobs.pop(event.job_id, None)
            if job is not None:
                self._claim_for_session(*job)

    def _complete_written(self) -> None:
        """Lazily checkpointed RDDs are written by the first job that computes them."""
        with self._lock:
            waiting = [(rdd, e) for rdd, e in self._rdds.items()
                       if e.state is CheckpointState.PENDING]
        for rdd_id, entry in waiting:
            try:
                written = self.store.data_exists(entry)
            except Exception as exc:  # noqa: BLE001 - a probe; the entry stays pending
                log.debug("could not look at %s: %s", entry.data, exc)
                continue
            if written:
                with self._lock:
                    if self._rdds.get(rdd_id) is entry:
                        self._rdds[rdd_id] = self.store.complete(entry)

    # -- Connect sessions ----------------------------------------------------------------------

    def _default_dir_for_connect(self) -> None:
        """A runtime hosted beside a driver (a Connect server) gives a context without a
        checkpoint dir one in the application's owned storage: a client's ``df.checkpoint()``
        fails on plain Spark Connect until an operator sets one."""
        runtime = self.runtime
        if not runtime.hosted or hooks.checkpoint_dir(runtime.sc) is not None:
            return
        if not runtime.storage_shared:
            log.info("df.checkpoint() from Connect clients needs a checkpoint dir every executor "
                     "reaches: set spark.checkpoint.dir, or spark.steward.storage.dir (then "
                     "spark-steward gives the server one it owns)")
            return
        rel = f"{ApplicationRegistry.owned_path(runtime.app_id)}/spark-checkpoints"
        try:
            url = jvm.hadoop_url(runtime.storage.url_of(rel))
            runtime.sc.setCheckpointDir(url)
        except Exception as exc:  # noqa: BLE001 - Spark's own call or the URL: logged, no dir
            log.warning("could not give this Connect server a checkpoint dir (%s): %s", rel, exc)
            return
        log.info("Connect clients' df.checkpoint() writes below %s (owned by spark-steward; "
                 "set spark.checkpoint.dir to choose another dir)", url)

    def _claim_for_session(self, session_id: str, rdd_ids: frozenset[int]) -> None:
        """After a job of ``session_id``: the ``rdd-<id>`` folders of its RDDs that nobody has
        claimed become that session's."""
        folder = self._context_dir
        if folder is None or not rdd_ids:
            return
        try:
            at = self.store.storage_at(folder)
            names = at.list_names()
        except (StewardError, OSError) as exc:
            log.debug("could not list %s: %s", folder, exc)
            return
        for name in names:
            number = name[len("rdd-"):] if name.startswith("rdd-") else ""
            if not number.isdigit() or int(number) not in rdd_ids:
                continue
            rdd_id = int(number)
            with self._lock:
                if rdd_id in self._rdds:
                    continue  # claimed already (an earlier job, or the user's own hook)
            try:
                files, size = at.usage(name)
            except (StewardError, OSError):
                files, size = 0, 0
            url = f"{folder.rstrip('/')}/{name}"
            self._register(rdd_id, url, written=True)
            with self._lock:
                entry = self._rdds.get(rdd_id)
                if entry is not None:
                    self._by_session.setdefault(session_id, {})[rdd_id] = (entry, files, size)

    def session_closed(self, session_id: str) -> None:
        """The session's checkpoint folders are discarded (retried until gone)."""
        with self._lock:
            owned = self._by_session.pop(session_id, {})
            for rdd_id in owned:
                self._rdds.pop(rdd_id, None)
        for rdd_id, (entry, _, _) in owned.items():
            self.store.discard(entry, f"its Connect session {session_id} closed")

    def session_owns(self, session_id: str) -> dict[str, tuple[int, int]]:
        """``{"checkpoints": (files, bytes)}`` of the session's folders, as claimed."""
        with self._lock:
            owned = list(self._by_session.get(session_id, {}).values())
        if not owned:
            return {}
        return {"checkpoints": (sum(f for _, f, _ in owned), sum(b for _, _, b in owned))}


_owner: SparkCheckpointOwner | None = None


def install(service: "CheckpointService") -> None:
    """The checkpoint service's driver hook (``CheckpointService.driver_hooks``): the owner of
    Spark's own checkpoints for this application, kept on the service for its stop."""
    global _owner
    assert service.runtime is not None and service.store is not None
    owner = SparkCheckpointOwner(service.runtime, service.store)
    owner.start()
    service.spark_checkpoints = _owner = owner


class _Dispatch:
    """The hooks call this; it forwards to the owner of the running application, if any."""

    @staticmethod
    def _owner() -> SparkCheckpointOwner | None:
        owner = _owner
        return owner if owner is not None and not owner.runtime.stopped else None

    def before_checkpoint_dir(self, sc: "SparkContext", requested_dir: str | None) -> None:
        return None

    def checkpoint_dir_set(self, sc: "SparkContext", actual_url: str | None) -> None:
        owner = self._owner()
        if owner is not None and actual_url:
            owner.checkpoint_dir_set(sc, actual_url)

    def before_rdd_checkpoint(self, sc: "SparkContext", rdd_id: int, path: str | None) -> None:
        owner = self._owner()
        if owner is not None:
            owner.before_rdd_checkpoint(sc, rdd_id, path)

    def dataframe_checkpointed(self, sc: "SparkContext", rdd_id: int, path: str | None,
                               written: bool, session: "SparkSession | None" = None) -> None:
        owner = self._owner()
        if owner is not None:
            owner.dataframe_checkpointed(sc, rdd_id, path, written, session)
