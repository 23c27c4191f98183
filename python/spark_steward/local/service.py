"""The local-state service on the driver (FLIP-201): the host-local working directories of
applications, owned like every other artifact.

At attach it removes the folders that dead applications left on this host (judged by their
records in the storage dir; a live application's folder is never touched), and at
``spark.stop()`` it removes this application's folder on the driver's host: blobs, the blob
cache, table replicas, merged-checkpoint spools and ``local.state`` values alike. It starts
before and stops after every capability that keeps files there.

The folders on executor hosts are the JVM shim's: inside ``SparkContext.stop()`` each executor
still running asks the driver whether the application ends and removes its host's folder
(``StewardPlugin``), and the context's stop waits, bounded, for their reports, so they are gone
before this service stops. A host none of whose executors saw the end (all removed earlier, or
unreachable) keeps its folder until the next application starts there or
``spark-steward gc --local-dir``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from spark_steward.errors import StewardError
from spark_steward.kernel.runtime import RuntimeService
from spark_steward.local.gc import sweep_local_folders

if TYPE_CHECKING:
    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)


class LocalService(RuntimeService):
    """Owner of the application's working directory on the driver's host."""

    name: ClassVar[str] = "local"
    rank: ClassVar[int] = 10

    def __init__(self) -> None:
        self.app_dir: Path | None = None

    def start(self, runtime: "DriverRuntime") -> None:
        local_dir = runtime.conf.local_dir()
        self.app_dir = Path(local_dir) / runtime.app_id
        try:
            sweep_local_folders(local_dir, runtime.registry, runtime.app_id)
        except (OSError, StewardError) as exc:
            log.warning("could not sweep %s for dead applications' folders: %s", local_dir, exc)

    def stop(self, runtime: "DriverRuntime") -> None:
        # After the JVM context stopped: an executor on this host may have removed it already.
        if self.app_dir is not None and self.app_dir.exists():
            shutil.rmtree(self.app_dir, ignore_errors=True)
            log.info("removed %s (the driver's host)", self.app_dir)
