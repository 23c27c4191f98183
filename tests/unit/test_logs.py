"""kernel/logs.py: records of the spark_steward logger tree forwarded to the driver's log4j at
log4j's level, with stderr (in Spark's layout) when the JVM cannot take them: no JVM, a record
logged while forwarding, a gateway gone at shutdown."""

from __future__ import annotations

import io
import logging
import re
import threading
from typing import Any, Iterator

import pytest

from spark_steward.kernel import logs

SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (\S+) (\S+): (.*)$")


class FakeLog4j:
    """Stands in for kernel.jvm.Log4jLoggers: levels by logger name, a list of calls."""

    def __init__(self, levels: dict[str, str] | None = None, fail: bool = False) -> None:
        self.levels = levels or {"spark_steward": "INFO"}
        self.fail = fail
        self.logged: list[tuple[str, str, str, str]] = []
        self.on_log: Any = None
        self.closed = False

    def level(self, name: str) -> str:
        while name not in self.levels and "." in name:
            name = name.rsplit(".", 1)[0]
        return self.levels.get(name, "WARN")

    def configured(self, prefix: str) -> list[str]:
        return [n for n in self.levels if n == prefix or n.startswith(prefix + ".")]

    def log(self, name: str, level: str, message: str) -> None:
        if self.fail:
            raise ConnectionError("gateway gone")
        self.logged.append((name, level, message, threading.current_thread().name))
        if self.on_log is not None:
            self.on_log()

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def forwarding(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLog4j]:
    fake = FakeLog4j({"spark_steward": "INFO", "spark_steward.cleaner": "ERROR"})
    monkeypatch.setattr("spark_steward.kernel.jvm.Log4jLoggers", lambda sc: fake)
    before = (logging.getLogger("spark_steward").level,
              logging.getLogger("spark_steward.cleaner").level)
    handler = logs.forward_to_log4j(object())  # type: ignore[arg-type]
    assert handler is not None
    yield fake
    logs.stop_forwarding()
    assert (logging.getLogger("spark_steward").level,
            logging.getLogger("spark_steward.cleaner").level) == before
    assert handler not in logging.getLogger("spark_steward").handlers and fake.closed


def test_records_reach_log4j_with_its_levels_and_names(forwarding: FakeLog4j) -> None:
    logging.getLogger("spark_steward.checkpoint.service").info("saved %s/%d", "s", 3)
    logging.getLogger("spark_steward.checkpoint.service").debug("not enabled in log4j")
    logging.getLogger("spark_steward.blob.depot").warning("careful")
    assert [(n, lvl, m) for n, lvl, m, _ in forwarding.logged] == [
        ("spark_steward.checkpoint.service", "INFO", "saved s/3"),
        ("spark_steward.blob.depot", "WARN", "careful")]


def test_a_logger_log4j_configures_gets_its_own_level(forwarding: FakeLog4j) -> None:
    logging.getLogger("spark_steward.cleaner").warning("below ERROR: dropped in Python")
    logging.getLogger("spark_steward.cleaner").error("shown")
    assert [m for _, _, m, _ in forwarding.logged] == ["shown"]


def test_exceptions_travel_with_the_record(forwarding: FakeLog4j) -> None:
    try:
        raise ValueError("bad value 42")
    except ValueError:
        logging.getLogger("spark_steward.x").exception("it failed")
    [(_, level, message, _)] = forwarding.logged
    assert level == "ERROR"
    assert message.startswith("it failed\nTraceback (most recent call last):")
    assert message.rstrip().endswith("ValueError: bad value 42")


def test_a_record_logged_while_forwarding_goes_to_stderr(
        forwarding: FakeLog4j, capsys: pytest.CaptureFixture[str]) -> None:
    inner = logging.getLogger("spark_steward.kernel.jvm")
    forwarding.on_log = lambda: inner.warning("logged from inside the forwarding")
    logging.getLogger("spark_steward.outer").warning("outer")
    assert [m for _, _, m, _ in forwarding.logged] == ["outer"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    match = SPARK_LINE.match(err[0])
    assert match and match.groups() == ("WARN", "jvm", "logged from inside the forwarding")


def test_a_dead_gateway_falls_back_to_stderr_for_good(
        forwarding: FakeLog4j, capsys: pytest.CaptureFixture[str]) -> None:
    forwarding.fail = True
    logging.getLogger("spark_steward.kernel.runtime").info("detached from app-1")
    forwarding.fail = False
    logging.getLogger("spark_steward.kernel.runtime").info("still stderr")
    err = capsys.readouterr().err.splitlines()
    assert [SPARK_LINE.match(line).groups()[2] for line in err] == [  # type: ignore[union-attr]
        "detached from app-1", "still stderr"]
    assert forwarding.logged == []


def test_the_handler_holds_no_lock_across_the_jvm_call(forwarding: FakeLog4j) -> None:
    """A thread stuck in the JVM call does not hold up another thread's record."""
    entered, release = threading.Event(), threading.Event()

    def block() -> None:
        if threading.current_thread().name == "slow":
            entered.set()
            release.wait(5)

    forwarding.on_log = block
    slow = threading.Thread(target=lambda: logging.getLogger("spark_steward.a").warning("slow"),
                            name="slow")
    slow.start()
    assert entered.wait(5)
    logging.getLogger("spark_steward.b").warning("fast")  # returns although "slow" waits
    assert [m for _, _, m, _ in forwarding.logged][-1] == "fast"
    release.set()
    slow.join(5)


def test_no_jvm_leaves_python_logging_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_steward.errors import SetupError

    def no_jvm(sc: object) -> None:
        raise SetupError("the SparkContext has no JVM")

    monkeypatch.setattr("spark_steward.kernel.jvm.Log4jLoggers", no_jvm)
    level = logging.getLogger("spark_steward").level
    assert logs.forward_to_log4j(object()) is None  # type: ignore[arg-type]
    assert logging.getLogger("spark_steward").level == level
    assert not [h for h in logging.getLogger("spark_steward").handlers
                if isinstance(h, logs.Log4jHandler)]
    logs.stop_forwarding()  # nothing to undo


def test_level_names_both_ways() -> None:
    assert [logs.log4j_level(n) for n in (50, 40, 30, 20, 10, 5, 25)] == [
        "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "INFO"]
    assert logs.python_level("warn") == logging.WARNING
    assert logs.python_level("OFF") > logging.CRITICAL
    assert logs.python_level("nonsense") == logging.WARNING


def test_spark_layout() -> None:
    record = logging.LogRecord("spark_steward.blob.server", logging.WARNING, __file__, 1,
                               "refused %d", (3,), None)
    line = logs.SparkFormatter().format(record)
    match = SPARK_LINE.match(line)
    assert match and match.groups() == ("WARN", "server", "refused 3")


def test_the_worker_handler_stays_out_of_processes_without_a_task() -> None:
    before = list(logging.getLogger("spark_steward").handlers)
    logs.log_to_stderr_in_worker("INFO")
    assert logging.getLogger("spark_steward").handlers == before


def test_the_worker_handler_in_a_task(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import pyspark

    logger = logging.getLogger("spark_steward")
    level, handlers = logger.level, list(logger.handlers)
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: object()))
    monkeypatch.setattr(logs, "_worker_pid", None)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    try:
        logs.log_to_stderr_in_worker("INFO")
        logs.log_to_stderr_in_worker("INFO")  # once per process
        added = [h for h in logger.handlers if h not in handlers]
        assert len(added) == 1 and logger.level == logging.INFO
        logging.getLogger("spark_steward.local.state").info("put %s", "k")
        import sys

        [line] = sys.stderr.getvalue().splitlines()  # type: ignore[attr-defined]
        assert SPARK_LINE.match(line).groups() == ("INFO", "state", "put k")  # type: ignore
    finally:
        for handler in logger.handlers[:]:
            if handler not in handlers:
                logger.removeHandler(handler)
        logger.setLevel(level)
