"""spark/dispatch.py EventDispatcher: ordered fan-out, isolation of failures, loss accounting."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from spark_steward.kernel.dispatch import EventDispatcher
from spark_steward.kernel.events import (
    ApplicationEnd,
    EventBatch,
    ExecutorAdded,
    JobEnd,
    JobStart,
    SparkEvent,
)

LOGGER = "spark_steward.kernel.dispatch"


def _events(*seqs: int) -> tuple[SparkEvent, ...]:
    kinds = [lambda s: JobStart(s, s * 10, s, (s,), None, None, {}),
             lambda s: JobEnd(s, s * 10, s, True, None),
             lambda s: ExecutorAdded(s, s * 10, str(s), "h", 1)]
    return tuple(kinds[i % len(kinds)](s) for i, s in enumerate(seqs))


def _batch(*seqs: int, dropped: int = 0) -> EventBatch:
    return EventBatch(_events(*seqs), dropped, seqs[-1] if seqs else 0, False)


@pytest.fixture
def dispatcher() -> EventDispatcher:
    return EventDispatcher()


def test_every_subscriber_sees_every_event_in_order(dispatcher: EventDispatcher) -> None:
    seen: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for name in seen:
        dispatcher.subscribe(lambda e, n=name: seen[n].append(e.seq), name)
    dispatcher.dispatch(_batch(1, 2, 3))
    dispatcher.dispatch(_batch(4, 5))
    assert seen == {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 4, 5], "c": [1, 2, 3, 4, 5]}
    assert dispatcher.last_seq == 5 and dispatcher.delivered == 5 and dispatcher.gaps == 0


def test_subscribers_are_called_in_subscription_order_per_event(dispatcher: EventDispatcher
                                                                ) -> None:
    calls: list[tuple[str, int]] = []
    dispatcher.subscribe(lambda e: calls.append(("first", e.seq)), "first")
    dispatcher.subscribe(lambda e: calls.append(("second", e.seq)), "second")
    dispatcher.dispatch(_batch(1, 2))
    assert calls == [("first", 1), ("second", 1), ("first", 2), ("second", 2)]


def test_a_failing_subscriber_does_not_stop_the_others(dispatcher: EventDispatcher,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    seen: list[int] = []

    def broken(event: SparkEvent) -> None:
        raise RuntimeError(f"subscriber bug at {event.seq}")

    dispatcher.subscribe(broken, "broken-subscriber")
    dispatcher.subscribe(lambda e: seen.append(e.seq), "healthy")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        dispatcher.dispatch(_batch(1, 2))
    assert seen == [1, 2]
    failures = [r for r in caplog.records if "broken-subscriber" in r.getMessage()]
    assert len(failures) == 2
    assert "JobStart" in failures[0].getMessage() and "JobEnd" in failures[1].getMessage()
    assert failures[0].exc_info is not None
    assert "subscriber bug at 1" in caplog.text
    assert dispatcher.last_seq == 2 and dispatcher.delivered == 2


def test_default_name_is_the_handler_qualname(dispatcher: EventDispatcher,
                                              caplog: pytest.LogCaptureFixture) -> None:
    def my_named_handler(event: SparkEvent) -> None:
        raise ValueError("x")

    dispatcher.subscribe(my_named_handler)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        dispatcher.dispatch(_batch(1))
    assert "my_named_handler" in caplog.text


def test_unsubscribe(dispatcher: EventDispatcher) -> None:
    kept: list[int] = []
    removed: list[int] = []
    dispatcher.subscribe(lambda e: kept.append(e.seq), "kept")
    unsubscribe = dispatcher.subscribe(lambda e: removed.append(e.seq), "removed")
    dispatcher.dispatch(_batch(1))
    unsubscribe()
    unsubscribe()  # a second call is harmless
    dispatcher.dispatch(_batch(2))
    assert kept == [1, 2] and removed == [1]


def test_same_handler_twice_is_called_twice_and_removed_once(dispatcher: EventDispatcher) -> None:
    seen: list[int] = []

    def handler(event: SparkEvent) -> None:
        seen.append(event.seq)

    first = dispatcher.subscribe(handler, "h")
    dispatcher.subscribe(handler, "h")
    dispatcher.dispatch(_batch(1))
    first()
    dispatcher.dispatch(_batch(2))
    assert seen == [1, 1, 2]


def test_gap_between_batches_is_counted_and_logged(dispatcher: EventDispatcher,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    dispatcher.dispatch(_batch(1, 2))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        dispatcher.dispatch(_batch(5, 6))
    assert dispatcher.gaps == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["spark-steward lost 2 events between seq 2 and 5"]
    assert dispatcher.last_seq == 6 and dispatcher.delivered == 4


def test_gap_inside_a_batch_is_counted(dispatcher: EventDispatcher,
                                       caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        dispatcher.dispatch(_batch(1, 2, 4, 8))
    assert dispatcher.gaps == 1 + 3
    assert "between seq 2 and 4" in caplog.text and "between seq 4 and 8" in caplog.text


def test_contiguous_batches_log_nothing(dispatcher: EventDispatcher,
                                        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for start in range(1, 30, 3):
            dispatcher.dispatch(_batch(start, start + 1, start + 2))
        dispatcher.dispatch(_batch())
    assert caplog.records == []
    assert dispatcher.gaps == 0 and dispatcher.last_seq == 30 and dispatcher.delivered == 30


def test_dropped_increase_warns_once_per_increase(dispatcher: EventDispatcher,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        dispatcher.dispatch(_batch(1, dropped=0))
        assert warnings() == []
        dispatcher.dispatch(_batch(2, dropped=5))
        assert len(warnings()) == 1 and "5 events dropped" in warnings()[0]
        assert "spark.steward.events.buffer-capacity" in warnings()[0]
        dispatcher.dispatch(_batch(3, dropped=5))
        dispatcher.dispatch(_batch(dropped=5))
        assert len(warnings()) == 1
        dispatcher.dispatch(_batch(dropped=7))  # an empty batch still reports drops
        assert len(warnings()) == 2 and "7 events dropped" in warnings()[1]
    assert dispatcher.dropped == 7
    assert dispatcher.gaps == 0  # dropped events never got a seq: no gap


def test_counts_per_type(dispatcher: EventDispatcher) -> None:
    dispatcher.dispatch(_batch(1, 2, 3, 4))
    dispatcher.dispatch(EventBatch((ApplicationEnd(5, 0),), 0, 5, True))
    assert dispatcher.counts == {"JobStart": 2, "JobEnd": 1, "ExecutorAdded": 1,
                                 "ApplicationEnd": 1}


def test_wait_for_returns_true_once_reached(dispatcher: EventDispatcher) -> None:
    result: list[bool] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        result.append(dispatcher.wait_for(3, timeout=5.0))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert started.wait(5.0)
    dispatcher.dispatch(_batch(1, 2))
    time.sleep(0.02)
    assert result == []  # seq 2 is not enough
    dispatcher.dispatch(_batch(3))
    thread.join(5.0)
    assert not thread.is_alive() and result == [True]


def test_wait_for_already_reached_is_immediate(dispatcher: EventDispatcher) -> None:
    dispatcher.dispatch(_batch(1, 2, 3))
    began = time.monotonic()
    assert dispatcher.wait_for(2, timeout=5.0) is True
    assert dispatcher.wait_for(0, timeout=0.0) is True
    assert time.monotonic() - began < 1.0


def test_wait_for_times_out(dispatcher: EventDispatcher) -> None:
    dispatcher.dispatch(_batch(1))
    began = time.monotonic()
    assert dispatcher.wait_for(10, timeout=0.05) is False
    assert 0.04 <= time.monotonic() - began < 1.0


def test_waiter_sees_progress_only_after_handlers_ran(dispatcher: EventDispatcher) -> None:
    handled: list[int] = []
    observed: list[list[int]] = []

    def slow(event: SparkEvent) -> None:
        time.sleep(0.01)
        handled.append(event.seq)

    dispatcher.subscribe(slow, "slow")

    def waiter() -> None:
        if dispatcher.wait_for(3, timeout=5.0):
            observed.append(list(handled))

    thread = threading.Thread(target=waiter)
    thread.start()
    dispatcher.dispatch(_batch(1, 2, 3))
    thread.join(5.0)
    assert observed == [[1, 2, 3]]
