"""A driver that is SIGKILLed in the middle of a checkpoint save (tests/cluster/test_crashes.py).

usage: victim.py OUT_DIR

Leaves something of every capability first: a blob cached on every worker host (and its HA copy
in the storage dir), a local-state value on every worker host, a materialized private cached
table, and completed checkpoint 1 of series ``victim`` (retained=2). Then writes
``phase("ready")`` with its pid and its JVM's (the spark-submit JVM is this process's parent) and
starts checkpoint 2 with a slow UDF: the test SIGKILLs both as soon as a physical file of
checkpoint 2 exists. Nothing after that is ever reached.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward
import spark_steward.local
import xhost


def leave_traces(ref: Any) -> Any:
    def run(_: int) -> dict[str, Any]:
        with open(spark_steward.blobs.get(ref), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        spark_steward.local.state("victim").put("value", b"left by the victim " * 1000)
        time.sleep(0.2)
        return {**xhost.here(), "sha256": digest}

    return run


def main() -> None:
    out = sys.argv[1]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("xhost-victim").getOrCreate()
    sc = spark.sparkContext
    xhost.wait_for_executors(sc, 3)
    ref = spark_steward.blobs.put(os.urandom(2 << 20))
    rows = sc.parallelize(range(6), 6).map(leave_traces(ref)).collect()
    table = spark_steward.cache(spark.range(0, 3000, numPartitions=3)
                                .withColumn("v", F.col("id") * 2))
    table.count()
    series = spark_steward.checkpoints("victim", retained=2)
    first = series.save(spark.range(0, 1000, numPartitions=6).withColumn("v", F.col("id") * 5))

    @F.udf("long")
    def slow(x: int) -> int:
        import time as t

        t.sleep(0.05)
        return x

    xhost.phase("ready", app_id=sc.applicationId, pid=os.getpid(), jvm=os.getppid(),
                blob=ref.key.digest, scope=ref.scope, table=table.storage_key,
                checkpoint=first, rows=rows)
    series.save(spark.range(0, 1200, numPartitions=12).withColumn("w", slow("id")))
    xhost.phase("survived")
    time.sleep(600)


if __name__ == "__main__":
    main()
