"""CleanupSchedule with a hand-driven clock: what is due when, retries per the strategy,
giving up, resubmission."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_steward.lifecycle.cleanup_schedule import CleanupSchedule
from spark_steward.lifecycle.retry import RetryStrategy
from tests.unit.conftest import FakeClock


def schedule(clock: FakeClock, strategy: RetryStrategy | None = None) -> CleanupSchedule[str]:
    return CleanupSchedule(strategy or RetryStrategy.fixed(10.0), clock)


def test_nothing_is_due_before_its_time(clock: FakeClock) -> None:
    sched = schedule(clock)
    assert sched.submit("a", delay=5.0) is True
    assert sched.due() == []
    assert sched.next_due_in() == 5.0
    clock.advance(4.5)
    assert sched.due() == []
    assert sched.next_due_in() == 0.5
    clock.advance(0.5)
    assert sched.due() == ["a"]
    assert sched.task("a") is not None and sched.task("a").running  # type: ignore[union-attr]


def test_submitted_without_delay_is_due_at_once(clock: FakeClock) -> None:
    sched = schedule(clock)
    sched.submit("a")
    assert sched.next_due_in() == 0.0
    assert sched.due() == ["a"]
    assert sched.attempts == 1


def test_due_in_time_order_then_submission_order(clock: FakeClock) -> None:
    sched = schedule(clock)
    sched.submit("late", delay=3.0)
    sched.submit("b", delay=1.0)
    sched.submit("a", delay=1.0)
    sched.submit("first", delay=0.5)
    clock.advance(2.0)
    assert sched.due() == ["first", "b", "a"]
    clock.advance(1.0)
    assert sched.due() == ["late"]


def test_running_task_is_not_due_again(clock: FakeClock) -> None:
    sched = schedule(clock)
    sched.submit("a")
    assert sched.due() == ["a"]
    clock.advance(100.0)
    assert sched.due() == []
    assert sched.next_due_in() is None
    assert sched.outstanding() == ["a"]


def test_submitting_an_outstanding_key_again_is_refused(clock: FakeClock) -> None:
    sched = schedule(clock)
    assert sched.submit("a", delay=5.0) is True
    assert sched.submit("a") is False
    assert sched.due() == []          # the refused submit did not move it forward
    assert len(sched) == 1


def test_failed_task_comes_back_after_exactly_the_fixed_delay(clock: FakeClock) -> None:
    sched = schedule(clock, RetryStrategy.fixed(10.0))
    sched.submit("a")
    assert sched.due() == ["a"]
    clock.advance(2.0)               # the attempt took 2 s: the delay counts from its failure
    assert sched.failed("a", "OSError: boom") == 10.0
    task = sched.task("a")
    assert task is not None and task.failures == 1 and task.last_error == "OSError: boom"
    assert not task.running and task.due_at == clock.now + 10.0
    assert sched.next_due_in() == 10.0
    clock.advance(9.5)
    assert sched.due() == []
    clock.advance(0.5)
    assert sched.due() == ["a"]


def test_exponential_retries_come_back_after_1_2_4_8_capped(clock: FakeClock) -> None:
    sched = schedule(clock, RetryStrategy.exponential(1.0, 5.0))
    sched.submit("a")
    gaps = []
    for _ in range(6):
        assert sched.due() == ["a"]
        delay = sched.failed("a", "e")
        assert delay is not None and sched.next_due_in() == delay
        clock.advance(delay / 2)
        assert sched.due() == [], "due before its retry delay passed"
        clock.advance(delay / 2)
        gaps.append(delay)
    assert sched.due() == ["a"]
    assert gaps == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert sched.failures == 6 and sched.attempts == 7


def test_given_up_after_exhausting_the_retries(clock: FakeClock) -> None:
    sched = schedule(clock, RetryStrategy.fixed(1.0, retries=2))
    sched.submit("a")
    results: list[float | None] = []
    for _ in range(3):
        assert sched.due() == ["a"]
        results.append(sched.failed("a", f"error {len(results)}"))
        clock.advance(1.0)
    assert results == [1.0, 1.0, None]
    assert sched.outstanding() == [] and len(sched) == 0
    assert list(sched.given_up) == ["a"]
    assert sched.given_up["a"].failures == 3
    assert sched.given_up["a"].last_error == "error 2"
    clock.advance(1000.0)
    assert sched.due() == [] and sched.next_due_in() is None
    assert sched.attempts == 3 and sched.failures == 3


def test_none_strategy_gives_up_on_the_first_failure(clock: FakeClock) -> None:
    sched = schedule(clock, RetryStrategy.no_retry())
    sched.submit("a")
    sched.submit("b")
    assert sched.due() == ["a", "b"]
    assert sched.failed("a", "PermissionError: no") is None
    sched.succeeded("b")
    assert list(sched.given_up) == ["a"] and sched.outstanding() == []


def test_resubmit_after_give_up_starts_afresh(clock: FakeClock) -> None:
    sched = schedule(clock, RetryStrategy.fixed(1.0, retries=0))
    sched.submit("a")
    sched.due()
    assert sched.failed("a", "e") is None
    assert "a" in sched.given_up
    assert sched.submit("a") is True
    assert "a" not in sched.given_up
    task = sched.task("a")
    assert task is not None and task.failures == 0 and task.last_error == ""
    assert sched.due() == ["a"]
    sched.succeeded("a")
    assert len(sched) == 0 and sched.given_up == {}


def test_succeeded_removes_the_task(clock: FakeClock) -> None:
    sched = schedule(clock)
    sched.submit("a")
    sched.submit("b")
    assert sched.due() == ["a", "b"]
    sched.succeeded("a")
    assert sched.outstanding() == ["b"]
    assert sched.task("a") is None
    assert sched.submit("a") is True          # a finished key may be scheduled again


def test_succeeded_after_a_retry_leaves_no_stale_entry(clock: FakeClock) -> None:
    sched = schedule(clock, RetryStrategy.fixed(1.0))
    sched.submit("a")
    sched.due()
    sched.failed("a", "e")
    clock.advance(1.0)
    assert sched.due() == ["a"]
    sched.succeeded("a")
    clock.advance(100.0)
    assert sched.due() == [] and sched.next_due_in() is None and len(sched) == 0


def test_failed_report_for_an_unknown_key_is_ignored(clock: FakeClock) -> None:
    sched = schedule(clock)
    assert sched.failed("never", "e") is None
    assert sched.failures == 0 and sched.given_up == {}


def test_outstanding_lists_waiting_and_running_in_submission_order(clock: FakeClock) -> None:
    sched = schedule(clock)
    sched.submit("c", delay=9.0)
    sched.submit("a")
    sched.submit("b", delay=1.0)
    assert sched.due() == ["a"]
    assert sched.outstanding() == ["c", "a", "b"]


OPS = st.lists(st.tuples(st.sampled_from(["submit", "due", "fail", "ok", "tick"]),
                         st.integers(0, 3)), max_size=80)


@given(OPS)
def test_every_due_key_was_outstanding_and_never_early(ops: list[tuple[str, int]]) -> None:
    """Model check: a key is handed out at most once at a time, only when its time came, and
    each failure pushes it exactly one fixed delay (2 s) into the future."""
    clock = FakeClock(0.0)
    sched: CleanupSchedule[int] = CleanupSchedule(RetryStrategy.fixed(2.0, retries=3), clock)
    due_at: dict[int, float] = {}
    running: set[int] = set()
    fails: dict[int, int] = {}
    given_up: set[int] = set()
    for op, key in ops:
        if op == "submit":
            accepted = sched.submit(key)
            assert accepted == (key not in due_at and key not in running)
            if accepted:
                due_at[key] = clock.now
                fails[key] = 0
                given_up.discard(key)
        elif op == "due":
            got = sched.due()
            expected = sorted(k for k, t in due_at.items() if t <= clock.now)
            assert sorted(got) == expected
            for k in got:
                del due_at[k]
                running.add(k)
        elif op == "fail" and key in running:
            running.discard(key)
            fails[key] += 1
            delay = sched.failed(key, "e")
            if fails[key] > 3:
                assert delay is None
                given_up.add(key)
            else:
                assert delay == 2.0
                due_at[key] = clock.now + 2.0
        elif op == "ok" and key in running:
            running.discard(key)
            sched.succeeded(key)
        elif op == "tick":
            clock.advance(key * 0.75)
        assert set(sched.outstanding()) == set(due_at) | running
        assert set(sched.given_up) == given_up
