"""The next application after a killed driver (tests/cluster/test_crashes.py).

usage: successor.py OUT_DIR SERIES

Its attach runs the crash recovery; it waits for the checkpoint and table cleaners to finish,
runs tasks that use local state (the first such task in each host's executor sweeps the dead
application's folder there), restores the latest checkpoint of SERIES, and writes
``phase("result")``: app id, hosts its tasks ran on, the series' checkpoints as listed, and the
restored row count, sum(id) and sum(v).
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward
import spark_steward.local
import xhost
from spark_steward.checkpoint.service import CheckpointService
from spark_steward.tables.service import TableService


def use_local_state(_: int) -> dict[str, Any]:
    import time

    state = spark_steward.local.state("successor")
    state.put("value", b"successor")
    time.sleep(0.2)
    return xhost.here()


def main() -> None:
    out, name = sys.argv[1], sys.argv[2]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("xhost-successor").getOrCreate()
    sc = spark.sparkContext
    runtime = spark_steward.runtime(spark)
    checkpoints = runtime.service(CheckpointService).require_store()
    tables = runtime.service(TableService).store
    assert tables is not None
    idle = {"checkpoints": checkpoints.cleaner.wait_idle(60.0),
            "tables": tables.cleaner.wait_idle(60.0)}
    executors = int(sc.getConf().get("spark.cores.max", "3"))
    xhost.wait_for_executors(sc, executors)
    rows = sc.parallelize(range(4 * executors), 4 * executors).map(use_local_state).collect()
    series = spark_steward.checkpoints(name)
    listed = [[c.id, c.state] for c in series.ls()]
    restored = series.latest().agg(F.count("*").alias("n"), F.sum("id").alias("ids"),
                                   F.sum("v").alias("v")).first()
    xhost.phase("result", app_id=sc.applicationId, idle=idle,
                hosts=sorted({r["host"] for r in rows}), listed=listed,
                restored=restored.asDict())
    spark.stop()


if __name__ == "__main__":
    main()
