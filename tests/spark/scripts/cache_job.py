"""A PySpark job that knows nothing of spark-steward: df.cache() on a join + Python UDF +
aggregation, then several actions. Writes what it computed (and how often its UDF ran) as JSON
to argv[1]; with ``--sleep N`` it then waits N seconds (to be killed).

    cache_job.py OUT_JSON INPUT_DIR [--sleep N]
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    out, source = sys.argv[1], sys.argv[2]
    sleep = float(sys.argv[sys.argv.index("--sleep") + 1]) if "--sleep" in sys.argv else 0.0
    spark = SparkSession.builder.appName("cache-job").getOrCreate()
    calls = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def score(x: int) -> int:
        calls.add(1)
        return (x * 7) % 1000

    facts = spark.read.parquet(source)
    dims = spark.range(0, 100).withColumnRenamed("id", "d")
    df = (facts.join(dims, facts.g == dims.d).withColumn("score", score("v"))
          .groupBy("g").agg(F.sum("score").alias("total"), F.max("score").alias("top")))
    df.cache()
    result = {
        "rows": df.count(),
        "total": df.agg(F.sum("total")).first()[0],
        "top": sorted(r.top for r in df.collect()),
        "high": df.filter("total > 1000").count(),
    }
    result.update(udf_calls=calls.value, pid=os.getpid(),
                  app_id=spark.sparkContext.applicationId)
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)
    if sleep:
        time.sleep(sleep)
    spark.stop()


if __name__ == "__main__":
    main()
