"""Whether the executors' Python has spark-steward, learnt from the tasks themselves.

The carrier of every command (:mod:`spark_steward.kernel.carrier`) counts, in an accumulator,
each task whose Python could not import spark-steward; the task itself runs on unchanged. The
driver reads the count at every job's end and warns once, naming the fix, and capabilities
that need spark-steward on executors :meth:`ExecutorPackageWatch.require` it first. A probe
of our own would see a different Python: the executors' PYTHONPATH, ``--py-files`` and
archives are set up by Spark for tasks only.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from spark_steward.errors import SetupError
from spark_steward.kernel.events import JobEnd

if TYPE_CHECKING:
    from pyspark import Accumulator, SparkContext

log = logging.getLogger(__name__)


class ExecutorPackageWatch:
    """Counts tasks that ran in an executor Python without spark-steward."""

    def __init__(self, sc: "SparkContext") -> None:
        self.missing: "Accumulator[int]" = sc.accumulator(0)
        self.python = str(getattr(sc, "pythonExec", "") or "python3")
        self._warned = False
        self._lock = threading.Lock()

    def on_event(self, event: Any) -> None:
        """Checks the executors' package after every job."""
        if isinstance(event, JobEnd):
            self.check()

    def _message(self, count: int) -> str:
        return (f"{count} task(s) ran in an executor Python without spark-steward "
                f"({self.python}): plain PySpark code runs unchanged, but tasks that call "
                "spark-steward fail. Install spark-steward (the driver's version) in the "
                "executors' Python on every host, or ship it with the job's environment")

    def check(self) -> int:
        """The count so far; warns once when it is not zero."""
        count = int(self.missing.value)
        if count:
            with self._lock:
                warn, self._warned = not self._warned, True
            if warn:
                log.warning("spark-steward: %s", self._message(count))
        return count

    def require(self, what: str) -> None:
        """SetupError when tasks have met executors without spark-steward: ``what`` (say,
        "file-merged checkpoints") runs spark-steward in tasks."""
        count = self.check()
        if count:
            raise SetupError(f"{what} need spark-steward on the executors: "
                             + self._message(count))
