"""A driver that dies by SIGKILL in the middle of a file-merged save, or one that attaches again
to finish what a killed one left.

usage: merged_crash.py OUT_FILE crash | attach

Run with spark-submit and the steward conf, in its own process group. ``crash`` completes
checkpoint 1 of series ``m`` and starts checkpoint 2 with slow tasks; as soon as a physical file
of checkpoint 2 exists it SIGKILLs its whole process group (driver JVM, this process, Python
workers). ``attach`` waits for the failover cleanup and restores the latest checkpoint.
OUT_FILE gets one JSON object a line: ``saved``, ``killing``, ``recovered``, ``restored``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from spark_steward.checkpoint.service import CheckpointService


def main() -> None:
    out_path, mode = sys.argv[1], sys.argv[2]
    out = open(out_path, "a", buffering=1)

    def log(**fields: object) -> None:
        out.write(json.dumps(fields) + "\n")

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_steward

    spark = SparkSession.builder.getOrCreate()
    runtime = spark_steward.runtime()
    series = spark_steward.checkpoints("m", retained=1)
    if mode == "attach":
        store = runtime.service(CheckpointService).require_store()
        idle = store.cleaner.wait_idle(60.0)
        log(event="recovered", idle=idle,
            outstanding=[k.describe() for k in store.cleaner.outstanding()])
        log(event="restored", count=series.latest().count())
        spark.stop()
        return

    first = series.save(spark.range(0, 400, numPartitions=4))
    log(event="saved", number=first)
    folder = Path(runtime.storage.path(f"checkpoints/merged/m/{first + 1:010d}"))

    def watch() -> None:
        while not (folder.exists() and any(folder.iterdir())):
            time.sleep(0.01)
        log(event="killing", files=sorted(p.name for p in folder.iterdir()))
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()

    @F.udf("long")
    def slow(x: int) -> int:
        time.sleep(0.01)
        return x

    series.save(spark.range(0, 2000, numPartitions=20).withColumn("w", slow("id")))
    log(event="done")


if __name__ == "__main__":
    main()
