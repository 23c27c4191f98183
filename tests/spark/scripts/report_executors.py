"""Run by spark-submit: reports, per task, which process and executor ran it and whether the
spark-steward executor context and runtime were there."""

import json
import os
import sys

from pyspark.sql import SparkSession


def report(index, it):
    from spark_steward.kernel import executor

    ctx = executor.current_context()
    rt = executor.executor_runtime()
    yield {"partition": index, "pid": os.getpid(), "executor_dir": os.path.basename(os.getcwd()),
           "app_id": ctx.app_id if ctx else None, "runtime_pid": rt.pid}


if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    rows = sc.parallelize(range(12), 12).mapPartitionsWithIndex(report).collect()
    with open(sys.argv[1], "w") as f:
        json.dump({"app_id": sc.applicationId, "rows": rows}, f)
    spark.stop()
