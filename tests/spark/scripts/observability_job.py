"""Exercises every capability once so its numbers move: puts a blob and reads it in tasks,
caches a table and queries it twice, saves a checkpoint; reports, per task of a 12-task job,
which process and executor ran it and whether the spark-steward executor context and runtime
were there (with worker reuse off, each its own); logs one spark_steward INFO record of its
own; then waits ``--linger`` seconds (so Spark's metrics sinks report the live values) before
``spark.stop()``. Writes what it did as JSON to argv[1].

    observability_job.py OUT_JSON [--linger SECONDS]
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from pyspark.sql import SparkSession

import spark_steward
from spark_steward import blobs

BLOB = b"spark-steward observability " * 1000


def report(index, it):
    from spark_steward.kernel import executor

    ctx = executor.current_context()
    rt = executor.executor_runtime()
    yield {"partition": index, "pid": os.getpid(), "executor_dir": os.path.basename(os.getcwd()),
           "app_id": ctx.app_id if ctx else None, "runtime_pid": rt.pid}


def main() -> None:
    out = sys.argv[1]
    linger = float(sys.argv[sys.argv.index("--linger") + 1]) if "--linger" in sys.argv else 0.0
    spark = SparkSession.builder.appName("observability-job").getOrCreate()
    sc = spark.sparkContext
    ref = blobs.put(BLOB)
    sizes = sc.parallelize(range(4), 4).map(lambda _: len(blobs.read_bytes(ref))).collect()
    table = spark_steward.cache(spark.range(0, 1000).selectExpr("id", "id % 7 AS k"))
    counts = [table.count(), table.filter("k = 3").count()]
    number = spark_steward.checkpoints("observed").save(spark.range(0, 100))
    workers = sc.parallelize(range(12), 12).mapPartitionsWithIndex(report).collect()
    log = logging.getLogger("spark_steward.tests.observability")
    log.info("observability job ran")
    try:
        raise ValueError("a failure the job logs with its traceback")
    except ValueError:
        log.warning("logged with a traceback", exc_info=True)
    with open(out + ".tmp", "w") as f:
        json.dump({"app_id": sc.applicationId, "sizes": sizes, "counts": counts,
                   "checkpoint": number, "blob_bytes": len(BLOB), "workers": workers}, f)
    os.replace(out + ".tmp", out)
    time.sleep(linger)
    spark.stop()


if __name__ == "__main__":
    main()
