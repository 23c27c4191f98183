"""Spark-steward on a multi-host cluster without ``spark.steward.storage.dir``
(tests/cluster/test_capabilities.py).

usage: default_storage.py OUT_DIR

The embedded default storage dir is a directory in the driver host's temp dir. Caches a table
and counts it, saves a checkpoint and restores it, and reads a blob on every worker host;
``phase("result")`` says what each returned or raised (errors are reported, not raised).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward
import xhost


def main() -> None:
    out = sys.argv[1]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("xhost-default-storage").getOrCreate()
    sc = spark.sparkContext
    xhost.wait_for_executors(sc, 3)
    runtime = spark_steward.runtime(spark)
    result: dict[str, Any] = {"app_id": sc.applicationId, "storage": runtime.storage.url}
    try:
        table = spark_steward.cache(spark.range(0, 3000, numPartitions=6)
                                    .withColumn("v", F.col("id") * 2))
        result["table"] = {"count": table.count(), "sum": table.agg(F.sum("v")).first()[0],
                           "materialized": table.is_materialized}
    except Exception:
        result["table"] = {"error": traceback.format_exc()[-2000:]}
    series = spark_steward.checkpoints("default")
    try:
        number = series.save(spark.range(0, 3000, numPartitions=6))
        result["checkpoint"] = {"saved": number}
        result["checkpoint"]["restored"] = series.restore(number).count()
    except Exception as exc:
        result.setdefault("checkpoint", {})["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    try:
        ref = spark_steward.blobs.put(b"blob " * 1000)

        def read(_: int) -> int:
            with open(spark_steward.blobs.get(ref), "rb") as f:
                return len(f.read())

        result["blob"] = sc.parallelize(range(6), 6).map(read).collect()
    except Exception:
        result["blob"] = {"error": traceback.format_exc()[-2000:]}
    xhost.phase("result", **result)
    spark.stop()


if __name__ == "__main__":
    main()
