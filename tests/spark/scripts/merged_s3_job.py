"""Saves file-merged checkpoints into an s3:// storage dir (moto) from local-cluster executors.

usage: merged_s3_job.py OUT_JSON

Run with spark-submit, the steward conf and the S3 storage options. Saves three checkpoints of
series ``s3`` (40 partitions each, retained=1), restores each, and writes to OUT_JSON, per
save: its id, the physical files its entry lists, and the restored row count and id sum.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward
from spark_steward.checkpoint.service import CheckpointService


def main() -> None:
    spark = SparkSession.builder.getOrCreate()
    store = spark_steward.runtime().service(CheckpointService).require_store()
    series = spark_steward.checkpoints("s3", retained=1)
    saves = []
    for i in range(1, 4):
        df = spark.range(0, 4000 * i, numPartitions=40).withColumn("i", F.lit(i))
        number = series.save(df)
        back = series.restore(number)
        saves.append({"id": number, "physical": list(store.get_completed("s3", number).physical),
                      "rows": back.count(), "sum": back.agg(F.sum("id")).first()[0],
                      "partitions": back.rdd.getNumPartitions()})
    assert store.cleaner.wait_idle(60.0)
    with open(sys.argv[1], "w") as out:
        json.dump({"app_id": spark.sparkContext.applicationId, "saves": saves}, out)
    spark.stop()


if __name__ == "__main__":
    main()
