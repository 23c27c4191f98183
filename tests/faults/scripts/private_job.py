"""Makes spark-steward write one of everything it keeps on disk, reports it, then waits for
``OUT_FILE.release`` so the test can look at the files while the application still runs.

usage: private_job.py OUT_FILE WORK_DIR

Written into the local dir: the driver's blob store and the executors' blob cache, a
``local.state`` value, ``SparkFiles.get`` copies, unpacked zip and
tar archives, and the executors' JVMs' table replicas with their manifest records; into the
storage dir: application records, blob HA copies, a file-merged checkpoint and a cached table.
"""

import io
import json
import os
import sys
import tarfile
import time
import zipfile

from pyspark import SparkFiles
from pyspark.sql import SparkSession

import spark_steward


def make_inputs(work):
    with open(os.path.join(work, "vocab.txt"), "w") as f:
        f.write("hello\n")
    with zipfile.ZipFile(os.path.join(work, "tables.zip"), "w") as zf:
        zf.writestr("t/a.csv", "1,2\n")
    with tarfile.open(os.path.join(work, "tools.tgz"), "w:gz") as tf:
        script = b"#!/bin/sh\necho run\n"
        member = tarfile.TarInfo("bin/run.sh")
        member.size, member.mode = len(script), 0o755
        tf.addfile(member, io.BytesIO(script))


def task(ref):
    def run(_):
        import spark_steward.local

        state = spark_steward.local.state("private")
        state.put("value", b"secret state " * 100)
        with open(spark_steward.blobs.get(ref), "rb") as f:
            size = len(f.read())
        return {"blob_size": size, "state": state.path("value"),
                "vocab": SparkFiles.get("vocab.txt"), "zip": SparkFiles.get("tables.zip"),
                "tgz": SparkFiles.get("tools.tgz")}
    return run


if __name__ == "__main__":
    out, work = sys.argv[1], sys.argv[2]
    make_inputs(work)
    spark = SparkSession.builder.appName("private-job").getOrCreate()
    sc = spark.sparkContext
    sc.addFile(os.path.join(work, "vocab.txt"))
    sc.addArchive(os.path.join(work, "tables.zip"))
    sc.addArchive(os.path.join(work, "tools.tgz"))
    ref = spark_steward.blobs.put(os.urandom(1 << 20))
    rows = sc.parallelize(range(2), 2).map(task(ref)).collect()
    saved = spark_steward.checkpoints("private").save(spark.range(0, 1000, numPartitions=2))
    spark.conf.set("spark.steward.cache.host-replicas", "true")  # off by default on file://
    table = spark_steward.cache(spark.range(0, 3000, numPartitions=2))
    total = table.selectExpr("sum(id)").collect()[0][0]
    with open(out + ".tmp", "w") as f:
        json.dump({"app_id": sc.applicationId, "rows": rows, "checkpoint": saved,
                   "total": total}, f)
    os.replace(out + ".tmp", out)
    deadline = time.monotonic() + 300
    while not os.path.exists(out + ".release") and time.monotonic() < deadline:
        time.sleep(0.2)
    spark.stop()
