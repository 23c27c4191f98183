"""One application of bench/streams.py: a stateful streaming query (rate source, aggregation
over ``--keys`` keys, ``spark.sql.shuffle.partitions`` partitions, HDFS state store, noop sink)
run for ``--batches`` micro-batches on its checkpoint location, then stopped.

    spark-submit ... bench/streams_job.py OUT LOCATION --batches 150 [--recover-after N]
                                          [--faults DIR]

Writes OUT (JSON): per-batch trigger durations (ms), the time from ``start()`` to the first
completed batch, the last batch id, and the wall time. With ``--recover-after N`` the file
``DIR/fail-deletes`` (the share of deletes the test delegate fails) is removed once batch N
completed: the storage recovers while the query runs.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("location")
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--rows-per-second", type=int, default=20000)
    parser.add_argument("--recover-after", type=int)
    parser.add_argument("--faults")
    args = parser.parse_args()

    spark = SparkSession.builder.appName("bench-streams").getOrCreate()
    rate = spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second) \
        .option("numPartitions", 2).load()
    counts = rate.groupBy((rate.value % args.keys).alias("k")).count()
    started = time.monotonic()
    query = (counts.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", args.location).start())
    first_batch = None
    start_batch = None
    recovered = False
    while True:
        progress = query.lastProgress
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        if progress is not None:
            if start_batch is None:
                start_batch = progress["batchId"]
                first_batch = time.monotonic() - started
            if args.recover_after is not None and not recovered \
                    and progress["batchId"] >= args.recover_after:
                os.unlink(os.path.join(args.faults, "fail-deletes"))
                recovered = True
            if progress["batchId"] - start_batch + 1 >= args.batches:
                break
        time.sleep(0.05)
    wall = time.monotonic() - started
    durations = [p["durationMs"]["triggerExecution"] for p in query.recentProgress
                 if p["numInputRows"] > 0 or p["batchId"] > start_batch]
    last = query.lastProgress["batchId"]
    query.stop()
    with open(args.out + ".tmp", "w") as f:
        json.dump({"durations_ms": durations, "first_batch_s": first_batch, "wall_s": wall,
                   "first_batch_id": start_batch, "last_batch_id": last,
                   "app_id": spark.sparkContext.applicationId}, f)
    os.replace(args.out + ".tmp", args.out)
    spark.stop()


if __name__ == "__main__":
    main()
