"""Caches a DataFrame whose Python UDF is slow and uses it, so the driver can be SIGKILLed while
the table is being materialized. Writes its pid and application id to argv[1] first.

    cache_crash.py OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward


def main() -> None:
    out = sys.argv[1]
    spark = SparkSession.builder.appName("cache-crash").getOrCreate()

    @F.udf("long")
    def slow(x: int) -> int:
        time.sleep(0.05)
        return x

    with open(out + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "app_id": spark.sparkContext.applicationId}, f)
    os.replace(out + ".tmp", out)
    t = spark_steward.cache(spark.range(0, 20000, 1, 4).withColumn("v", slow("id")))
    t.count()  # killed in here
    spark.stop()


if __name__ == "__main__":
    main()
