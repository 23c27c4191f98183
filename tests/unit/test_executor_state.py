"""Executor-side state outside Spark: context install, lazy runtime, components, hooks, fork."""

from __future__ import annotations

import os
import pickle
import pickletools
from typing import Iterator

import pytest

from spark_steward.errors import NotInTask
from spark_steward.kernel import executor
from spark_steward.kernel.executor import ExecutorContext, TaskScope


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """No task context before a test, and none left behind: a driver test later in the same
    process (a pytest-xdist worker) would think it runs inside a task."""
    executor._reset_after_fork()
    yield
    executor._reset_after_fork()


def _ctx(app: str = "app-1") -> ExecutorContext:
    return ExecutorContext(app_id=app, storage_url="memory://s", local_dir="/tmp/x",
                           auth_token="secret-token")


def test_context_broadcast_value_loads_without_any_module() -> None:
    # With I/O encryption a worker unpickles it before our code runs, maybe where we are not
    # installed: the pickle may name no class or function at all, not even a builtin one.
    full = ExecutorContext(app_id="app-1", storage_url="s3://b/p", local_dir="/tmp/x",
                           auth_token="secret-token", driver_host="10.0.0.5", server_port=4321,
                           server_cert="PEM", conf={"spark.steward.enabled": "true"},
                           setup=("spark_steward.blob.executor:setup",), log_level="DEBUG")
    for context in (_ctx(), full):
        data = pickle.dumps(context.to_broadcast(), pickle.HIGHEST_PROTOCOL)
        imports = [op.name for op, _, _ in pickletools.genops(data)
                   if op.name in ("GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE")]
        assert imports == [], imports
        assert ExecutorContext.from_broadcast(pickle.loads(data)) == context


def test_no_context_means_not_in_task() -> None:
    assert executor.current_context() is None
    with pytest.raises(NotInTask, match="spark.steward.enabled=true"):
        executor.executor_runtime()


def test_runtime_is_created_once_per_application() -> None:
    executor.install_context(_ctx())
    first = executor.executor_runtime()
    assert executor.executor_runtime() is first
    assert str(first.work_dir) == "/tmp/x/app-1"
    executor.install_context(_ctx("app-2"))
    assert executor.executor_runtime() is not first


def test_runtime_opens_the_storage_with_its_options() -> None:
    ctx = ExecutorContext(app_id="app-1", storage_url="memory://exec-storage", local_dir="/tmp/x",
                          auth_token="t", conf={"spark.steward.heartbeat.interval": "3s",
                                                "spark.steward.storage.option.skip_instance_cache":
                                                "true"})
    executor.install_context(ctx)
    rt = executor.executor_runtime()
    from spark_steward.config import HEARTBEAT_INTERVAL

    assert rt.conf.get(HEARTBEAT_INTERVAL) == 3.0
    assert rt.conf.storage_options() == {"skip_instance_cache": True}
    rt.storage.write_atomic("probe", b"1")
    assert rt.storage.read_bytes("probe") == b"1"


def test_components_are_built_once() -> None:
    executor.install_context(_ctx())
    rt = executor.executor_runtime()
    built: list[int] = []

    def factory(runtime: executor.ExecutorRuntime) -> object:
        built.append(1)
        return object()

    assert rt.component("c", factory) is rt.component("c", factory)
    assert built == [1]


def test_task_end_hooks_all_run_even_when_one_fails(caplog: pytest.LogCaptureFixture) -> None:
    executor.install_context(_ctx())
    rt = executor.executor_runtime()
    seen: list[str] = []

    def bad(scope: TaskScope) -> None:
        raise RuntimeError("hook broke")

    rt.on_task_end(bad)
    rt.on_task_end(lambda scope: seen.append("ran"))
    rt.end_task(TaskScope(rt, 0, 1, 0))
    assert seen == ["ran"] and "hook broke" in caplog.text


def test_token_is_not_in_repr() -> None:
    assert "secret-token" not in repr(_ctx())


def test_forked_child_starts_without_parent_state() -> None:
    executor.install_context(_ctx())
    executor.executor_runtime()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report what it inherited, then leave without running pytest's exit
        os.write(write, b"1" if executor.current_context() is None and not
                 executor._state.runtimes else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
