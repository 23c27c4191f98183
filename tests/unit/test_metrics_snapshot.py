"""The metrics snapshot Python pushes to the shim's StewardMetrics, and the cleanup backlog the
application record carries (issue 22, point 4)."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import pytest

from spark_steward.applications import ApplicationRegistry, CleanupBacklog, GivenUp
from spark_steward.cleaner import RetryingCleaner
from spark_steward.kernel import metrics
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.storage import Storage
from tests.unit.conftest import until

JAVA = Path(__file__).resolve().parents[2] / "jvm-shim/src/main/java/io/sparksteward/shim/kernel" \
    / "StewardMetrics.java"
DOC = Path(__file__).resolve().parents[2] / "docs/observability.md"


def java_names(array: str) -> tuple[str, ...]:
    body = re.search(rf"{array} = \{{(.*?)\}};", JAVA.read_text(), re.S)
    assert body, array
    return tuple(re.findall(r'"([a-z_.]+)"', body.group(1)))


def test_python_and_the_shim_register_the_same_names() -> None:
    assert java_names("GAUGES") == metrics.GAUGES
    assert java_names("COUNTERS") == metrics.COUNTERS
    assert len(set(metrics.NAMES)) == len(metrics.NAMES)


def test_every_name_is_documented() -> None:
    text = DOC.read_text()
    for name in metrics.NAMES:
        assert f"`{name}`" in text, name


class Reporter:
    def __init__(self, name: str, numbers: Mapping[str, int] | Exception,
                 backlog: CleanupBacklog | None = None) -> None:
        self.name = name
        self.numbers = numbers
        self.backlog = backlog

    def metrics(self) -> Mapping[str, int]:
        if isinstance(self.numbers, Exception):
            raise self.numbers
        return self.numbers

    def cleanup_backlog(self) -> CleanupBacklog | None:
        return self.backlog


def test_snapshot_adds_up_services_and_takes_cleanup_from_the_backlog() -> None:
    services = [
        Reporter("a", {"blobs.held": 2, "tables.hits": 3, "made.up": 9},
                 CleanupBacklog(2, 100.0, 1, (GivenUp("x", "OSError: no"),))),
        Reporter("b", {"blobs.held": 1}, CleanupBacklog(1, 50.0, 4)),
        Reporter("broken", RuntimeError("boom")),
    ]
    backlog = metrics.backlog_of(services)
    assert backlog == CleanupBacklog(3, 50.0, 5, (GivenUp("x", "OSError: no"),), 1)
    values = metrics.snapshot(services, backlog, events_dropped=7)
    assert set(values) == set(metrics.NAMES)  # unknown names dropped, missing ones 0
    assert values["blobs.held"] == 3 and values["tables.hits"] == 3
    assert values["cleanup.pending"] == 3 and values["cleanup.retries"] == 5
    assert values["cleanup.given_up"] == 1 and values["events.dropped"] == 7
    assert values["checkpoints.completed"] == 0
    assert metrics.encode({"a.b": 1, "c": 2}) == "a.b=1\nc=2\n"


def test_publish_never_raises_and_says_once_when_the_plugin_is_missing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pushed: list[str] = []
    answers: list[Any] = [-1, -1, RuntimeError("gateway gone"), RuntimeError("again")]

    def call(sc: object, method: str, *args: Any) -> Any:
        assert method == "pushMetrics"
        pushed.append(args[0])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(metrics.jvm, "call", call)
    report = metrics.RuntimeReport(object(), [Reporter("a", {"blobs.held": 1})], lambda: 0)
    with caplog.at_level("INFO", logger="spark_steward.kernel.metrics"):
        for _ in range(4):
            report.publish()
    assert len(pushed) == 4 and "blobs.held=1\n" in pushed[0]
    said = [r.getMessage() for r in caplog.records]
    assert sum("spark.plugins" in m for m in said) == 1
    assert sum("could not publish" in m for m in said) == 1
    assert report.backlog() == CleanupBacklog() and len(pushed) == 4


def test_a_stopped_context_is_not_reported_as_a_missing_plugin(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The heartbeat beats on while Spark stops: the plugin's metrics are gone then."""
    answers: list[Any] = [17, -1, RuntimeError("gateway closed")]

    def call(sc: object, method: str, *args: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(metrics.jvm, "call", call)
    report = metrics.RuntimeReport(object(), [], lambda: 0)
    with caplog.at_level("DEBUG", logger="spark_steward.kernel.metrics"):
        for _ in range(3):
            report.publish()
    assert not answers and caplog.records == []


def test_cleaner_backlog_counts_retries_ages_and_what_was_given_up() -> None:
    cleaner: RetryingCleaner[str] = RetryingCleaner(RetryStrategy.fixed(0.001, retries=1),
                                                    describe=lambda k: f"path/{k}")
    try:
        gate = {"stuck": True}

        def stuck() -> None:
            if gate["stuck"]:
                raise OSError("still there")

        def doomed() -> None:
            raise PermissionError("denied")

        before = time.time()
        cleaner.submit("a", doomed)
        assert until(lambda: bool(cleaner.given_up()))
        cleaner.submit("b", stuck)
        backlog = cleaner.backlog()
        assert backlog.given_up == (GivenUp("path/a", "PermissionError: denied"),)
        assert backlog.retries >= 1  # a's first failure was retried
        assert backlog.pending in (0, 1)
        if backlog.pending:
            assert backlog.oldest_pending_at is not None
            assert before - 1 <= backlog.oldest_pending_at <= time.time()
        gate["stuck"] = False
    finally:
        cleaner.close(5)
    assert cleaner.backlog().pending == 0 and cleaner.backlog().oldest_pending_at is None


def test_the_record_carries_the_backlog_and_tolerates_a_bad_one(tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path))
    registry = ApplicationRegistry(storage, heartbeat_timeout=60)
    record = registry.new_record("app-1", "n")
    assert record.cleanup is None
    backlog = CleanupBacklog(2, 123.5, 3, (GivenUp("checkpoints/s/1", "OSError: x"),))
    registry.finish(replace(record, cleanup=backlog))
    read = registry.read("app-1")
    assert read is not None and read.cleanup == backlog.bounded() and read.finished
    body = storage.read_record(registry.record_path("app-1"))
    body["cleanup"] = {"pending": "many"}
    storage.write_record(registry.record_path("app-1"), body)
    read = registry.read("app-1")
    assert read is not None and read.cleanup is None and read.finished


def test_the_heartbeat_writes_the_backlog_before_it_publishes(tmp_path: Path) -> None:
    """Publishing calls into the JVM: it comes after the record that keeps the application
    alive in others' eyes, and a failing report never stops the heartbeat."""
    from spark_steward.kernel.heartbeat import ApplicationHeartbeat

    registry = ApplicationRegistry(Storage.from_url(str(tmp_path)), heartbeat_timeout=60)
    backlog = CleanupBacklog(1, 5.0, 2, (GivenUp("p", "OSError: e"),))
    seen: list[CleanupBacklog | None] = []

    class Report:
        calls = 0

        def backlog(self) -> CleanupBacklog:
            Report.calls += 1
            if Report.calls == 2:
                raise RuntimeError("one bad beat")
            return backlog

        def publish(self, given: CleanupBacklog | None = None) -> None:
            record = registry.read("app-hb")
            assert record is not None
            seen.append(record.cleanup)

    heartbeat = ApplicationHeartbeat(registry, 0.01, report=Report())
    heartbeat.start("app-hb", "n", spark_version="", steward_version="")
    assert until(lambda: len(seen) >= 4)
    heartbeat.stop()
    assert seen[0] == backlog.bounded() and backlog.bounded() in seen[2:]
    final = registry.read("app-hb")
    assert final is not None and final.finished and final.cleanup == backlog.bounded()
