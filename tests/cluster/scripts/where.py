"""Spark job for the harness tests: where do the driver and the tasks run?

Usage: spark-submit where.py EXECUTORS. Waits until EXECUTORS executors are registered (so
tasks can spread), runs a few tasks per executor and prints one line ``RESULT <json>`` with the
driver's and every task's host name, pid namespace, /tmp inode and IPv4 addresses.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Iterable, Iterator

from pyspark.sql import SparkSession


def facts() -> dict[str, Any]:
    import os
    import socket

    return {"hostname": socket.gethostname(), "pidns": os.stat("/proc/self/ns/pid").st_ino,
            "tmp": os.stat("/tmp").st_ino,
            "resolved": socket.gethostbyname(socket.gethostname())}


def probe(_: Iterable[int]) -> Iterator[dict[str, Any]]:
    import time

    time.sleep(0.3)  # keep each executor busy long enough for the others to take tasks
    yield facts()


def main() -> None:
    executors = int(sys.argv[1])
    spark = SparkSession.builder.appName("harness-where").getOrCreate()
    sc = spark.sparkContext
    deadline = time.monotonic() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() < executors + 1:  # + the driver
        if time.monotonic() > deadline:
            print(f"only {sc._jsc.sc().getExecutorMemoryStatus().size() - 1} executors",
                  file=sys.stderr)
            sys.exit(2)
        time.sleep(0.2)
    n = executors * 4
    tasks = sc.parallelize(range(n), n).mapPartitions(probe).collect()
    print("RESULT " + json.dumps({"driver": facts(), "tasks": tasks,
                                  "driver_host": sc.getConf().get("spark.driver.host"),
                                  "marker": sc.getConf().get("spark.harness.marker", "")}))
    spark.stop()


if __name__ == "__main__":
    main()
