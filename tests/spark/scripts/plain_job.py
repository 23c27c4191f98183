"""An ordinary PySpark job: it knows nothing of spark-steward.

usage: plain_job.py OUT_FILE [--no-stop] [--sleep SECONDS] [--checkpoint-dir DIR]
                    [--left-over LOCAL_DIR] [--files WORK_DIR]

``--files``: also ships a file and an archive (made in WORK_DIR) with Spark's own
``sc.addFile`` / ``sc.addArchive`` and reads them in 4 tasks through ``SparkFiles``; each task's
(file path, file text, archived file text) joins OUT_FILE as ``files``.
``--checkpoint-dir``: also uses Spark's own reliable checkpoints there (the body of
spark_checkpoint_job.py; its values join OUT_FILE). ``--left-over``: once both executors are
registered, makes ``LOCAL_DIR/<application id>/left-over/f`` by hand (as a folder an earlier
run left behind), and after ``spark.stop()`` adds what that application folder still holds to
OUT_FILE as ``after_stop``.
"""

import json
import os
import sys
import time
import zipfile
from pathlib import Path

from pyspark import SparkFiles
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import LongType


@udf(LongType())
def plus_one(x):
    return x + 1


def read_files(_):
    vocab = SparkFiles.get("vocab.txt")
    table = os.path.join(SparkFiles.get("tables.zip"), "t", "a.csv")
    with open(vocab) as v, open(table) as t:
        return vocab, v.read(), t.read()


def ship_files(sc, work):
    with open(os.path.join(work, "vocab.txt"), "w") as f:
        f.write("hello\n")
    with zipfile.ZipFile(os.path.join(work, "tables.zip"), "w") as zf:
        zf.writestr("t/a.csv", "1,2\n")
    sc.addFile(os.path.join(work, "vocab.txt"))
    sc.addArchive(os.path.join(work, "tables.zip"))
    return sc.parallelize(range(4), 4).map(read_files).collect()


def option(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def listing(folder):
    if not folder.exists():
        return None
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def write(out, report):
    with open(out + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    out = sys.argv[1]
    spark = SparkSession.builder.appName("plain-job").getOrCreate()
    sc = spark.sparkContext
    left_over = option("--left-over")
    if left_over:
        deadline = time.monotonic() + 90
        while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # the driver and two executors
            assert time.monotonic() < deadline, "two executors never registered"
            time.sleep(0.2)
        folder = Path(left_over) / sc.applicationId
        (folder / "left-over").mkdir(parents=True)
        (folder / "left-over" / "f").write_text("x")
    total = sc.parallelize(range(100), 4).map(lambda x: x * x).sum()
    rows = spark.range(10).select(plus_one("id").alias("y")).collect()
    report = {"app_id": sc.applicationId, "pid": os.getpid(), "total": total,
              "udf": sorted(r.y for r in rows)}
    if option("--checkpoint-dir"):
        from spark_checkpoint_job import spark_checkpoints  # beside this script

        report.update(spark_checkpoints(spark, option("--checkpoint-dir")))
    if option("--files"):
        report["files"] = ship_files(sc, option("--files"))
    write(out, report)
    if "--sleep" in sys.argv:
        time.sleep(float(option("--sleep")))
    if "--no-stop" not in sys.argv:
        spark.stop()
        if left_over:
            write(out, dict(report, after_stop=listing(folder)))
