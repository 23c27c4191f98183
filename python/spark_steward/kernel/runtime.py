"""The driver runtime: attached to one SparkContext, it owns the event pump, the application
record, the executor context broadcast and the capabilities (services) built on top.

``attach`` is called by the autoload hook for every new SparkContext whose conf has
``spark.steward.enabled=true``, or explicitly by ``spark_steward.attach(spark)``. It detaches at
``spark.stop()`` and at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import secrets
import threading
from typing import TYPE_CHECKING, Any

from spark_steward import __version__
from spark_steward.applications import ApplicationRegistry
from spark_steward.config import (BLOB_TRANSPARENT, ENABLED, EVENTS_BATCH_SIZE,
                                  EVENTS_POLL_INTERVAL, HEARTBEAT_TIMEOUT, PREFIX, SHIM_JAR,
                                  StewardConf)
from spark_steward.errors import DisabledForSession, NotAttached, SetupError
from spark_steward.kernel import bootstrap
from spark_steward.blob import files
from spark_steward.kernel import session
from spark_steward.blob.service import BlobService
from spark_steward.checkpoint.service import CheckpointService
from spark_steward.kernel.dispatch import EventDispatcher
from spark_steward.kernel.executor import ExecutorContext
from spark_steward.kernel.heartbeat import ApplicationHeartbeat
from spark_steward.kernel.jvm import PLUGIN_CLASS, EventBridgeHandle, SparkJvm
from spark_steward.kernel.pump import EventPump
from spark_steward.kernel.services import RuntimeService, service_factories
from spark_steward.tables.service import TableService
from spark_steward.kernel.shim import jar_path
from spark_steward.storage import Storage

if TYPE_CHECKING:
    from pyspark import Broadcast, SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STOP_TIMEOUT = 30.0


class DriverRuntime:
    """spark-steward's state for one SparkContext. Build it with :func:`attach`."""

    def __init__(self, sc: "SparkContext", *, explicit: bool) -> None:
        self.sc = sc
        self.jvm = SparkJvm(sc)
        if not self.jvm.has_plugin_api():
            raise SetupError(
                f"this Spark ({sc.version}) has no plugin API (org.apache.spark.api.plugin); "
                "spark-steward needs Spark 4.0 or newer")
        pairs = self.jvm.conf_pairs()
        # Every key is parsed here, so a bad value fails at attach, naming key and value.
        self.conf = conf = StewardConf.from_pairs(pairs)
        self.app_id = str(sc.applicationId)
        self.app_name = str(sc.appName)
        self.spark_version: str = sc.version
        self.steward_version = __version__
        # Explicit attach means "on" unless the context's conf says otherwise.
        self.enabled_by_default = conf.get(ENABLED) if conf.is_set(ENABLED) else explicit
        self.storage = Storage.from_url(conf.storage_dir(), **conf.storage_options())
        self.registry = ApplicationRegistry(self.storage,
                                            heartbeat_timeout=conf.get(HEARTBEAT_TIMEOUT))
        self.dispatcher = EventDispatcher()
        self.bridge: EventBridgeHandle = self.jvm.event_bridge(
            None if self.jvm.shim_on_classpath() else str(jar_path(conf.get(SHIM_JAR))))
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
        # Broadcast in start(), once services (the blob server's port) have filled it in.
        self.context_broadcast: "Broadcast[ExecutorContext] | None" = None
        self.services: list[RuntimeService] = [ApplicationHeartbeat(), BlobService(),
                                               CheckpointService(), TableService()]
        self.services += [factory() for _, factory in service_factories()]
        self._stopped = False
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        started: list[RuntimeService] = []
        try:
            for service in self.services:
                service.start(self)
                started.append(service)
        except BaseException:
            for service in reversed(started):
                self._stop_service(service)
            raise
        self.context_broadcast = self.sc.broadcast(self.context)
        self.pump.start()
        log.info("spark-steward %s attached to %s (storage %s)", self.steward_version,
                 self.app_id, self.storage.url)

    def before_context_stop(self) -> None:
        for service in reversed(self.services):
            try:
                service.before_context_stop(self)
            except Exception:
                log.exception("spark-steward service %s failed before stop", service.name)

    def stop(self, reason: str) -> None:
        """Delivers the last events, stops every service, marks the record finished."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self.pump.close(STOP_TIMEOUT)
        for service in reversed(self.services):
            self._stop_service(service)
        log.info("spark-steward detached from %s (%s)", self.app_id, reason)

    def _stop_service(self, service: RuntimeService) -> None:
        try:
            service.stop(self)
        except Exception:
            log.exception("spark-steward service %s failed to stop", service.name)

    @property
    def stopped(self) -> bool:
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

    def service(self, name: str) -> Any:
        for candidate in self.services:
            if candidate.name == name:
                return candidate
        raise KeyError(name)


# -- the process-wide runtime ------------------------------------------------------------------

_current: DriverRuntime | None = None
_attach_lock = threading.RLock()
_atexit_registered = False


def current_runtime() -> DriverRuntime | None:
    runtime = _current
    return runtime if runtime is not None and not runtime.stopped else None


def attach(spark: Any = None, *, explicit: bool = True) -> DriverRuntime:
    """Attaches spark-steward to the SparkContext of ``spark`` (a SparkSession or SparkContext;
    the active one when None) and returns the runtime. Idempotent per SparkContext."""
    global _current, _atexit_registered
    from pyspark import SparkContext

    if spark is None:
        sc = SparkContext._active_spark_context
        if sc is None:
            raise NotAttached("no active SparkContext to attach to: create a SparkSession first")
    else:
        sc = session.context_of(spark)
    with _attach_lock:
        if _current is not None and not _current.stopped:
            if _current.sc is sc:
                return _current
            _current.stop("a new SparkContext replaced it")
        runtime = DriverRuntime(sc, explicit=explicit)
        runtime.start()
        _current = runtime
        install_patches()
        if not _atexit_registered:
            atexit.register(_detach_at_exit)
            _atexit_registered = True
        return runtime


def detach(reason: str = "detach requested") -> None:
    """Detaches the current runtime, if any (``spark.stop()`` does this for you)."""
    global _current
    with _attach_lock:
        runtime, _current = _current, None
    if runtime is not None:
        runtime.stop(reason)


def _detach_at_exit() -> None:
    detach("interpreter exit")


def runtime_for(spark: "SparkSession | None" = None) -> DriverRuntime:
    """The runtime, checked to be on for ``spark``; raises NotAttached or DisabledForSession."""
    runtime = current_runtime()
    if runtime is None:
        raise NotAttached(
            "spark-steward is not attached: start Spark with --conf spark.steward.enabled=true "
            "(see `spark-steward conf`) or call spark_steward.attach(spark)")
    if not runtime.enabled_for(spark):
        raise DisabledForSession(
            "spark-steward is off for this SparkSession (spark.steward.enabled=false in its "
            "runtime conf); spark.conf.set('spark.steward.enabled', 'true') turns it back on")
    return runtime


def _broadcast_for(sc: "SparkContext") -> "Broadcast[ExecutorContext] | None":
    runtime = current_runtime()
    if runtime is None or runtime.sc is not sc or not runtime.enabled_for(None):
        return None
    return runtime.context_broadcast


_patched = False


def install_patches() -> None:
    """Wraps SparkContext.stop (detach at stop) and the command pickler (idempotent)."""
    global _patched
    with _attach_lock:
        if _patched:
            return
        from pyspark import SparkContext

        original_stop = SparkContext.stop

        def stop(self: "SparkContext") -> None:
            runtime = current_runtime()
            mine = runtime is not None and runtime.sc is self
            if mine:
                assert runtime is not None
                runtime.before_context_stop()
            try:
                original_stop(self)
            finally:
                if mine:
                    detach("SparkContext stopped")

        stop.__doc__ = original_stop.__doc__
        stop.__wrapped__ = original_stop  # type: ignore[attr-defined]
        SparkContext.stop = stop  # type: ignore[method-assign]
        bootstrap.install_command_hook(_broadcast_for)
        files.install_context_hooks(files.TransparentFiles(_blob_service_for))
        _patched = True


def _blob_service_for(sc: "SparkContext") -> Any:
    """The blob service when transparent file handling is on for ``sc``'s session in use."""
    runtime = current_runtime()
    if runtime is None or runtime.sc is not sc or not runtime.enabled_for(None) \
            or not runtime.conf.get(BLOB_TRANSPARENT):
        return None
    return runtime.service("blobs")
