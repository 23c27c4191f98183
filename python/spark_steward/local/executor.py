"""The host-local working directory inside tasks: one :class:`WorkingDir` per process and
application, recovered at its first use in the process, and the task API
``spark_steward.local.state(name)``."""

from __future__ import annotations

import logging
import os
from collections import defaultdict

from spark_steward.applications import ApplicationRegistry
from spark_steward.config import HEARTBEAT_TIMEOUT
from spark_steward.local.config_keys import LOCAL_MAX_BYTES
from spark_steward.errors import StewardError
from spark_steward.local.fs import FileLock
from spark_steward.local.gc import sweep_local_folders
from spark_steward.local.stores import LocalState, sweep_sessions
from spark_steward.local.working_dir import WorkingDir
from spark_steward.private import PRIVATE_FILE_MODE, make_dirs
from spark_steward.kernel.executor import ExecutorRuntime, executor_runtime
from spark_steward.kernel.sessions import session_of_tags

#: The shim's list of ended Spark Connect sessions in an executor's first local dir (the
#: twin of ``ConnectArtifacts.ENDED_FILE``).
ENDED_SESSIONS_FILE = "spark-steward-ended-sessions"

log = logging.getLogger(__name__)


class ExecutorWorkingDir:
    """One per Python worker process and application."""

    def __init__(self, runtime: ExecutorRuntime) -> None:
        self.runtime = runtime
        self.work = WorkingDir(runtime.work_dir, runtime.context.app_id,
                               max_bytes=runtime.conf.get(LOCAL_MAX_BYTES))
        self._holds: dict[int, list[FileLock]] = defaultdict(list)
        runtime.on_task_end(lambda scope: self.release_task(scope.attempt_id))
        runtime.on_task_start(self._release_other_tasks)
        runtime.on_task_start(lambda _: self.sweep_ended_sessions())
        self._ended_stamp: int | None = None
        self._swept: set[str] = set()
        self._sweep_dead_applications_once_per_host()
        try:
            self.work.recover()
        except OSError as exc:
            log.warning("could not recover %s: %s; left-overs stay until the next start",
                        self.work.root, exc)

    def _sweep_dead_applications_once_per_host(self) -> None:
        """Removes what dead applications left on this host: their executors could not at their
        end (a crash, no executor left here at the end, the host unreachable then)."""
        marker = self.runtime.work_dir / ".swept"
        try:
            make_dirs(marker.parent)
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW,
                             PRIVATE_FILE_MODE))
        except FileExistsError:
            return
        registry = ApplicationRegistry(self.runtime.storage,
                                       heartbeat_timeout=self.runtime.conf.get(HEARTBEAT_TIMEOUT))
        try:
            sweep_local_folders(self.runtime.context.local_dir, registry,
                                self.runtime.context.app_id)
        except (OSError, StewardError) as exc:
            log.warning("could not sweep %s for dead applications' folders: %s",
                        self.runtime.context.local_dir, exc)

    def hold_for_task(self, entry: str, task_id: int) -> None:
        """Keeps ``entry`` from eviction and removal until task ``task_id`` ends."""
        self._holds[task_id].append(self.work.hold(entry))

    def release_task(self, task_id: int) -> None:
        """Releases the files task ``task_id`` held: they may be evicted again."""
        for lock in self._holds.pop(task_id, []):
            lock.release()

    def _release_other_tasks(self, running: int) -> None:
        for task_id in [t for t in self._holds if t != running]:
            self.release_task(task_id)


    def sweep_ended_sessions(self) -> None:
        """Removes the stores of the Spark Connect sessions that ended, as the shim lists them
        in this executor's first local dir (``ENDED_SESSIONS_FILE``), once per change."""
        local_dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
        if not local_dirs:
            return
        path = os.path.join(local_dirs.split(",")[0], ENDED_SESSIONS_FILE)
        try:
            stamp = os.stat(path).st_mtime_ns
            if stamp == self._ended_stamp:
                return
            with open(path, encoding="utf-8") as f:
                ended = {line.strip() for line in f if line.strip()}
        except (OSError, UnicodeDecodeError):
            return
        self._ended_stamp = stamp
        new = ended - self._swept
        if not new:
            return
        try:
            removed = sweep_sessions(self.work, new)
        except (OSError, StewardError) as exc:
            log.warning("could not remove ended Connect sessions' local state: %s", exc)
            self._ended_stamp = None  # again at the next task
            return
        self._swept |= new
        if removed:
            log.info("removed %d local state entr%s of %d ended Connect session(s)", removed,
                     "y" if removed == 1 else "ies", len(new))


def executor_working_dir() -> ExecutorWorkingDir:
    """The working dir of the running task's application in this process."""
    return executor_runtime().component("working-dir", ExecutorWorkingDir)


def local_state(name: str) -> LocalState:
    """``spark_steward.local.state(name)``: see :class:`~spark_steward.local.stores.LocalState`."""
    from pyspark import TaskContext

    work = executor_working_dir()
    tc = TaskContext.get()
    task = tc.taskAttemptId() if tc is not None else -1
    # A Spark Connect client's UDF: the stores are its session's, apart from other users'.
    found = session_of_tags(tc.getLocalProperty("spark.job.tags") if tc is not None else None)
    owner = found[0] if found is not None else ""
    if owner:
        work.sweep_ended_sessions()
    return LocalState(work.work, name, hold=lambda entry: work.hold_for_task(entry, task),
                      owner=owner)
