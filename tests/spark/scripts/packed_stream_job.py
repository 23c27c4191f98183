"""A stateful streaming query over a fixed set of input files, one file per batch, so its
result is known exactly; it knows nothing of spark-steward beyond the conf the test passes.

usage: packed_stream_job.py OUT_FILE LOCATION INPUT_DIR ROWS [--sleep SECONDS]

Runs until the query has counted ROWS input rows, writes {pid, jvm (the spark-submit JVM), app_id, query_id, batch, rows:
[[k, n, total], ...], state_keys} to OUT_FILE (state_keys: the keys Spark's state data source
reads from the location), then sleeps (to be killed) or stops the query and the
application.
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession, functions as F

if __name__ == "__main__":
    out, location, inputs, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    spark = SparkSession.builder.appName("packed-stream-job").getOrCreate()
    source = (spark.readStream.format("json").schema("k INT, v INT")
              .option("maxFilesPerTrigger", 1).load(inputs))
    agg = source.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    query = (agg.writeStream.format("memory").queryName("agg").outputMode("complete")
             .trigger(processingTime="100 milliseconds")
             .option("checkpointLocation", location).start())
    # One read decides and is reported: the query runs on, and a second read could already
    # hold a later batch (one file, 40 rows, more than the test asked for).
    while True:
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        result = [list(r) for r in spark.sql("select k, n, total from agg order by k").collect()]
        if sum(n for _, n, _ in result) >= rows:
            break
        time.sleep(0.2)
    # Spark's state data source reads the state store files through the same file manager.
    state = spark.read.format("statestore").load(location)
    state_keys = sorted(r[0] for r in state.selectExpr("key.k").collect())
    with open(out + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "jvm": os.getppid(), "app_id": spark.sparkContext.applicationId,
                   "query_id": str(query.id), "batch": query.lastProgress["batchId"],
                   "rows": result, "state_keys": state_keys}, f)
    os.replace(out + ".tmp", out)
    if "--sleep" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
    query.stop()
    spark.stop()
