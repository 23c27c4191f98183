"""Keeps this application's record in the storage dir: written at attach, refreshed every
heartbeat interval, marked finished at a clean stop. A crashed driver leaves a stale record,
which is how later runs and ``spark-steward gc`` know its artifacts are orphans."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from spark_steward.applications import ApplicationRecord
from spark_steward.config import HEARTBEAT_INTERVAL
from spark_steward.errors import StewardError
from spark_steward.kernel.services import RuntimeService

if TYPE_CHECKING:
    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)


class ApplicationHeartbeat(RuntimeService):
    name = "application-record"

    def __init__(self) -> None:
        self.record: ApplicationRecord | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, runtime: "DriverRuntime") -> None:
        registry = runtime.registry
        self.record = registry.new_record(runtime.app_id, runtime.app_name,
                                          spark_version=runtime.spark_version,
                                          steward_version=runtime.steward_version)
        registry.write(self.record)
        self._thread = threading.Thread(target=self._beat, args=(runtime, runtime.conf.get(HEARTBEAT_INTERVAL)),
                                        name="spark-steward-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, runtime: "DriverRuntime", interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                assert self.record is not None
                self.record = runtime.registry.heartbeat(self.record)
            except (StewardError, OSError) as exc:
                log.warning("spark-steward heartbeat for %s failed (will retry): %s",
                            runtime.app_id, exc)

    def stop(self, runtime: "DriverRuntime") -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.record is not None:
            self.record = runtime.registry.finish(self.record)
