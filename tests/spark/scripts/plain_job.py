"""An ordinary PySpark job: it knows nothing of spark-steward.

usage: plain_job.py OUT_FILE [--no-stop] [--sleep SECONDS]
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import LongType


@udf(LongType())
def plus_one(x):
    return x + 1


if __name__ == "__main__":
    out = sys.argv[1]
    spark = SparkSession.builder.appName("plain-job").getOrCreate()
    sc = spark.sparkContext
    total = sc.parallelize(range(100), 4).map(lambda x: x * x).sum()
    rows = spark.range(10).select(plus_one("id").alias("y")).collect()
    with open(out, "w") as f:
        json.dump({"app_id": sc.applicationId, "pid": os.getpid(), "total": total,
                   "udf": sorted(r.y for r in rows)}, f)
    if "--sleep" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
    if "--no-stop" not in sys.argv:
        spark.stop()
