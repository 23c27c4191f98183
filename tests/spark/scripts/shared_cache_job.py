"""Caches the same plan over the same input files as ``shared=True`` and reports whether it was
computed here (the UDF's call count) and under which storage key.

    shared_cache_job.py OUT_JSON INPUT_DIR
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward


def main() -> None:
    out, source = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("shared-cache-job").getOrCreate()
    calls = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def score(x: int) -> int:
        calls.add(1)
        return (x * 7) % 1000

    df = (spark.read.parquet(source).withColumn("score", score("v"))
          .groupBy("g").agg(F.sum("score").alias("total")))
    t = spark_steward.cache(df, shared=True)
    rows = sorted((r.g, r.total) for r in t.collect())
    with open(out, "w") as f:
        json.dump({"rows": rows, "udf_calls": calls.value, "key": t.storage_key,
                   "app_id": spark.sparkContext.applicationId}, f)
    spark.stop()


if __name__ == "__main__":
    main()
