"""The blob service on the driver: Spark glue around :class:`~spark_steward.blob.depot.BlobDepot`.

It starts the blob server on ``spark.driver.host`` before the executor context is broadcast (so
the context carries the port), feeds job and task events into the ledger, ticks staged cleanup
every ``spark.steward.blob.retention.interval``, opens and closes owner scopes (a local property
every job submitted in the scope carries), takes over blobs of dead applications found in the
HA storage, and removes everything of the application at ``spark.stop()``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator, Mapping

from spark_steward.applications import ApplicationRegistry, CleanupBacklog
from spark_steward.blob import tls
from spark_steward.blob.connect_artifacts import ConnectArtifacts
from spark_steward.blob.config_keys import (BLOB_HA, BLOB_NETWORK_TIMEOUT, BLOB_RETENTION_INTERVAL,
                                            BLOB_SERVER_HANDSHAKE_TIMEOUT,
                                            BLOB_SERVER_MAX_CONNECTIONS, BLOB_SERVER_MAX_FRAME,
                                            BLOB_SERVER_MAX_UNAUTHENTICATED,
                                            BLOB_SERVER_MAX_UNAUTHENTICATED_PER_PEER,
                                            BLOB_SERVER_PORT, BLOB_TRANSPARENT, encryption_on)
from spark_steward.blob.depot import TRANSFER_SOURCES, BlobDepot
from spark_steward.blob.keys import APPLICATION_SCOPE, validate_scope_name
from spark_steward.blob.server import BlobServer
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore
from spark_steward.config import STORAGE_DIR
from spark_steward.blob.errors import ScopeError
from spark_steward.errors import StewardError
from spark_steward.kernel.events import JobEnd, JobStart, SparkEvent, TaskEnd
from spark_steward.kernel.runtime import RuntimeService

if TYPE_CHECKING:
    from pyspark import SparkContext

    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)

SCOPE_PROPERTY = "spark.steward.scope"
# Folders of an application below <local dir>/<appId> that the blob service owns.
def dead_application_blobs(registry: ApplicationRegistry, own_app: str) -> list[str]:
    """HA folders ``apps/<app>/blobs`` of applications that are no longer alive.

    An application without a readable record is left alone: absence of proof is not death.
    """
    storage = registry.storage
    return [f"apps/{app_id}/blobs" for app_id in storage.list_names("apps")
            if app_id != own_app and storage.exists(f"apps/{app_id}/blobs")
            and registry.is_dead(app_id)]


def _still_dead(registry: ApplicationRegistry, rel: str) -> bool:
    """Asked right before a dead application's blob folder ``apps/<app>/blobs`` is deleted."""
    return registry.is_dead(rel.split("/")[1])


class Scope:
    """An owner scope opened with :func:`spark_steward.scope`; jobs submitted on this thread
    while it is open carry its id, and its blobs are deleted when it is closed and its last job
    has ended."""

    def __init__(self, service: "BlobService", scope_id: str, name: str) -> None:
        self._service = service
        self.id = scope_id
        self.name = name
        self.closed = False

    def __repr__(self) -> str:
        return f"Scope({self.id!r}{', closed' if self.closed else ''})"


class BlobService(RuntimeService):
    """The driver's blob service: server, depot, staged cleanup and owner scopes."""

    name: ClassVar[str] = "blobs"
    rank: ClassVar[int] = 20
    executor_setup: ClassVar[tuple[str, ...]] = ("spark_steward.blob.files:executor_setup",)
    driver_hooks: ClassVar[tuple[str, ...]] = ("spark_steward.blob.files:driver_setup",)
    remote_ops: ClassVar[Mapping[str, str]] = {
        "blobs.put": "spark_steward.blob.commands:serve_put",
        "blobs.ls": "spark_steward.blob.commands:serve_ls"}

    def __init__(self) -> None:
        self.depot: BlobDepot | None = None
        self.server: BlobServer | None = None
        self.local_app_dir: Path | None = None
        self._runtime: DriverRuntime | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._scope_numbers = itertools.count(1)
        self._threads = threading.local()
        #: The owner scope of each Spark Connect session that put blobs (thin client).
        self._sessions: dict[str, str] = {}
        self._sessions_lock = threading.Lock()
        #: What Connect sessions add with ``spark.addArtifacts`` (a Connect server's runtime).
        self.connect_artifacts: ConnectArtifacts | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, runtime: "DriverRuntime") -> None:
        conf = runtime.conf
        self._runtime = runtime
        self.local_app_dir = Path(conf.local_dir()) / runtime.app_id
        ha = None
        if conf.is_set(STORAGE_DIR) and conf.get(BLOB_HA):
            ha = HaBlobStore(runtime.storage, runtime.app_id)
        self.depot = depot = BlobDepot(LocalBlobStore(self.local_app_dir / "blobs"), ha,
                                       io_timeout=conf.get(BLOB_NETWORK_TIMEOUT))
        # Listens on the bind address, executors dial the advertised spark.driver.host.
        identity = tls.new_identity() if encryption_on(conf) else None
        self.server = BlobServer(
            host=runtime.bind_host, port=conf.get(BLOB_SERVER_PORT),
            secret=runtime.context.auth_token, locate=depot.locate,
            on_message=depot.handle_message,
            pick=lambda key, scope, need: depot.peers.pick((scope, key), need),
            max_connections=conf.get(BLOB_SERVER_MAX_CONNECTIONS),
            max_frame=conf.get(BLOB_SERVER_MAX_FRAME), timeout=conf.get(BLOB_NETWORK_TIMEOUT),
            handshake_timeout=conf.get(BLOB_SERVER_HANDSHAKE_TIMEOUT),
            max_unauthenticated=conf.get(BLOB_SERVER_MAX_UNAUTHENTICATED),
            max_unauthenticated_per_peer=conf.get(BLOB_SERVER_MAX_UNAUTHENTICATED_PER_PEER),
            tls=tls.server_context(identity) if identity is not None else None)
        _, port = self.server.start()
        runtime.context = replace(runtime.context, server_port=port,
                                  server_cert=identity.cert_pem if identity else "")
        runtime.dispatcher.subscribe(self._on_event, "blobs")
        if ha is not None:
            registry = runtime.registry
            try:
                depot.adopt_foreign(dead_application_blobs(registry, runtime.app_id),
                                    lambda rel: _still_dead(registry, rel))
            except (OSError, StewardError) as exc:
                log.warning("could not look for dead applications' blobs in %s: %s",
                            runtime.storage.url, exc)
        self._ticker = threading.Thread(target=self._tick_forever,
                                        args=(conf.get(BLOB_RETENTION_INTERVAL),),
                                        name="spark-steward-blob-cleanup", daemon=True)
        self._ticker.start()
        self.connect_artifacts = ConnectArtifacts.start_for(self, runtime)
        log.info("spark-steward blob server listening on %s:%d (executors dial %s:%d)%s",
                 runtime.bind_host, port, runtime.context.driver_host, port,
                 ", TLS 1.3" if identity is not None else "")

    def _tick_forever(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.tick()

    def tick(self) -> None:
        """One staged-cleanup period (the ticker calls this every retention interval)."""
        if self.depot is not None:
            try:
                self.depot.tick()
            except Exception:
                log.exception("spark-steward blob cleanup period failed; retried next period")

    def _on_event(self, event: SparkEvent) -> None:
        depot = self.depot
        if depot is None:
            return
        if isinstance(event, TaskEnd):
            depot.task_ended(event.task_id, event.succeeded)
        elif isinstance(event, JobStart):
            depot.job_started(event.job_id, event.properties.get(SCOPE_PROPERTY)
                              or APPLICATION_SCOPE, event.stage_ids)
        elif isinstance(event, JobEnd):
            depot.job_ended(event.job_id, event.succeeded)

    def metrics(self) -> Mapping[str, int]:
        depot = self.depot
        if depot is None:
            return {}
        held, size = depot.usage()
        return {"blobs.held": held, "blobs.bytes": size,
                **{f"blobs.transfers.{s}": depot.transfers[s] for s in TRANSFER_SOURCES}}

    def cleanup_backlog(self) -> CleanupBacklog | None:
        depot = self.depot
        if depot is None:
            return None
        # Failed blob deletions are retried every period, never given up.
        return CleanupBacklog(pending=depot.pending_deletions(), retries=depot.retries)

    def require_depot(self) -> BlobDepot:
        """The depot; raises while the service is not started (or after its stop)."""
        if self.depot is None:
            raise StewardError("the blob service is not running (spark-steward detached)")
        return self.depot

    @property
    def running(self) -> bool:
        """Between start and the application's stop."""
        return self._runtime is not None and not self._runtime.stopped

    def transparent_for(self, sc: "SparkContext") -> bool:
        """Whether ``sc.addFile`` and friends go through this service for the session in use."""
        runtime = self._runtime
        return (runtime is not None and not runtime.stopped and runtime.sc is sc
                and runtime.enabled_for(None) and runtime.conf.get(BLOB_TRANSPARENT))

    def stop(self, runtime: "DriverRuntime") -> None:
        self._stop.set()
        if self.connect_artifacts is not None:
            self.connect_artifacts.stop()
        try:
            if self._ticker is not None:
                self._ticker.join(10)
            if self.server is not None:
                self.server.close()
        finally:  # whatever stopping the server did, the application's blobs go
            if self.depot is not None:
                self.depot.end_application()
        # The folder itself goes with the application's working dir (LocalService).

    # -- scopes ------------------------------------------------------------------------------

    def _stack(self) -> list[Scope]:
        stack: list[Scope] | None = getattr(self._threads, "stack", None)
        if stack is None:
            stack = self._threads.stack = []
        return stack

    def current_scope(self) -> str:
        """The innermost open scope of this thread, else the application scope."""
        stack = self._stack()
        return stack[-1].id if stack else APPLICATION_SCOPE

    def open_scope(self, name: str) -> Scope:
        """Opens a new owner scope named ``name`` on this thread and returns it."""
        validate_scope_name(name)
        assert self.depot is not None and self._runtime is not None
        scope = Scope(self, f"{name}.{next(self._scope_numbers)}", name)
        self.depot.open_scope(scope.id)
        self._stack().append(scope)
        self._runtime.sc.setLocalProperty(SCOPE_PROPERTY, scope.id)
        return scope

    def close_scope(self, scope: Scope) -> None:
        """Ends ``scope`` on this thread; its blobs go when its last job has ended."""
        assert self.depot is not None and self._runtime is not None
        stack = self._stack()
        if scope.closed:
            raise ScopeError(f"scope {scope.id} is already closed")
        if scope not in stack:
            raise ScopeError(f"scope {scope.id} was opened on another thread; close it there")
        while stack and stack[-1] is not scope:
            inner = stack.pop()
            log.warning("scope %s closed implicitly with its enclosing scope %s", inner.id,
                        scope.id)
            self._finish(inner)
        stack.pop()
        # None removes the property: jobs go back to the application scope.
        self._runtime.sc.setLocalProperty(SCOPE_PROPERTY,
                                          stack[-1].id if stack else None)  # type: ignore[arg-type]
        self._finish(scope)

    def _finish(self, scope: Scope) -> None:
        assert self.depot is not None and self._runtime is not None
        scope.closed = True
        # Jobs that started in the scope must be known before deciding it has none running.
        self._runtime.flush_events()
        self.depot.close_scope(scope.id)

    # -- Connect sessions (the thin client) ----------------------------------------------------

    def session_scope(self, session_id: str, *, open_it: bool = True) -> str:
        """The owner scope of Connect session ``session_id`` (opened at its first put; ""
        when it has none and ``open_it`` is false)."""
        assert self.depot is not None
        with self._sessions_lock:
            scope = self._sessions.get(session_id)
            if scope is None and open_it:
                scope = self._sessions[session_id] = f"connect.{next(self._scope_numbers)}"
                self.depot.open_scope(scope)
        return scope or ""

    def session_closed(self, session_id: str) -> None:
        """A Connect session ended: its scope closes and its blobs are deleted."""
        with self._sessions_lock:
            scope = self._sessions.pop(session_id, None)
        if scope is not None and self.depot is not None:
            self.depot.close_scope(scope)
            log.info("spark-steward closed blob scope %s of Connect session %s", scope,
                     session_id)

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        with self._sessions_lock:
            scope = self._sessions.get(session_id)
        if scope is None or self.depot is None:
            return {}
        refs = [r for r in self.depot.refs() if r.scope == scope]
        owns = {"blobs": (len(refs), sum(r.size for r in refs))}
        if self.connect_artifacts is not None:
            owns.update(self.connect_artifacts.session_owns(session_id))
        return owns

    def scoped(self, name: str) -> Iterator[Scope]:
        """Yields an owner scope open on this thread and closes it on exit (what
        :func:`spark_steward.scope` wraps)."""
        scope = self.open_scope(name)
        try:
            yield scope
        finally:
            if not scope.closed:
                self.close_scope(scope)
