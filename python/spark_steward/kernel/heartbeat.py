"""Keeps this application's record in the storage dir: written at attach, refreshed every
heartbeat interval, marked finished at a clean stop. A crashed driver leaves a stale record,
which is how later runs and ``spark-steward gc`` know its artifacts are orphans."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Protocol

from spark_steward.applications import (ApplicationRecord, ApplicationRegistry, CleanupBacklog,
                                         SessionsReport)
from spark_steward.errors import StewardError

log = logging.getLogger(__name__)


class BeatReport(Protocol):
    """What the heartbeat reports every beat: the cleanup backlog its record carries, then,
    once the record is written, the metrics (a call into the JVM, which must never delay the
    record that keeps this application from being taken for dead)."""

    def backlog(self) -> CleanupBacklog | None:
        """The cleanup backlog to publish with the next heartbeat."""

    def publish(self, backlog: CleanupBacklog | None = None) -> None:
        """Publishes ``backlog`` with the application record."""

    def sessions(self) -> SessionsReport | None:
        """The Connect sessions the record carries (None for a classic application)."""


class ApplicationHeartbeat:
    """The kernel's own: started before every capability, stopped after all of them."""

    def __init__(self, registry: ApplicationRegistry, interval: float,
                 report: BeatReport | None = None) -> None:
        self.registry = registry
        self.interval = interval
        self.report = report
        self.record: ApplicationRecord | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, app_id: str, app_name: str, *, spark_version: str,
              steward_version: str, driver_pid: int | None = None) -> None:
        """Writes the application record (naming ``driver_pid``, this process by default) and
        starts the thread that refreshes it every interval."""
        self.record = self.registry.new_record(app_id, app_name, spark_version=spark_version,
                                               steward_version=steward_version,
                                               driver_pid=driver_pid)
        self.registry.write(self.record)
        self._thread = threading.Thread(target=self._beat, name="spark-steward-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                assert self.record is not None
                self.record = self.registry.heartbeat(self._with_backlog(self.record))
            except (StewardError, OSError) as exc:
                log.warning("spark-steward heartbeat for %s failed (will retry): %s",
                            self.record.app_id if self.record else "?", exc)
            if self.report is not None:
                self.report.publish(self.record.cleanup if self.record else None)

    def _with_backlog(self, record: ApplicationRecord) -> ApplicationRecord:
        if self.report is None:
            return record
        try:
            backlog = self.report.backlog()
            record = replace(record, cleanup=None if backlog is None else backlog.bounded())
        except Exception:  # the backlog only informs: the heartbeat must go on
            log.exception("spark-steward could not collect %s's cleanup backlog",
                          record.app_id)
        try:
            return replace(record, sessions=self.report.sessions())
        except Exception:  # so do the sessions
            log.exception("spark-steward could not collect %s's Connect sessions",
                          record.app_id)
            return record

    def stop(self) -> None:
        """Marks the record finished (with what cleanup is left): a clean stop, never
        mistaken for a crash."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.record is not None:
            self.record = self.registry.finish(self._with_backlog(self.record))
