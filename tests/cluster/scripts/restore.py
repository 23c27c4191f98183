"""Restores a checkpoint series an earlier application saved (tests/cluster/test_capabilities.py).

usage: restore.py OUT_DIR SERIES

Waits for three executors, restores the latest completed checkpoint of SERIES and writes
``phase("result")``: the completed ids, and per reading host (a Python UDF over the restored
rows) the row count, sum(id), sum(sq) and the distinct ``i``.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward
import xhost


def main() -> None:
    out, name = sys.argv[1], sys.argv[2]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("xhost-restore").getOrCreate()
    sc = spark.sparkContext
    xhost.wait_for_executors(sc, 3)
    series = spark_steward.checkpoints(name)
    completed = [c.id for c in series.ls() if c.state == "completed"]
    latest = series.latest()

    @F.udf("string")
    def reader(_: int) -> str:
        import socket as s

        return s.gethostname()

    rows = (latest.withColumn("reader", reader("id")).groupBy("reader")
            .agg(F.count("*").alias("n"), F.sum("id").alias("ids"), F.sum("sq").alias("sq"),
                 F.collect_set("i").alias("i")).collect())
    result: dict[str, Any] = {"app_id": sc.applicationId, "driver_host": socket.gethostname(),
                              "completed": completed,
                              "partitions": latest.rdd.getNumPartitions(),
                              "by_reader": [r.asDict() for r in rows]}
    xhost.phase("result", **result)
    spark.stop()


if __name__ == "__main__":
    main()
