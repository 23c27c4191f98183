"""The executor runtime: created lazily inside a task, once per Python worker process.

The executor context arrives with every task command (see :mod:`spark_steward.kernel.bootstrap`),
broadcast as plain builtins (:meth:`ExecutorContext.to_broadcast`); installing it is a dictionary
assignment. The runtime itself, with its working directory and the per-process components later
capabilities add (blob cache, segment writer, local state), is built on first use. Sibling
worker processes of one executor share the host-local directory and coordinate through it (file
locks, atomic renames), never through memory.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeVar

from spark_steward.errors import NotInTask
from spark_steward.private import ensure_private_root

if TYPE_CHECKING:
    from spark_steward.config import StewardConf
    from spark_steward.storage import Storage

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class ExecutorContext:
    """What every task of one application needs to reach spark-steward; sent by broadcast.

    The token authenticates executors to the driver's servers; it never goes into local
    properties, which show up in the Spark UI and event logs.
    """

    app_id: str
    storage_url: str
    local_dir: str
    auth_token: str = field(repr=False)
    driver_host: str = ""
    server_port: int | None = None
    #: The blob server's pinned TLS certificate (PEM) when transfers are encrypted, else "".
    server_cert: str = ""
    conf: Mapping[str, str] = field(default_factory=dict)
    #: ``module:function`` names each process calls once before its first task (the
    #: capabilities' executor setup, see ``RuntimeService.executor_setup``).
    setup: tuple[str, ...] = ()
    #: The log4j level of the driver's ``spark_steward`` logger: Python workers log to their
    #: stderr at it (see :mod:`spark_steward.kernel.logs`).
    log_level: str = ""

    def to_broadcast(self) -> dict[str, Any]:
        """This context as builtins only (str, int, None, dict, tuple): the value of the
        context broadcast. With ``spark.io.encryption.enabled`` a Python worker unpickles every
        broadcast its task references as it starts, before any of our code runs, so an
        executor whose Python lacks spark-steward must be able to load it; a class of ours in
        it would fail every task there, plain ones too."""
        value = {f.name: getattr(self, f.name) for f in fields(self)}
        value["conf"] = dict(self.conf)
        value["setup"] = tuple(self.setup)
        return value

    @classmethod
    def from_broadcast(cls, value: Mapping[str, Any]) -> ExecutorContext:
        """The context that :meth:`to_broadcast` turned into ``value``, rebuilt on an executor
        whose Python has spark-steward."""
        return cls(**value)


TaskHook = Callable[["TaskScope"], None]


@dataclass
class TaskScope:
    """One task attempt running in this process; components hang per-task state on it."""

    runtime: "ExecutorRuntime"
    partition: int
    attempt_id: int
    stage_id: int
    state: dict[str, Any] = field(default_factory=dict)
    succeeded: bool = False


class ExecutorRuntime:
    """Per-process, per-application state on an executor."""

    def __init__(self, context: ExecutorContext) -> None:
        self.context = context
        self.pid = os.getpid()
        self.created_at = time.time()
        from spark_steward.kernel.logs import log_to_stderr_in_worker

        log_to_stderr_in_worker(context.log_level)
        # Checked once per process before anything goes there: refused (ConfigError, one line)
        # when another user planted it or can write to it, as on the driver.
        ensure_private_root(context.local_dir, key="spark.steward.local.dir")
        self.work_dir = Path(context.local_dir) / context.app_id
        self._components: dict[str, Any] = {}
        # Reentrant: a component's factory may register task-end hooks.
        self._lock = threading.RLock()
        self._task_end_hooks: list[TaskHook] = []
        self._task_start_hooks: list[Callable[[int], None]] = []
        self.tasks_entered = 0
        self.tasks_exited = 0

    @cached_property
    def conf(self) -> "StewardConf":
        """The application's spark.steward.* settings, typed (validated on the driver)."""
        from spark_steward.config import StewardConf

        return StewardConf.from_pairs(self.context.conf.items(), warn_unknown=False)

    @cached_property
    def storage(self) -> "Storage":
        """The application's storage dir, opened on first use in this process."""
        from spark_steward.storage import Storage

        return Storage.from_url(self.context.storage_url, **self.conf.storage_options())

    def component(self, name: str, factory: Callable[["ExecutorRuntime"], T]) -> T:
        """The process-wide component ``name``, built by ``factory`` on first use."""
        with self._lock:
            if name not in self._components:
                self._components[name] = factory(self)
            return self._components[name]  # type: ignore[no-any-return]

    def on_task_end(self, hook: TaskHook) -> None:
        """Runs ``hook`` when each task attempt in this process ends, however it ends."""
        with self._lock:
            self._task_end_hooks.append(hook)

    def on_task_start(self, hook: Callable[[int], None]) -> None:
        """Runs ``hook(task_attempt_id)`` when a new task's command reaches this process. A
        worker runs one task at a time, so this also ends whatever the previous task held,
        for tasks (UDFs) that no try/finally brackets."""
        with self._lock:
            self._task_start_hooks.append(hook)

    def start_task(self, task_attempt_id: int) -> None:
        """Runs the capabilities' task-start hooks; a failing hook is logged, not raised."""
        for hook in list(self._task_start_hooks):
            try:
                hook(task_attempt_id)
            except Exception:
                log.exception("spark-steward task-start hook %r failed", hook)

    def end_task(self, scope: TaskScope) -> None:
        """Runs the capabilities' task-end hooks; a failing hook is logged, not raised."""
        self.tasks_exited += 1
        for hook in list(self._task_end_hooks):
            try:
                hook(scope)
            except Exception:
                log.exception("spark-steward task-end hook %r failed", hook)


class _ProcessState:
    """Module state, reset after fork so a forked worker never inherits its parent's runtime."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.context: ExecutorContext | None = None
        self.context_task: int | None = None
        #: The context relayed for Spark Connect tasks, with its file's mtime (read again when
        #: the file changes).
        self.relayed: tuple[int, ExecutorContext] | None = None
        self.runtimes: dict[str, ExecutorRuntime] = {}
        self.lock = threading.Lock()
        self.setup_done: set[str] = set()
        self.setup_lock = threading.Lock()


_state = _ProcessState()


def _reset_after_fork() -> None:
    global _state
    _state = _ProcessState()


os.register_at_fork(after_in_child=_reset_after_fork)


def _task_attempt_id() -> int | None:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.taskAttemptId() if tc is not None else None


def install_context(context: ExecutorContext) -> None:
    """Makes ``context`` current for the running task (cheap; called for every task command).

    The context belongs to the task whose command carried it: a reused worker that later runs
    a task from a session with spark-steward off does not see it.
    """
    if context.setup and not _state.setup_done.issuperset(context.setup):
        _run_setup(context.setup)
    task = _task_attempt_id()
    changed = task != _state.context_task
    _state.context = context
    _state.context_task = task
    runtime = _state.runtimes.get(context.app_id)
    if changed and task is not None and runtime is not None:
        runtime.start_task(task)


def _run_setup(names: tuple[str, ...]) -> None:
    """Calls each capability's executor setup once per process, then installs the pyspark
    interceptions they registered. A failing setup is logged and not retried: the task runs
    without that capability's executor-side hooks rather than failing."""
    from spark_steward.kernel import patches

    with _state.setup_lock:
        for name in names:
            if name in _state.setup_done:
                continue
            _state.setup_done.add(name)
            module, _, function = name.partition(":")
            try:
                getattr(importlib.import_module(module), function)()
            except Exception:
                log.exception("spark-steward executor setup %s failed in pid %d", name,
                              os.getpid())
        patches.install()


def current_context() -> ExecutorContext | None:
    """The executor context of the running task, or None when its job did not carry one (a
    Spark Connect client's task finds the one the shim relayed, see :func:`relayed_context`)."""
    context = _state.context
    if context is not None and _state.context_task is not None \
            and _task_attempt_id() != _state.context_task:
        context = None
    return context if context is not None else relayed_context()


#: The file the shim's ``TaskContextRelay`` writes into the executor's first block-manager dir,
#: which Spark gives its Python workers as ``SPARK_LOCAL_DIRS``.
RELAY_FILE = "spark-steward-task-context.json"
#: The job tag Spark Connect puts on every operation's jobs.
CONNECT_TAG = "SparkConnect_OperationTag_"


def relayed_context() -> ExecutorContext | None:
    """For a task of a Spark Connect operation, whose command no Python of ours pickled (a
    client's UDF): the driver runtime's context as the shim relayed it to this executor, made
    current for the task; None for any other task, or before the relay wrote it."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None or CONNECT_TAG not in (tc.getLocalProperty("spark.job.tags") or ""):
        return None
    local_dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    if not local_dirs:
        return None
    path = Path(local_dirs.split(",")[0]) / RELAY_FILE
    try:
        stamp = path.stat().st_mtime_ns
        if _state.relayed is None or _state.relayed[0] != stamp:  # new, or a restarted runtime's
            body = json.loads(path.read_text())
            fresh = ExecutorContext.from_broadcast({**body, "setup": tuple(body.get("setup", ())),
                                                    "conf": dict(body.get("conf", {}))})
            old = _state.runtimes.get(fresh.app_id)
            if old is not None and old.context != fresh:
                # A restarted driver runtime: its blob server has a new port and token.
                with _state.lock:
                    _state.runtimes.pop(fresh.app_id, None)
            _state.relayed = (stamp, fresh)
    except (OSError, ValueError, TypeError):
        return None  # not written yet: the task runs without spark-steward
    context = _state.relayed[1]
    install_context(context)
    return context


def executor_runtime() -> ExecutorRuntime:
    """The runtime of the current application in this process, created on first call.

    Raises NotInTask outside a task that carries spark-steward's executor context.
    """
    context = current_context()
    if context is None:
        raise NotInTask(
            "spark-steward is not active in this task: the job was not submitted from a "
            "SparkSession with spark.steward.enabled=true, or this code runs outside a Spark task")
    runtime = _state.runtimes.get(context.app_id)
    if runtime is None:
        with _state.lock:
            runtime = _state.runtimes.get(context.app_id)
            if runtime is None:
                runtime = ExecutorRuntime(context)
                _state.runtimes[context.app_id] = runtime
                log.info("spark-steward executor runtime for %s started in pid %d",
                         context.app_id, runtime.pid)
    return runtime


@contextmanager
def task_scope() -> Iterator[TaskScope]:
    """Brackets one task attempt: hooks run on success, failure or kill (try/finally)."""
    from pyspark import TaskContext

    runtime = executor_runtime()
    tc = TaskContext.get()
    scope = TaskScope(runtime,
                      tc.partitionId() if tc else -1,
                      tc.taskAttemptId() if tc else -1,
                      tc.stageId() if tc else -1)
    runtime.tasks_entered += 1
    try:
        yield scope
        scope.succeeded = True
    finally:
        runtime.end_task(scope)


class TaskScoped:
    """``func(split, iterator)`` of an RDD command, run inside a :func:`task_scope` (built on
    the executor by :func:`spark_steward.kernel.carrier.unwrap`)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[int, Iterable[Any]], Iterable[Any]]) -> None:
        self.func = func

    def __call__(self, split: int, iterator: Iterable[Any]) -> Iterator[Any]:
        with task_scope():
            yield from self.func(split, iterator)
