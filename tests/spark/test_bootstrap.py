"""(d) The executor context reaches tasks on both executors; the runtime starts once per
Python worker process; task scopes close however a task ends.

With Python worker reuse off, a runtime in every worker: checked in test_observability's
application (test_worker_reuse_off_starts_a_runtime_in_every_worker there)."""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

import spark_steward


def _report(index: int, it: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
    from spark_steward.kernel import executor

    rt = executor.executor_runtime()
    ctx = executor.current_context()
    yield (index, os.getpid(), os.path.basename(os.getcwd()), ctx.app_id if ctx else None,
           id(rt), rt.created_at, rt.tasks_entered - rt.tasks_exited, str(rt.work_dir))


def test_context_reaches_both_executors_and_runtime_is_per_process(spark: Any,
                                                                    runtime: Any) -> None:
    sc = spark.sparkContext
    rows = sc.parallelize(range(16), 16).mapPartitionsWithIndex(_report).collect()
    assert sorted(r[0] for r in rows) == list(range(16))
    assert {r[3] for r in rows} == {runtime.app_id}
    # (ids: 0 and 1 unless an earlier test of this session had an executor replaced)
    assert len({r[2] for r in rows}) == 2, "both executors must run tasks"
    by_pid: dict[int, set[tuple[int, float]]] = {}
    for row in rows:
        by_pid.setdefault(row[1], set()).add((row[4], row[5]))
    # Worker reuse is on: one runtime per Python process, however many tasks it ran.
    assert all(len(runtimes) == 1 for runtimes in by_pid.values())
    assert len(by_pid) < 16
    # Inside a task exactly one task scope is open: every earlier one was closed.
    assert {r[6] for r in rows} == {1}
    assert {r[7] for r in rows} == {os.path.join(runtime.context.local_dir, runtime.app_id)}


def test_udf_tasks_get_the_context(spark: Any, runtime: Any) -> None:
    from pyspark.sql.functions import udf

    @udf("string")
    def app_of_task(_: int) -> str | None:
        from spark_steward.kernel import executor

        ctx = executor.current_context()
        return ctx.app_id if ctx else None

    df = spark.createDataFrame([(i,) for i in range(8)], ["x"]).repartition(4)
    values = {r[0] for r in df.select(app_of_task("x")).collect()}
    assert values == {runtime.app_id}


def test_context_carries_no_secret_in_local_properties(spark: Any, runtime: Any,
                                                       recorder: Any) -> None:
    spark.sparkContext.parallelize(range(2), 2).count()
    assert runtime.flush_events(30)
    from spark_steward.kernel.events import JobStart

    for event in recorder.snapshot():
        if isinstance(event, JobStart):
            assert runtime.context.auth_token not in repr(event.properties)
    assert runtime.context.auth_token not in repr(runtime.context)


def test_failed_tasks_close_their_scope(spark: Any) -> None:
    def fail(index: int, it: Iterator[Any]) -> Iterator[Any]:
        raise RuntimeError("task fails on purpose")

    sc = spark.sparkContext
    with pytest.raises(Exception, match="task fails on purpose"):
        sc.parallelize(range(8), 8).mapPartitionsWithIndex(fail).collect()
    rows = sc.parallelize(range(8), 8).mapPartitionsWithIndex(_report).collect()
    assert {r[6] for r in rows} == {1}


def test_explicit_bootstrap_starts_the_runtime(spark: Any, runtime: Any) -> None:
    df = spark.createDataFrame([(i,) for i in range(6)], ["x"])

    def created(it: Iterator[Any]) -> Iterator[tuple[str, bool]]:
        from spark_steward.kernel import executor

        ctx = executor.current_context()
        yield (ctx.app_id if ctx else "", executor._state.runtimes.get(ctx.app_id) is not None
               if ctx else False)

    rows = spark_steward.bootstrap(df).mapPartitions(created).collect()
    assert rows and all(app == runtime.app_id and started for app, started in rows)
