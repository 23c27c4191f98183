"""spark-steward's numbers where Spark users look: Spark's metrics system, and the application
record ``spark-steward status`` reads.

Every heartbeat (and once at ``spark.stop()``) :class:`RuntimeReport` asks each running
capability for its :meth:`~spark_steward.kernel.runtime.RuntimeService.metrics` and
:meth:`~spark_steward.kernel.runtime.RuntimeService.cleanup_backlog`, adds the kernel's own
(events dropped, the cleanup totals) and pushes one flat ``name -> int`` snapshot to the shim's
``StewardMetrics`` through the facade. Spark's sink threads read only that snapshot: they never
call into Python. The names are the fixed list below, the same as ``StewardMetrics.GAUGES`` and
``COUNTERS`` (a unit test holds the two together; docs/observability.md documents each).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, Sequence

from spark_steward.applications import CleanupBacklog, SessionsReport
from spark_steward.kernel import jvm

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

#: Levels: what is held now (Dropwizard gauges).
GAUGES = (
    "blobs.held", "blobs.bytes",
    "tables.cached", "tables.bytes",
    "checkpoints.pending", "checkpoints.completed", "checkpoints.marked_for_deletion",
    "streams.running",
    "cleanup.pending", "cleanup.given_up",
)
#: Running totals since the application started (Dropwizard counters).
COUNTERS = (
    "blobs.transfers.server", "blobs.transfers.ha", "blobs.transfers.linked",
    "blobs.transfers.peers",
    "tables.hits", "tables.misses", "tables.fallbacks",
    "cleanup.retries", "events.dropped",
)
NAMES = GAUGES + COUNTERS


class Reporting(Protocol):
    """What a capability answers here (:class:`~spark_steward.kernel.runtime.RuntimeService`
    does, with nothing to report by default)."""

    @property
    def name(self) -> str:
        """The service's name in metric names."""

    def metrics(self) -> Mapping[str, int]:
        """The service's current metric values by name."""

    def cleanup_backlog(self) -> CleanupBacklog | None:
        """The service's cleanup backlog, or None when it has none."""


def backlog_of(services: Iterable[Reporting]) -> CleanupBacklog:
    """Every capability's outstanding cleanup, added up."""
    total = CleanupBacklog()
    for service in services:
        try:
            found = service.cleanup_backlog()
        except Exception:  # a report must never stop the heartbeat
            log.exception("spark-steward capability %s could not report its cleanup",
                          service.name)
            continue
        if found is not None:
            total = total + found
    return total


def snapshot(services: Iterable[Reporting], backlog: CleanupBacklog,
             events_dropped: int) -> dict[str, int]:
    """The flat snapshot pushed to the JVM: every name in :data:`NAMES` (0 where no capability
    reports it), the cleanup numbers taken from ``backlog``."""
    values: Counter[str] = Counter({name: 0 for name in NAMES})
    for service in services:
        try:
            numbers: Mapping[str, int] = service.metrics()
        except Exception:
            log.exception("spark-steward capability %s could not report its metrics",
                          service.name)
            continue
        for name, value in numbers.items():
            if name in values:
                values[name] += int(value)
            else:
                log.debug("spark-steward capability %s reports %s, which is not a documented "
                          "metric; ignored", service.name, name)
    values["cleanup.pending"] = backlog.pending
    values["cleanup.given_up"] = backlog.given_up_count
    values["cleanup.retries"] = backlog.retries
    values["events.dropped"] = events_dropped
    return dict(values)


def encode(values: Mapping[str, int]) -> str:
    """``name=value`` lines, what ``PythonFacade.pushMetrics`` takes."""
    return "".join(f"{name}={int(value)}\n" for name, value in values.items())


class RuntimeReport:
    """The heartbeat's report for one runtime: the backlog the application record carries,
    and the metrics it publishes."""

    def __init__(self, sc: "SparkContext", services: Sequence[Reporting],
                 events_dropped: Callable[[], int],
                 sessions: Callable[[], SessionsReport | None] = lambda: None) -> None:
        self.sc = sc
        self.services = services
        self.events_dropped = events_dropped
        #: The Connect sessions the record carries (:meth:`sessions`).
        self._sessions = sessions
        self._told_unregistered = False
        self._told_failed = False
        #: A push was taken once: failures after it are the context stopping, not a set-up
        #: to report (the heartbeat beats on while Spark stops).
        self._taken_once = False

    def backlog(self) -> CleanupBacklog:
        """Every capability's outstanding cleanup, added up."""
        return backlog_of(self.services)

    def sessions(self) -> SessionsReport | None:
        """The application's Connect sessions and what each owns (None when it has none)."""
        return self._sessions()

    def publish(self, backlog: CleanupBacklog | None = None) -> None:
        """Pushes the current snapshot to Spark's metrics system; never raises."""
        if backlog is None:
            backlog = backlog_of(self.services)
        values = snapshot(self.services, backlog, self.events_dropped())
        try:
            taken = int(jvm.call(self.sc, "pushMetrics", encode(values)))
        except Exception as exc:  # the JVM is going away, or a shim without pushMetrics
            if not self._told_failed and not self._taken_once:
                self._told_failed = True
                log.info("spark-steward could not publish its metrics to Spark: %s", exc)
            return
        if taken >= 0:
            self._taken_once = True
        elif not self._told_unregistered and not self._taken_once:
            self._told_unregistered = True
            log.info("spark-steward metrics are not in Spark's metrics system: they are "
                     "registered by the plugin (--conf spark.plugins=%s)", jvm.PLUGIN_CLASS)
