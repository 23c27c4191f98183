"""Restores a checkpoint series another application saved, and reports what it read.

usage: restore_series.py OUT_FILE SERIES

Run with spark-submit and the steward conf of the storage dir the series lives in. Writes
``{"app_id", "ids", "latest": {count, sum, k, partitions}, "first": {count}}``.
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward

if __name__ == "__main__":
    out, name = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("restore-series").getOrCreate()
    series = spark_steward.checkpoints(name)
    completed = [c.id for c in series.ls() if c.state == "completed"]
    latest = series.latest()
    row = latest.agg(F.count("*").alias("n"), F.sum("id").alias("s"), F.sum("k").alias("k")) \
        .first()
    first = series.restore(completed[0])
    report = {"app_id": spark.sparkContext.applicationId, "ids": completed,
              "latest": {"count": row["n"], "sum": row["s"], "k": row["k"],
                         "partitions": latest.rdd.getNumPartitions()},
              "first": {"count": first.count()}}
    with open(out, "w") as f:
        json.dump(report, f)
    spark.stop()
