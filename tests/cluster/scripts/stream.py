"""A stateful streaming query over input files that appear one by one, run from the driver host
with its executors on the worker hosts (tests/cluster/test_streams.py). It knows nothing of
spark-steward beyond the conf the test passes.

usage: stream.py OUT_DIR LOCATION INPUT_DIR ROWS [--hold]

``phase("running")`` once the query started (pids, application, query id); then every 0.2 s
``progress.json`` with the input rows counted so far and which hosts ran tasks; once ROWS rows
are counted, ``phase("result")`` with the aggregate (``[[k, n, total], ...]``) and the keys
Spark's state data source reads from the location. With ``--hold`` it then waits for the test's
``stop.go`` before it stops the query and the application.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession, functions as F

import xhost


def main() -> None:
    out, location, inputs, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    xhost.init(out)
    spark = SparkSession.builder.appName("cluster-stream").getOrCreate()
    source = (spark.readStream.format("json").schema("k INT, v INT")
              .option("maxFilesPerTrigger", 1).load(inputs))
    agg = source.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    query = (agg.writeStream.format("memory").queryName("agg").outputMode("complete")
             .trigger(processingTime="100 milliseconds")
             .option("checkpointLocation", location).start())
    xhost.phase("running", app_id=spark.sparkContext.applicationId, pid=os.getpid(),
                jvm=os.getppid(), query_id=str(query.id))
    while True:
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        seen = spark.sql("select coalesce(sum(n), 0) from agg").collect()[0][0]
        progress = query.lastProgress
        xhost.phase("progress", seen=seen, batch=progress["batchId"] if progress else None)
        if seen >= rows:
            break
        time.sleep(0.2)
    result = [list(r) for r in spark.sql("select k, n, total from agg order by k").collect()]
    state = spark.read.format("statestore").load(location)
    state_keys = sorted(r[0] for r in state.selectExpr("key.k").collect())
    xhost.phase("result", rows=result, state_keys=state_keys, query_id=str(query.id),
                app_id=spark.sparkContext.applicationId)
    if "--hold" in sys.argv:
        xhost.pause("stop")
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
