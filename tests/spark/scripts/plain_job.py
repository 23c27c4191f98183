"""An ordinary PySpark job: it knows nothing of spark-steward.

usage: plain_job.py OUT_FILE [--no-stop] [--sleep SECONDS] [--checkpoint-dir DIR]
                    [--left-over LOCAL_DIR]

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
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import LongType


@udf(LongType())
def plus_one(x):
    return x + 1


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
    write(out, report)
    if "--sleep" in sys.argv:
        time.sleep(float(option("--sleep")))
    if "--no-stop" not in sys.argv:
        spark.stop()
        if left_over:
            write(out, dict(report, after_stop=listing(folder)))
