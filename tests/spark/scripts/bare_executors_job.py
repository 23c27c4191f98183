"""Run by spark-submit for tests/spark/test_bare_executors.py, with spark-steward on in the
driver and executors whose Python lacks it (I/O encryption on or off, as the flags say): plain
PySpark code must run, tasks that call spark-steward and driver calls that need it on executors
must fail with one clear line.

    bare_executors_job.py OUT

Every check is recorded as its value or as ``["error", class, message]``, so one broken
behaviour does not hide the others.
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf, udf

import spark_steward

out = sys.argv[1]
spark = SparkSession.builder.appName("bare-executors").getOrCreate()
sc = spark.sparkContext
result = {"attached": spark_steward.is_enabled(spark),
          "encryption": sc._encryption_enabled}


def record(name, call):
    try:
        result[name] = call()
    except Exception as exc:  # noqa: BLE001 - the test asserts on class and message
        result[name] = ["error", type(exc).__name__, str(exc)[:3000]]


def executor_python(_):
    """Whether this task's Python can import spark-steward (it must not) and pandas (it must)."""
    import importlib

    found = {}
    for name in ("spark_steward", "_spark_steward_autoload", "pandas", "pyarrow"):
        try:
            importlib.import_module(name)
            found[name] = True
        except ImportError:
            found[name] = False
    return found


def spark_broadcast_case():
    """The body of Spark's own test_broadcast_with_encryption / test_broadcast_no_encryption
    (python/pyspark/tests/test_broadcast.py, BroadcastTest._test_multiple_broadcasts and
    _test_encryption_helper; the pip pyspark does not ship its tests, so it is reproduced here
    on this application's context, whose flags set spark.io.encryption.enabled): broadcasts of
    several sizes read in tasks, the values equal, no failed task. Plus its
    _test_broadcast_on_driver: a broadcast's value read back on the driver."""
    sc.setJobGroup("spark-broadcast-test", "pyspark's test_broadcast body")
    try:
        for vs in ([5], [5, 10, 20]):
            bs = [sc.broadcast(value=v) for v in vs]
            exec_values = sc.parallelize(range(2)).map(lambda x: [b.value for b in bs]).collect()
            assert all(ev == vs for ev in exec_values), (exec_values, vs)
        status = sc.statusTracker()
        failed = sum(status.getStageInfo(sid).numFailedTasks
                     for jid in status.getJobIdsForGroup("spark-broadcast-test")
                     for sid in status.getJobInfo(jid).stageIds)
        return {"failed_tasks": failed, "driver_value": sc.broadcast(value=5).value}
    finally:
        sc.setJobGroup(None, None)


@pandas_udf("long")
def times_two(values: pd.Series) -> pd.Series:
    return values * 2


plus_one = udf(lambda x: x + 1, "long")
shared = sc.broadcast({"k": 7})
record("executor_python", lambda: sc.parallelize([0], 1).map(executor_python).first())
record("squares", lambda: sc.parallelize(range(100), 4).map(lambda x: x * x).sum())
record("udf", lambda: spark.range(10).select(plus_one("id").alias("v"))
       .groupBy().sum("v").first()[0])
record("pandas_udf", lambda: spark.range(10).select(times_two("id").alias("v"))
       .groupBy().sum("v").first()[0])
record("broadcast", lambda: sc.parallelize(range(4), 2).map(lambda x: shared.value["k"]).sum())
record("spark_broadcast_test", spark_broadcast_case)
ref = spark_steward.blobs.put(b"payload")


def read_blob(_):
    return len(open(spark_steward.blobs.get(ref), "rb").read())


record("task_calls_steward", lambda: sc.parallelize([1], 1).map(read_blob).collect())
record("merged_save", lambda: spark_steward.checkpoints("bare").save(spark.range(10)))
with open(out, "w") as f:
    json.dump(result, f)
spark.stop()
