"""A stateful streaming query (rate source, aggregation); it knows nothing of spark-steward
beyond the conf the test passes.

usage: stream_job.py OUT_FILE LOCATION BATCHES [--sleep SECONDS]

Runs until the query passed BATCHES, writes {pid, jvm (the spark-submit JVM), app_id, query_id,
run_id, batch, counts} to OUT_FILE, then sleeps (to be killed) or stops the query and the application.
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession

if __name__ == "__main__":
    out, location, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spark = SparkSession.builder.appName("stream-job").getOrCreate()
    rate = spark.readStream.format("rate").option("rowsPerSecond", 200) \
        .option("numPartitions", 2).load()
    counts = rate.groupBy((rate.value % 8).alias("k")).count()
    query = (counts.writeStream.format("memory").queryName("counts").outputMode("complete")
             .trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", location).start())
    while query.lastProgress is None or query.lastProgress["batchId"] < batches:
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        time.sleep(0.2)
    total = spark.sql("select sum(`count`) from counts").collect()[0][0]
    with open(out + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "jvm": os.getppid(), "app_id": spark.sparkContext.applicationId,
                   "query_id": str(query.id), "run_id": str(query.runId),
                   "batch": query.lastProgress["batchId"], "total": total}, f)
    os.replace(out + ".tmp", out)
    if "--sleep" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
    query.stop()
    spark.stop()
