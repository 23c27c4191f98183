"""Event forwarding overhead and completeness, spark-steward off vs on, in one process run.

Jobs on local[2]: 2000 tiny Python tasks, and a JVM-only job of 20,000 tasks. Each mode gets its
own SparkContext (off: plain Spark; on: plugin + conf flags, as a user enables it); the modes
alternate ``--rounds`` times and each context runs every job ``--reps`` times after a warm-up.
Prints median seconds per mode, the on/off ratio, and events delivered vs expected (expected
from Spark's own status tracker).

    python bench/events.py [--rounds 8] [--jvm-reps 4] [--python-reps 1]
                           [--jvm-tasks 20000] [--python-tasks 2000]

Each context first runs both jobs once at full size (JIT warm-up, Python workers) and the
driver gets 4 GiB, so garbage collection of Spark's own task records does not dominate. Runs of
the same job differ by up to 20% here, hence many alternating rounds (the defaults take about
30 minutes); --python-reps 0 skips the slow Python job.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from spark_steward.kernel.events import JobEnd, JobStart, SparkEvent, TaskEnd, TaskStart
from spark_steward.kernel.runtime import RuntimeService
from spark_steward.kernel.services import register_service
from spark_steward.kernel.shim import jar_path


class JobEventCounter(RuntimeService):
    """Counts the events of each job as they reach Python."""

    name = "bench-job-event-counter"
    latest: "JobEventCounter | None" = None

    def __init__(self) -> None:
        self.stage_to_job: dict[int, int] = {}
        self.per_job: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.lock = threading.Lock()
        JobEventCounter.latest = self

    def start(self, runtime: Any) -> None:
        runtime.dispatcher.subscribe(self.on_event, self.name)

    def on_event(self, event: SparkEvent) -> None:
        with self.lock:
            if isinstance(event, JobStart):
                for stage in event.stage_ids:
                    self.stage_to_job[stage] = event.job_id
                self.per_job[event.job_id]["job_start"] += 1
            elif isinstance(event, JobEnd):
                self.per_job[event.job_id]["job_end"] += 1
            elif isinstance(event, (TaskStart, TaskEnd)):
                job = self.stage_to_job.get(event.stage_id, -1)
                self.per_job[job]["task_start" if isinstance(event, TaskStart) else "task_end"] += 1


def python_job(spark: Any, tasks: int) -> None:
    spark.sparkContext.parallelize(range(tasks), tasks).map(lambda x: x + 1).count()


def jvm_job(spark: Any, tasks: int) -> None:
    spark.range(0, tasks, 1, tasks).write.format("noop").mode("overwrite").save()


def session(enabled: bool, storage: Path) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(f"bench-events-{enabled}")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "4g")
               # One JVM serves every context of this process and spark.jars counts only at
               # its launch, so the jar is on the classpath in both modes; "off" configures no
               # plugin and never attaches, which is plain Spark.
               .config("spark.jars", str(jar_path())))
    if enabled:
        builder = (builder.config("spark.plugins", "io.sparksteward.shim.StewardPlugin")
                   .config("spark.steward.enabled", "true")
                   .config("spark.steward.storage.dir", storage.as_uri()))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def expected_events(spark: Any, job_ids: list[int]) -> dict[str, int]:
    tracker = spark.sparkContext.statusTracker()
    tasks = 0
    for job_id in job_ids:
        info = tracker.getJobInfo(job_id)
        for stage in info.stageIds:
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                tasks += stage_info.numTasks
    return {"job_start": len(job_ids), "job_end": len(job_ids), "task_start": tasks,
            "task_end": tasks}


def timed(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def run_mode(enabled: bool, args: argparse.Namespace, storage: Path,
             times: dict[tuple[str, bool], list[float]], completeness: list[str]) -> None:
    spark = session(enabled, storage)
    sc = spark.sparkContext
    try:
        if args.python_reps:
            python_job(spark, min(args.python_tasks, 500))  # warm-up: Python workers, JIT
        jvm_job(spark, args.jvm_tasks)
        for _ in range(args.python_reps):
            times[("python", enabled)].append(timed(python_job, spark, args.python_tasks))
        sc.setJobGroup("bench-jvm", "jvm-only job")
        for _ in range(args.jvm_reps):
            times[("jvm", enabled)].append(timed(jvm_job, spark, args.jvm_tasks))
        sc.setLocalProperty("spark.jobGroup.id", None)
        if enabled:
            import spark_steward

            runtime = spark_steward.runtime(spark)
            assert runtime.flush_events(120), "events did not drain within 120 s"
            counter = JobEventCounter.latest
            assert counter is not None
            jvm_jobs = [j for j in sc.statusTracker().getJobIdsForGroup("bench-jvm")]
            expected = expected_events(spark, jvm_jobs)
            with counter.lock:
                got = {k: sum(counter.per_job[j][k] for j in jvm_jobs) for k in expected}
            lost = sum(expected[k] - got[k] for k in expected)
            completeness.append(
                f"JVM-only jobs ({len(jvm_jobs)} x {args.jvm_tasks} tasks): delivered "
                f"{sum(got.values())} of {sum(expected.values())} events "
                f"({', '.join(f'{k} {got[k]}/{expected[k]}' for k in expected)}); "
                f"lost {lost}; shim dropped {runtime.dispatcher.dropped}, "
                f"sequence gaps {runtime.dispatcher.gaps}")
    finally:
        spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--jvm-reps", type=int, default=4)
    parser.add_argument("--python-reps", type=int, default=1)
    parser.add_argument("--jvm-tasks", type=int, default=20_000)
    parser.add_argument("--python-tasks", type=int, default=2_000)
    args = parser.parse_args()
    register_service(JobEventCounter.name, JobEventCounter)
    times: dict[tuple[str, bool], list[float]] = defaultdict(list)
    completeness: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        for round_no in range(args.rounds):
            for enabled in (False, True) if round_no % 2 == 0 else (True, False):
                print(f"round {round_no + 1}/{args.rounds}: spark-steward "
                      f"{'on' if enabled else 'off'} ...", file=sys.stderr, flush=True)
                run_mode(enabled, args, Path(tmp), times, completeness)
    print(f"\nbench/events.py  (local[2], {args.rounds} rounds alternating off/on; per context "
          f"{args.python_reps} Python and {args.jvm_reps} JVM reps after warm-up; medians)")
    print(f"{'job':<34} {'off s':>8} {'on s':>8} {'on/off':>7}")
    for job, label in (("python", f"{args.python_tasks} tiny Python tasks"),
                       ("jvm", f"JVM-only, {args.jvm_tasks} tasks")):
        if not times[(job, False)]:
            continue
        off = statistics.median(times[(job, False)])
        on = statistics.median(times[(job, True)])
        print(f"{label:<34} {off:>8.2f} {on:>8.2f} {on / off:>7.3f}")
    for line in completeness:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
