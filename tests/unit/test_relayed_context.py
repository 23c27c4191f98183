"""The executor context the shim relays for Spark Connect clients' tasks (TaskContextRelay):
read from ``SPARK_LOCAL_DIRS`` only for a task of a Connect operation, read again when the file
changes (a restarted driver runtime), never for any other task, and a missing or broken file
means "not in a task of spark-steward" rather than an error. The truth each case is compared
with is what a task of that kind must see: the context written, or none."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from spark_steward.kernel import executor
from spark_steward.kernel.executor import RELAY_FILE, ExecutorContext

CONNECT_TAGS = ("SparkConnect_OperationTag_User_alice_Session_"
                "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0_Operation_"
                "11111111-2222-3333-4444-555555555555")


class FakeTask:
    def __init__(self, tags: str | None, attempt: int = 7) -> None:
        self.tags = tags
        self.attempt = attempt

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - pyspark's name
        return self.tags if key == "spark.job.tags" else None

    def taskAttemptId(self) -> int:  # noqa: N802
        return self.attempt


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    executor._reset_after_fork()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'blockmgr-1'},{tmp_path / 'other'}")
    (tmp_path / "blockmgr-1").mkdir()
    yield tmp_path / "blockmgr-1"
    executor._reset_after_fork()


def _task(monkeypatch: pytest.MonkeyPatch, tags: str | None, attempt: int = 7) -> None:
    import pyspark

    task = FakeTask(tags, attempt)
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: task))


def _context(tmp_path: Path, port: int = 4000, token: str = "t1") -> ExecutorContext:
    return ExecutorContext(app_id="app-1", storage_url="memory://s",
                           local_dir=str(tmp_path / "local"), auth_token=token,
                           driver_host="10.0.0.5", server_port=port,
                           conf={"spark.steward.enabled": "true"})


def _write(folder: Path, context: ExecutorContext, stamp: int) -> None:
    path = folder / RELAY_FILE
    path.write_text(json.dumps(context.to_broadcast()))
    os.utime(path, ns=(stamp, stamp))


@pytest.mark.parametrize("tags", [None, "", "nightly,etl", "SparkConnect_Operation",
                                  "sparkconnect_operationtag_user_a"],
                         ids=["none", "empty", "other-tags", "look-alike", "lower-case"])
def test_a_task_of_no_connect_operation_never_reads_the_relay(
        monkeypatch: pytest.MonkeyPatch, fresh_state: Path, tags: str | None) -> None:
    _write(fresh_state, _context(fresh_state), 10**18)
    _task(monkeypatch, tags)
    assert executor.current_context() is None


def test_a_connect_task_reads_the_relayed_context(monkeypatch: pytest.MonkeyPatch,
                                                  fresh_state: Path) -> None:
    written = _context(fresh_state)
    _write(fresh_state, written, 10**18)
    _task(monkeypatch, "etl," + CONNECT_TAGS)
    got = executor.current_context()
    assert got is not None and got.to_broadcast() == written.to_broadcast()


@pytest.mark.parametrize("content", ["", "{", "[]", '{"app_id": "a"}', '{"unknown": 1}'],
                         ids=["empty", "cut", "list", "fields-missing", "foreign-field"])
def test_a_broken_relay_file_is_no_context(monkeypatch: pytest.MonkeyPatch, fresh_state: Path,
                                           content: str) -> None:
    (fresh_state / RELAY_FILE).write_text(content)
    _task(monkeypatch, CONNECT_TAGS)
    assert executor.current_context() is None


def test_no_file_or_no_local_dirs_is_no_context(monkeypatch: pytest.MonkeyPatch,
                                                fresh_state: Path) -> None:
    _task(monkeypatch, CONNECT_TAGS)
    assert executor.current_context() is None
    _write(fresh_state, _context(fresh_state), 10**18)
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert executor.current_context() is None


def test_a_changed_file_is_read_again_and_the_old_runtime_dropped(
        monkeypatch: pytest.MonkeyPatch, fresh_state: Path) -> None:
    _task(monkeypatch, CONNECT_TAGS)
    _write(fresh_state, _context(fresh_state, 4000, "t1"), 10**18)
    first = executor.executor_runtime()
    assert first.context.server_port == 4000
    # Unchanged file: the same runtime.
    assert executor.executor_runtime() is first
    # A restarted driver runtime: new port and token, a new file, read by the next task (a
    # task keeps the context it started with).
    _write(fresh_state, _context(fresh_state, 5000, "t2"), 10**18 + 1)
    assert executor.executor_runtime() is first
    _task(monkeypatch, CONNECT_TAGS, attempt=8)
    second = executor.executor_runtime()
    assert second is not first
    assert (second.context.server_port, second.context.auth_token) == (5000, "t2")
    # The same content written again (a refresh): the runtime stays.
    _write(fresh_state, _context(fresh_state, 5000, "t2"), 10**18 + 2)
    _task(monkeypatch, CONNECT_TAGS, attempt=9)
    assert executor.executor_runtime() is second


def test_a_carried_context_wins_over_the_relay(monkeypatch: pytest.MonkeyPatch,
                                               fresh_state: Path) -> None:
    _write(fresh_state, _context(fresh_state, 4000), 10**18)
    _task(monkeypatch, CONNECT_TAGS)
    carried = _context(fresh_state, 6000)
    executor.install_context(carried)
    assert executor.current_context() is carried
