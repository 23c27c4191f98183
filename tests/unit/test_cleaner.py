"""RetryingCleaner: actions run on the IO pool, failures retried per the strategy (timed by the
injected clock), what was given up or left reported by close()."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from spark_steward.cleaner import RetryingCleaner
from spark_steward.lifecycle.retry import RetryStrategy
from tests.unit.conftest import FakeClock, until

FAST = RetryStrategy.fixed(0.001)


@pytest.fixture
def cleaners() -> Iterator[list[RetryingCleaner[object]]]:
    """Cleaners a test builds; closed afterwards whatever the test did."""
    made: list[RetryingCleaner[object]] = []
    yield made
    for cleaner in made:
        cleaner.close(0)


def make(cleaners: list[RetryingCleaner[object]], strategy: RetryStrategy = FAST,
         **kwargs: object) -> RetryingCleaner[object]:
    cleaner: RetryingCleaner[object] = RetryingCleaner(strategy, **kwargs)  # type: ignore[arg-type]
    cleaners.append(cleaner)
    return cleaner


class Flaky:
    """An action that fails its first ``failures`` attempts with ``error``."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or OSError("transient")
        self.attempts = 0
        self.done = 0
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.attempts += 1
            self.threads.add(threading.current_thread().name)
            if self.attempts <= self.failures:
                raise self.error
            self.done += 1


def test_ten_thousand_actions_with_transient_failures_all_finish(
        cleaners: list[RetryingCleaner[object]]) -> None:
    cleaner = make(cleaners, RetryStrategy.fixed(0.0005), threads=4)
    # 30% fail their first attempt, a third of those (10%) their second one too.
    actions = {k: Flaky(2 if k % 10 == 0 else 1 if k % 10 < 3 else 0) for k in range(10_000)}
    for key, action in actions.items():
        assert cleaner.submit(key, action) is True
    assert cleaner.wait_idle(15.0), f"still outstanding: {cleaner.stats()}"
    assert all(a.done == 1 for a in actions.values())
    assert Counter(a.attempts for a in actions.values()) == {1: 7000, 2: 2000, 3: 1000}
    assert cleaner.stats() == {"attempts": 14_000, "failures": 4_000, "outstanding": 0,
                               "given_up": 0}
    assert cleaner.given_up() == {}
    assert cleaner.close(1.0) == []


def test_actions_run_on_the_io_pool_not_the_caller(cleaners: list[RetryingCleaner[object]]
                                                   ) -> None:
    cleaner = make(cleaners, name="ckpt")
    action = Flaky(1)
    cleaner.submit("k", action)
    assert cleaner.wait_idle(5.0)
    assert action.done == 1
    assert action.threads and all(t.startswith("steward-ckpt") for t in action.threads)
    assert threading.current_thread().name not in action.threads


def test_pool_runs_at_most_threads_actions_at_once(cleaners: list[RetryingCleaner[object]]
                                                   ) -> None:
    cleaner = make(cleaners, threads=2)
    lock = threading.Lock()
    running, peak = [0], [0]

    def action() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    for key in range(8):
        cleaner.submit(key, action)
    assert cleaner.wait_idle(5.0)
    assert peak[0] == 2


def test_given_up_after_the_retries_with_the_last_error(
        cleaners: list[RetryingCleaner[object]], caplog: pytest.LogCaptureFixture) -> None:
    cleaner = make(cleaners, RetryStrategy.fixed(0.001, retries=2),
                   describe=lambda k: f"checkpoint {k}")
    action = Flaky(100, PermissionError("denied"))
    caplog.set_level(logging.WARNING, logger="spark_steward.cleaner")
    cleaner.submit("orders/1", action)
    assert cleaner.wait_idle(5.0)
    # The warning is logged just after the schedule is updated (outside its lock).
    assert until(lambda: any(r.levelno == logging.WARNING for r in caplog.records))
    assert action.attempts == 3
    assert cleaner.given_up() == {"orders/1": "PermissionError: denied"}
    assert cleaner.stats() == {"attempts": 3, "failures": 3, "outstanding": 0, "given_up": 1}
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1
    assert "checkpoint orders/1" in warning[0] and "PermissionError: denied" in warning[0]
    assert "fixed delay 0.001s, 2 retries" in warning[0]
    assert cleaner.close(1.0) == ["orders/1"]


def test_none_strategy_makes_one_attempt_and_resubmit_tries_again(
        cleaners: list[RetryingCleaner[object]]) -> None:
    cleaner = make(cleaners, RetryStrategy.no_retry())
    action = Flaky(1)
    assert cleaner.submit("k", action)
    assert cleaner.wait_idle(5.0)
    assert action.attempts == 1 and action.done == 0
    assert list(cleaner.given_up()) == ["k"]
    assert cleaner.submit("k", action) is True      # given up work can be handed in again
    assert cleaner.wait_idle(5.0)
    assert action.attempts == 2 and action.done == 1
    assert cleaner.given_up() == {}
    assert cleaner.close(1.0) == []


def test_outstanding_key_is_not_submitted_twice(cleaners: list[RetryingCleaner[object]]) -> None:
    cleaner = make(cleaners)
    gate = threading.Event()
    first, second = Flaky(0), Flaky(0)
    def gated() -> None:
        gate.wait(5.0)
        first()

    assert cleaner.submit("k", gated) is True
    assert cleaner.submit("k", second) is False
    assert cleaner.outstanding() == ["k"]
    gate.set()
    assert cleaner.wait_idle(5.0)
    assert first.done == 1 and second.attempts == 0
    assert cleaner.submit("k", second) is True      # finished keys may come again
    assert cleaner.wait_idle(5.0) and second.done == 1


def test_retry_waits_for_the_injected_clock(cleaners: list[RetryingCleaner[object]],
                                            clock: FakeClock) -> None:
    cleaner = make(cleaners, RetryStrategy.fixed(30.0), clock=clock)
    action = Flaky(1)
    cleaner.submit("k", action)
    assert until(lambda: action.attempts == 1)
    time.sleep(0.2)
    assert action.attempts == 1, "retried before the clock moved 30 s"
    assert cleaner.outstanding() == ["k"]
    clock.advance(29.0)
    time.sleep(1.2)                  # the scheduler looks at the clock at least every second
    assert action.attempts == 1, "retried 1 s early"
    clock.advance(1.0)
    assert cleaner.wait_idle(5.0)
    assert action.attempts == 2 and action.done == 1


def test_close_returns_work_that_is_still_waiting_for_a_retry(
        cleaners: list[RetryingCleaner[object]]) -> None:
    cleaner = make(cleaners, RetryStrategy.fixed(3600.0))
    doomed, fine = Flaky(1), Flaky(0)
    cleaner.submit("waiting", doomed)
    cleaner.submit("fine", fine)
    assert until(lambda: doomed.attempts == 1 and fine.done == 1)
    started = time.monotonic()
    assert cleaner.close(0.2) == ["waiting"]
    assert 0.15 <= time.monotonic() - started < 3.0
    assert cleaner.submit("late", Flaky(0)) is False
    assert doomed.attempts == 1


def test_close_waits_for_running_work_within_the_timeout(
        cleaners: list[RetryingCleaner[object]]) -> None:
    cleaner = make(cleaners)
    done = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        done.set()

    cleaner.submit("slow", slow)
    assert cleaner.close(5.0) == []
    assert done.is_set()


def test_submit_after_close_is_refused_and_never_runs(cleaners: list[RetryingCleaner[object]]
                                                      ) -> None:
    cleaner = make(cleaners)
    assert cleaner.close(1.0) == []
    action = Flaky(0)
    assert cleaner.submit("k", action) is False
    time.sleep(0.05)
    assert action.attempts == 0 and cleaner.outstanding() == []


def test_wait_idle_times_out_while_work_is_outstanding(
        cleaners: list[RetryingCleaner[object]]) -> None:
    cleaner = make(cleaners, RetryStrategy.fixed(3600.0))
    cleaner.submit("k", Flaky(5))
    started = time.monotonic()
    assert cleaner.wait_idle(0.1) is False
    assert time.monotonic() - started < 2.0
    assert cleaner.stats()["outstanding"] == 1


def test_cleanup_submitted_at_interpreter_exit_still_runs(tmp_path: Path) -> None:
    """A script that exits without spark.stop() detaches from atexit, when concurrent.futures
    refuses new work: the cleaner runs it on its own thread instead of waiting for nothing."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent("""
        import atexit, time
        from spark_steward.cleaner import RetryingCleaner
        from spark_steward.lifecycle.retry import RetryStrategy
        cleaner = RetryingCleaner(RetryStrategy.no_retry(), threads=2)
        done = []
        def at_exit():
            started = time.monotonic()
            cleaner.submit(("x", 1), lambda: done.append(1))
            left = cleaner.close(5)
            print(left, done, round(time.monotonic() - started, 1))
        atexit.register(at_exit)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[] [1] "), out.stdout + out.stderr
