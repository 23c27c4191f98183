"""The driver runtime: attached to one SparkContext, it owns the event pump, the application
record, the executor context broadcast and the capabilities (services) built on top.

``attach`` is called by the autoload hook for every new SparkContext whose conf has
``spark.steward.enabled=true``, or explicitly by ``spark_steward.attach(spark)``. It detaches at
``spark.stop()`` and at interpreter exit.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import secrets
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Mapping, TypeVar, overload

from spark_steward._version import __version__
from spark_steward.applications import ApplicationRegistry, CleanupBacklog
from spark_steward.config import (ENABLED, EVENTS_BATCH_SIZE, EVENTS_BUFFER_CAPACITY, EVENTS_POLL_INTERVAL,
                                  HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT, LOCAL_DIR, PREFIX,
                                  SHIM_JAR, STORAGE_DIR, StewardConf)
from spark_steward.errors import (ConfigError, DisabledForSession, NotAttached, SetupError,
                                  StorageError)
from spark_steward.kernel import bootstrap, compat, patches, remote_server, session
from spark_steward.kernel.dispatch import EventDispatcher
from spark_steward.kernel.executor import ExecutorContext
from spark_steward.kernel.executor_package import ExecutorPackageWatch
from spark_steward.kernel.heartbeat import ApplicationHeartbeat
from spark_steward.kernel.jvm import PLUGIN_CLASS, EventBridgeHandle, SparkJvm, forget_facade
from spark_steward.kernel.logs import forward_to_log4j, forwarded_level, stop_forwarding
from spark_steward.kernel.metrics import RuntimeReport
from spark_steward.kernel.pump import EventPump
from spark_steward.kernel.services import discover
from spark_steward.kernel.sessions import SessionScopes
from spark_steward.kernel.shim import jar_path
from spark_steward.private import ensure_private_root
from spark_steward.storage import Storage

if TYPE_CHECKING:
    from pyspark import Accumulator, Broadcast, SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STOP_TIMEOUT = 30.0


class RuntimeService:
    """Base of every capability attached to the driver runtime; hooks default to no-ops."""

    #: The name the capability is registered under (and logged with).
    name: ClassVar[str] = "service"
    #: Start order: lower ranks start first and stop last (local state, which the others keep
    #: their host-local files in, has the lowest built-in rank).
    rank: ClassVar[int] = 100
    #: ``module:function`` names each executor process calls once, with no argument, before
    #: its first task of the application runs (e.g. to register its executor-side
    #: interceptions). Names, not functions: the executor imports them itself.
    executor_setup: ClassVar[tuple[str, ...]] = ()
    #: ``module:function`` names the runtime calls with this service right after its
    #: ``start``: where a capability's Spark hooks (which use the service) get installed,
    #: without the service importing them.
    driver_hooks: ClassVar[tuple[str, ...]] = ()
    #: The thin client's commands the capability answers on a Connect server: op name to
    #: ``module:function``, called with the service and a
    #: :class:`~spark_steward.kernel.remote_server.RemoteCall` (see that module).
    remote_ops: ClassVar[Mapping[str, str]] = {}

    def start(self, runtime: "DriverRuntime") -> None:
        """Called once at attach, with events not yet flowing."""
        return None

    def before_context_stop(self, runtime: "DriverRuntime") -> None:
        """Called at ``spark.stop()`` while the SparkContext still runs."""
        return None

    def stop(self, runtime: "DriverRuntime") -> None:
        """Called once at detach, after the last event was delivered."""
        return None

    def metrics(self) -> Mapping[str, int]:
        """The capability's numbers for Spark's metrics system, under the names of
        :data:`spark_steward.kernel.metrics.NAMES`; asked every heartbeat, on its thread."""
        return {}

    def cleanup_backlog(self) -> "CleanupBacklog | None":
        """The capability's outstanding and given-up deletions, for the application record
        (``spark-steward status``) and the ``cleanup.*`` metrics; asked every heartbeat."""
        return None

    def session_closed(self, session_id: str) -> None:
        """A Spark Connect session ended (:mod:`spark_steward.kernel.sessions`): release what
        it owned, with the capability's retried cleanup. Called on the event thread."""
        return None

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        """What the open Connect session ``session_id`` owns through this capability, by kind:
        ``(files, bytes)``; asked every heartbeat for the application record."""
        return {}


def call_hooks(service: RuntimeService) -> None:
    """Calls the service's ``driver_hooks`` with it."""
    for name in service.driver_hooks:
        module, _, function = name.partition(":")
        try:
            hook = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise SetupError(f"spark-steward capability {service.name!r} names the hook "
                             f"{name!r}, which cannot be loaded: {exc}") from exc
        hook(service)


def build_services() -> list[RuntimeService]:
    """A fresh service of every registered capability, in start order (``rank``, then name)."""
    services = []
    for spec in discover():
        service = spec.factory()
        if not isinstance(service, RuntimeService):
            raise SetupError(f"spark-steward capability {spec.name!r} ({spec.source}) built a "
                             f"{type(service).__name__}, not a RuntimeService")
        services.append(service)
    return sorted(services, key=lambda s: s.rank)  # stable: same rank, registration order


S = TypeVar("S", bound=RuntimeService)


class DriverRuntime:
    """spark-steward's state for one SparkContext. Build it with :func:`attach`."""

    def __init__(self, sc: "SparkContext", *, explicit: bool, hosted: bool = False) -> None:
        self.sc = sc
        #: Whether this runtime runs beside the driver in its own process (the plugin's
        #: ``RuntimeHost``), not in the driver's Python.
        self.hosted = hosted
        self.jvm = SparkJvm(sc)
        if not self.jvm.has_plugin_api():
            raise SetupError(
                f"this Spark ({sc.version}) has no plugin API (org.apache.spark.api.plugin); "
                f"spark-steward needs Spark {compat.SUPPORTED_LINES}")
        pairs = self.jvm.conf_pairs()
        # Every key is parsed here, so a bad value fails at attach, naming key and value.
        self.conf = conf = StewardConf.from_pairs(pairs)
        self.app_id = str(sc.applicationId)
        self.app_name = str(sc.appName)
        self.spark_version: str = sc.version
        self.steward_version = __version__
        # Explicit attach means "on" unless the context's conf says otherwise.
        self.enabled_by_default = conf.get(ENABLED) if conf.is_set(ENABLED) else explicit
        # Before anything is written: a local dir another user planted or can write fails the
        # attach with one line naming it, and so does the embedded default storage dir beside it.
        ensure_private_root(conf.local_dir(), key=LOCAL_DIR.name)
        self.storage = Storage.from_url(conf.storage_dir(), **conf.storage_options())
        if not conf.is_set(STORAGE_DIR) and self.storage.is_local:
            ensure_private_root(self.storage.root, key=STORAGE_DIR.name)
        # The embedded default lives in the driver host's temp dir: executors share it only
        # where they run on the driver's host (local and local-cluster masters).
        self.storage_shared = conf.is_set(STORAGE_DIR) or self.jvm.master().startswith("local")
        self.registry = ApplicationRegistry(self.storage,
                                            heartbeat_timeout=conf.get(HEARTBEAT_TIMEOUT))
        self.dispatcher = EventDispatcher()
        #: Whether tasks met executors without spark-steward (warned once, at a job's end).
        self.executor_package = ExecutorPackageWatch(sc)
        self.dispatcher.subscribe(self.executor_package.on_event, "executor-package")
        # Built before the event bridge is installed: a capability that cannot be found or
        # built fails attach with nothing installed in the JVM yet.
        self.services: list[RuntimeService] = build_services()
        #: The Connect sessions of this application (a Connect server's), as owner scopes.
        self.sessions = SessionScopes(lambda: self.services)
        #: Answers the thin client's commands on a Connect server (None elsewhere).
        self._commands: remote_server.CommandHandler | None = None
        self.dispatcher.subscribe(self.sessions.on_event, "connect-sessions")
        self.bridge: EventBridgeHandle = self.jvm.event_bridge(
            None if self.jvm.shim_on_classpath() else str(jar_path(conf.get(SHIM_JAR))),
            conf.get(EVENTS_BUFFER_CAPACITY))
        if not self.bridge.from_plugin:
            log.warning(
                "spark-steward attached without its Spark plugin: events before this point were "
                "not seen. Add --conf spark.plugins=%s for complete event delivery", PLUGIN_CLASS)
        self.pump = EventPump(self.bridge, self.dispatcher,
                              batch_size=conf.get(EVENTS_BATCH_SIZE),
                              poll_millis=max(1, int(conf.get(EVENTS_POLL_INTERVAL) * 1000)))
        self.context = ExecutorContext(
            app_id=self.app_id,
            storage_url=self.storage.url,
            local_dir=conf.local_dir(),
            auth_token=sc.getConf().get("spark.authenticate.secret") or secrets.token_hex(32),
            driver_host=self.jvm.driver_host(),
            conf={k: v for k, v in pairs if k.startswith(PREFIX)},
        )
        #: Where the driver's own servers listen (the advertised driver_host may be a NAT's).
        self.bind_host = self.jvm.driver_bind_address()
        # Broadcast in start(), once services (the blob server's port) have filled it in.
        self.context_broadcast: "Broadcast[dict[str, Any]] | None" = None
        # The heartbeat is the kernel's own and starts first: every capability's start may
        # judge other applications by their records, and this one's must exist by then.
        self.report = RuntimeReport(sc, self.services, lambda: self.dispatcher.dropped,
                                    sessions=self.sessions.report)
        self.heartbeat = ApplicationHeartbeat(self.registry, conf.get(HEARTBEAT_INTERVAL),
                                              report=self.report)
        self._stopped = False
        self._lock = threading.Lock()

    def require_shared_storage(self, what: str) -> None:
        """Raises ConfigError when executors cannot reach the storage dir: ``what`` (say,
        "checkpoints") would write data on hosts that never see it again."""
        if not self.storage_shared:
            raise ConfigError(
                f"{what} need spark.steward.storage.dir on this cluster (master "
                f"{self.jvm.master()}): the embedded default {self.storage.url} is a directory "
                "on the driver's host, which executors on other hosts do not share; set "
                "spark.steward.storage.dir to a URL every host reaches (a shared mount, s3://, "
                "hdfs://)")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        # attach() has sent the spark_steward logs to log4j already, before the runtime was
        # built: what the capabilities log while starting goes where Spark's logs go.
        """Writes the application record and starts every service in rank order."""
        # Hosted, the driver is the JVM that started this process (RuntimeHost): the record
        # names it, so a runtime that dies and restarts never makes a live application dead.
        self.heartbeat.start(self.app_id, self.app_name, spark_version=self.spark_version,
                             steward_version=self.steward_version,
                             driver_pid=os.getppid() if self.hosted else None)
        started: list[RuntimeService] = []
        try:
            for service in self.services:
                service.start(self)
                started.append(service)
                call_hooks(service)
        except BaseException:
            # Stopped before the services: every hook that checks ``runtime.stopped`` hands
            # calls back to Spark from now on, as if this attach had never happened.
            self._stopped = True
            for service in reversed(started):
                self._stop_service(service)
            self._stop_heartbeat()
            stop_forwarding()
            raise
        setup = tuple(name for service in self.services for name in service.executor_setup)
        self.context = replace(self.context, setup=setup, log_level=forwarded_level())
        # Builtins only: executors without spark-steward load it too (with I/O encryption,
        # every task's worker unpickles it as it starts).
        self.context_broadcast = self.sc.broadcast(self.context.to_broadcast())
        self.pump.start()
        try:
            self._commands = remote_server.register(self)
        except Exception:  # the thin client is refused; the runtime works on
            log.exception("spark-steward cannot answer its Connect commands on this server")
        log.info("spark-steward %s attached to %s (storage %s%s)", self.steward_version,
                 self.app_id, self.storage.url,
                 f"; runtime pid {os.getpid()} beside the driver" if self.hosted else "")

    def before_context_stop(self) -> None:
        """Gives every service its last word before the SparkContext stops; a failure is logged."""
        for service in reversed(self.services):
            try:
                service.before_context_stop(self)
            except Exception:
                log.exception("spark-steward service %s failed before stop", service.name)
        # While Spark's metrics system still runs: its sinks report once more as it stops.
        self.report.publish()

    def stop(self, reason: str) -> None:
        """Delivers the last events, stops every service, marks the record finished."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self._commands is not None:
            try:
                remote_server.unregister(self)
            except Exception:
                log.debug("the Connect command handler could not be dropped", exc_info=True)
        self.pump.close(STOP_TIMEOUT)
        for service in reversed(self.services):
            self._stop_service(service)
        self._stop_heartbeat()
        forget_facade(self.app_id)
        log.info("spark-steward detached from %s (%s)", self.app_id, reason)
        stop_forwarding()

    def _stop_heartbeat(self) -> None:
        try:
            self.heartbeat.stop()
        except Exception:
            log.exception("spark-steward could not mark %s finished", self.app_id)

    def _stop_service(self, service: RuntimeService) -> None:
        try:
            service.stop(self)
        except Exception:
            log.exception("spark-steward service %s failed to stop", service.name)

    @property
    def stopped(self) -> bool:
        """True once the runtime has stopped."""
        return self._stopped

    # -- decisions ---------------------------------------------------------------------------

    def enabled_for(self, spark: "SparkSession | None") -> bool:
        """Whether spark-steward acts for ``spark`` (the active session when None)."""
        if self._stopped:
            return False
        spark = spark if spark is not None else session.active_session()
        if spark is None:
            return self.enabled_by_default
        return session.session_enabled(spark, self.enabled_by_default)

    def flush_events(self, timeout: float = 30.0) -> bool:
        """Waits until every event Spark has posted so far reached the subscribers."""
        return self.pump.flush(timeout)

    @overload
    def service(self, kind: type[S]) -> S: ...

    @overload
    def service(self, kind: str) -> RuntimeService: ...

    def service(self, kind: "type[S] | str") -> RuntimeService:
        """The running service of capability class ``kind`` (or registered name).

        >>> runtime.service(BlobService).depot          # doctest: +SKIP
        """
        for candidate in self.services:
            if isinstance(kind, str) and candidate.name == kind \
                    or isinstance(kind, type) and isinstance(candidate, kind):
                return candidate
        if isinstance(kind, str):
            raise SetupError(f"no spark-steward capability named {kind!r} is running here; "
                             f"running: {', '.join(s.name for s in self.services)}")
        raise SetupError(
            f"the spark-steward capability {kind.__name__} is not running in this application: "
            "its package is not installed where the driver runs, or its entry point "
            "(group spark_steward.services) is missing; reinstall spark-steward")


# -- the process-wide runtime ------------------------------------------------------------------

_current: DriverRuntime | None = None
_attach_lock = threading.RLock()
_atexit_registered = False


def current_runtime() -> DriverRuntime | None:
    """The attached, running runtime, or None."""
    runtime = _current
    return runtime if runtime is not None and not runtime.stopped else None


@overload
def attach(spark: Any = None, *, explicit: Literal[True] = True,
           hosted: bool = False) -> DriverRuntime: ...


@overload
def attach(spark: Any = None, *, explicit: bool, hosted: bool = False) -> DriverRuntime | None: ...


def attach(spark: Any = None, *, explicit: bool = True,
           hosted: bool = False) -> DriverRuntime | None:
    """Attaches spark-steward to the SparkContext of ``spark`` (a SparkSession or SparkContext;
    the active one when None) and returns the runtime. Idempotent per SparkContext.

    On a Spark older than the supported lines an explicit attach raises SetupError; the
    automatic one (``explicit=False``) logs one warning, once per process, attaches nothing
    and returns None, so the application runs as plain Spark.

    ``hosted`` is for :mod:`spark_steward.kernel.host` only, the runtime the plugin runs
    beside a driver no Python builds (a Connect server); the plugin never hosts one for a
    PySpark driver, whose own Python attaches here."""
    global _current, _atexit_registered, _unavailable
    from pyspark import SparkContext

    if spark is None:
        sc = SparkContext._active_spark_context
        if sc is None:
            raise NotAttached("no active SparkContext to attach to: create a SparkSession first")
    else:
        sc = session.context_of(spark)
    unsupported = compat.unsupported_reason(str(sc.version))
    if unsupported is not None:
        if explicit:
            raise SetupError(unsupported)
        _warn_unsupported(unsupported)
        return None
    with _attach_lock:
        if _current is not None and not _current.stopped:
            if _current.sc is sc:
                return _current
            _current.stop("a new SparkContext replaced it")
        # Before the runtime is built: what its construction logs (a plugin missing, a storage
        # failing the attach) goes where Spark's logs go too.
        forward_to_log4j(sc)
        runtime = DriverRuntime(sc, explicit=explicit, hosted=hosted)
        runtime.start()
        _current, _unavailable = runtime, None
        install_patches()
        if not _atexit_registered:
            atexit.register(_detach_at_exit)
            _atexit_registered = True
        return runtime


_warned_unsupported = False


def _warn_unsupported(reason: str) -> None:
    global _warned_unsupported
    if not _warned_unsupported:
        _warned_unsupported = True
        log.warning("%s", reason)


def detach(reason: str = "detach requested") -> None:
    """Detaches the current runtime, if any (``spark.stop()`` does this for you)."""
    global _current
    with _attach_lock:
        runtime, _current = _current, None
    if runtime is not None:
        runtime.stop(reason)


def _detach_at_exit() -> None:
    detach("interpreter exit")


#: Why the automatic attach of a context failed on its storage: (that context, the reason).
_unavailable: tuple[Any, str] | None = None


def mark_unavailable(sc: "SparkContext", reason: str) -> None:
    """Records that ``sc`` runs without spark-steward because its storage failed at start;
    :func:`runtime_for` raises the reason to every explicit call."""
    global _unavailable
    _unavailable = (sc, reason)


def runtime_for(spark: "SparkSession | None" = None) -> DriverRuntime:
    """The runtime, checked to be on for ``spark``; raises NotAttached or DisabledForSession
    (StorageError when the storage failed the attach at the context's start); SetupError for
    a Spark Connect session, saying what to do instead."""
    if spark is not None:
        session.require_classic(spark)
    runtime = current_runtime()
    if runtime is None:
        from pyspark import SparkContext

        if _unavailable is not None and _unavailable[0] is SparkContext._active_spark_context:
            raise StorageError(
                "spark-steward is off for this application: its storage failed at start "
                f"({_unavailable[1]}); fix spark.steward.storage.dir and start the application "
                "again, or call spark_steward.attach(spark) to try again now")
        raise NotAttached(
            "spark-steward is not attached: start Spark with --conf spark.steward.enabled=true "
            "(see `spark-steward conf`) or call spark_steward.attach(spark)")
    if not runtime.enabled_for(spark):
        raise DisabledForSession(
            "spark-steward is off for this SparkSession (spark.steward.enabled=false in its "
            "runtime conf); spark.conf.set('spark.steward.enabled', 'true') turns it back on")
    return runtime


def _broadcast_for(sc: "SparkContext") -> "Broadcast[dict[str, Any]] | None":
    runtime = current_runtime()
    if runtime is None or runtime.sc is not sc or not runtime.enabled_for(None):
        return None
    return runtime.context_broadcast


def _missing_for(sc: "SparkContext") -> "Accumulator[int] | None":
    runtime = current_runtime()
    return runtime.executor_package.missing if runtime is not None and runtime.sc is sc else None


def install_patches() -> None:
    """Registers the kernel's own interceptions (detach at ``SparkContext.stop``, the executor
    context on every pickled command) and installs every registered patch (idempotent)."""
    patches.intercept("SparkContext.stop", "kernel", _stop_handler, order=0)
    bootstrap.ship_carrier_by_value()
    patches.intercept("rdd._prepare_for_python_RDD", "kernel",
                      bootstrap.command_handler(_broadcast_for, _missing_for), order=0)
    patches.install()


def _stop_handler(proceed: Any, sc: "SparkContext", *args: Any, **kwargs: Any) -> Any:
    runtime = current_runtime()
    mine = runtime is not None and runtime.sc is sc
    if mine:
        assert runtime is not None
        runtime.before_context_stop()
    try:
        return proceed(sc, *args, **kwargs)
    finally:
        if mine:
            detach("SparkContext stopped")
