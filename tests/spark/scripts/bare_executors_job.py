"""Run by spark-submit for tests/spark/test_bare_executors.py, with spark-steward on in the
driver and executors whose Python lacks it: plain PySpark code must run, tasks that call
spark-steward and driver calls that need it on executors must fail with one clear line.

    bare_executors_job.py OUT
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

import spark_steward

out = sys.argv[1]
spark = SparkSession.builder.appName("bare-executors").getOrCreate()
sc = spark.sparkContext
result = {"attached": spark_steward.is_enabled(spark)}
result["squares"] = sc.parallelize(range(100), 4).map(lambda x: x * x).sum()
plus_one = udf(lambda x: x + 1, "long")
result["udf"] = spark.range(10).select(plus_one("id").alias("v")).groupBy().sum("v").first()[0]
shared = sc.broadcast({"k": 7})
result["broadcast"] = sc.parallelize(range(4), 2).map(lambda x: shared.value["k"]).sum()
ref = spark_steward.blobs.put(b"payload")


def read_blob(_):
    return len(open(spark_steward.blobs.get(ref), "rb").read())


for name, call in [("task_calls_steward", lambda: sc.parallelize([1], 1).map(read_blob).collect()),
                   ("merged_save", lambda: spark_steward.checkpoints("bare").save(spark.range(10)))]:
    try:
        call()
        result[name] = None
    except Exception as exc:  # noqa: BLE001 - the test asserts on class and message
        result[name] = [type(exc).__name__, str(exc)]
with open(out, "w") as f:
    json.dump(result, f)
spark.stop()
