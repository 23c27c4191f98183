"""(a) Events of real jobs reach Python, in order, with the right fields."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spark_steward.kernel.events import ExecutorAdded, JobEnd, JobStart, TaskEnd, TaskStart


def _job_events(events: list[Any], group: str) -> tuple[JobStart, list[Any]]:
    start = next(e for e in events if isinstance(e, JobStart) and e.job_group == group)
    stages = set(start.stage_ids)
    related = [e for e in events
               if (isinstance(e, (TaskStart, TaskEnd)) and e.stage_id in stages)
               or (isinstance(e, JobEnd) and e.job_id == start.job_id)]
    return start, related


def test_executors_of_the_cluster_are_announced(recorder: Any) -> None:
    events = recorder.wait_until(
        lambda ev: len({e.executor_id for e in ev if isinstance(e, ExecutorAdded)}) >= 2)
    added = [e for e in events if isinstance(e, ExecutorAdded)]
    assert {e.executor_id for e in added} >= {"0", "1"}
    assert all(e.cores == 1 and e.host for e in added)


def test_job_events_arrive_in_order_with_fields(spark: Any, runtime: Any, recorder: Any) -> None:
    sc = spark.sparkContext
    sc.setJobGroup("events-order", "ordered events")
    sc.setLocalProperty("spark.steward.scope", "scope-42")
    try:
        assert sc.parallelize(range(30), 3).map(lambda x: x * 2).sum() == 870
    finally:
        sc.setLocalProperty("spark.steward.scope", None)
    assert runtime.flush_events(30)
    events = recorder.snapshot()
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    start, related = _job_events(events, "events-order")
    assert start.properties.get("spark.steward.scope") == "scope-42"
    assert len(start.stage_ids) == 1
    starts = [e for e in related if isinstance(e, TaskStart)]
    ends = [e for e in related if isinstance(e, TaskEnd)]
    assert sorted(e.partition for e in starts) == [0, 1, 2]
    assert sorted(e.partition for e in ends) == [0, 1, 2]
    assert all(e.reason == "success" and e.message is None for e in ends)
    # the cluster's executors now (an earlier test may have replaced one)
    executors = set(str(sc._jsc.sc().getExecutorIds().mkString(",")).split(","))
    assert {e.executor_id for e in ends} <= executors and len(executors) == 2
    by_task = {e.task_id: e for e in starts}
    for end in ends:
        assert by_task[end.task_id].seq < end.seq
        assert by_task[end.task_id].seq > start.seq
    job_end = next(e for e in related if isinstance(e, JobEnd))
    assert job_end.succeeded and job_end.seq > max(e.seq for e in ends)


def test_failed_task_attempt_is_reported_with_its_message(spark: Any, runtime: Any,
                                                         recorder: Any) -> None:
    def fail_first_attempt(index: int, it: Any) -> Any:
        from pyspark import TaskContext

        if index == 1 and TaskContext.get().attemptNumber() == 0:
            raise ValueError("boom on first attempt of partition 1")
        return it

    sc = spark.sparkContext
    sc.setJobGroup("events-retry", "one failed attempt")
    assert sc.parallelize(range(4), 2).mapPartitionsWithIndex(fail_first_attempt).count() == 4
    assert runtime.flush_events(30)
    _, related = _job_events(recorder.snapshot(), "events-retry")
    ends = [e for e in related if isinstance(e, TaskEnd) and e.partition == 1]
    assert [(e.attempt, e.reason) for e in ends] == [(0, "failed"), (1, "success")]
    assert "boom on first attempt of partition 1" in ends[0].message
    assert next(e for e in related if isinstance(e, JobEnd)).succeeded


def test_failed_job_ends_failed(spark: Any, runtime: Any, recorder: Any) -> None:
    def always_fail(it: Any) -> Any:
        raise RuntimeError("this job cannot succeed")

    sc = spark.sparkContext
    sc.setJobGroup("events-fail", "always fails")
    with pytest.raises(Exception, match="this job cannot succeed"):
        sc.parallelize(range(2), 1).mapPartitions(always_fail).count()
    assert runtime.flush_events(30)
    _, related = _job_events(recorder.snapshot(), "events-fail")
    job_end = next(e for e in related if isinstance(e, JobEnd))
    assert not job_end.succeeded and "this job cannot succeed" in (job_end.message or "")
    assert all(e.reason == "failed" for e in related if isinstance(e, TaskEnd))


def test_cancelled_job_group_ends_with_killed_tasks(spark: Any, runtime: Any,
                                                     recorder: Any) -> None:
    sc = spark.sparkContext
    errors: list[BaseException] = []

    def slow(it: Any) -> Any:
        time.sleep(120)
        return it

    def run() -> None:
        sc.setJobGroup("events-cancel", "to be cancelled", interruptOnCancel=True)
        try:
            sc.parallelize(range(2), 2).mapPartitions(slow).count()
        except BaseException as exc:  # the cancellation surfaces here
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    recorder.wait_until(lambda ev: any(
        isinstance(e, TaskStart) and e.stage_id in _stages(ev, "events-cancel") for e in ev))
    sc.cancelJobGroup("events-cancel")
    thread.join(60)
    assert errors, "the cancelled job should have raised"
    events = recorder.wait_until(lambda ev: any(
        isinstance(e, JobEnd) and e.job_id == _job_id(ev, "events-cancel") for e in ev))
    _, related = _job_events(events, "events-cancel")
    job_end = next(e for e in related if isinstance(e, JobEnd))
    assert not job_end.succeeded and "cancel" in (job_end.message or "").lower()
    killed = recorder.wait_until(lambda ev: any(
        isinstance(e, TaskEnd) and e.reason == "killed"
        and e.stage_id in _stages(ev, "events-cancel") for e in ev))
    assert any(e.message for e in killed if isinstance(e, TaskEnd) and e.reason == "killed")


def _stages(events: list[Any], group: str) -> set[int]:
    return {s for e in events if isinstance(e, JobStart) and e.job_group == group
            for s in e.stage_ids}


def _job_id(events: list[Any], group: str) -> int:
    return next(e.job_id for e in events if isinstance(e, JobStart) and e.job_group == group)


def test_no_event_was_lost(runtime: Any) -> None:
    assert runtime.flush_events(30)
    assert runtime.dispatcher.dropped == 0 and runtime.dispatcher.gaps == 0
    assert runtime.bridge.from_plugin
