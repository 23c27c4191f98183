"""A job that loses a whole worker host in its middle (tests/cluster/test_crashes.py).

usage: hostloss.py OUT_DIR

1. Every worker host caches a 4 MiB blob and builds a local-state value (``OUT_DIR/builds.log``).
2. ``phase("slow")``, then a job of 24 slow tasks (1 s each); every task attempt first creates
   ``OUT_DIR/started/<partition>-<attempt>-<host>``. The test SIGKILLs every process of one
   worker host while it runs; the job must still return every partition's square.
3. ``pause("restart")``: the test brings the host back (a new worker, the same disk) and names it
   in ``restart.go``.
4. Jobs until a task ran on that host again, reading the blob and the value there.
5. Run without ``spark.steward.storage.dir`` (the embedded default, a directory in the driver
   host's temp dir), as a user who skipped the limits would: a cached table counted, a
   checkpoint saved and restored; what each returned or raised is reported, not raised.

``phase("result")`` with everything.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession

import spark_steward
import spark_steward.local
import xhost


def cached_task(ref: Any, builds: str) -> Callable[[int], dict[str, Any]]:
    def run(_: int) -> dict[str, Any]:
        from spark_steward.blob.executor import executor_blobs

        stats = executor_blobs().cache.stats
        before = Counter(stats)
        with open(spark_steward.blobs.get(ref), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        delta = Counter(stats)
        delta.subtract(before)
        host = socket.gethostname()

        def build() -> bytes:
            with open(builds, "a") as log:
                log.write(f"{host} {os.getpid()}\n")
            return f"built-on:{host}".encode()

        value = spark_steward.local.state("hostloss").get_or_create("value", build)
        time.sleep(0.2)
        return {**xhost.here(), "sha256": digest, "delta": dict(+delta),
                "value": bytes(value).decode()}

    return run


def slow_task(started: str) -> Callable[[int], dict[str, Any]]:
    def run(x: int) -> dict[str, Any]:
        me = xhost.here()
        Path(started, f"{x}-{me['attempt']}-{me['host']}").touch()
        time.sleep(1.0)
        return {**me, "x": x, "square": x * x}

    return run


def main() -> None:
    out = sys.argv[1]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("xhost-hostloss").getOrCreate()
    sc = spark.sparkContext
    xhost.wait_for_executors(sc, 3)
    data = os.urandom(4 << 20)
    ref = spark_steward.blobs.put(data)
    builds = os.path.join(out, "builds.log")
    result: dict[str, Any] = {"app_id": sc.applicationId, "sha256": hashlib.sha256(data)
                              .hexdigest(),
                              "first": sc.parallelize(range(6), 6).map(cached_task(ref, builds))
                              .collect()}

    started = os.path.join(out, "started")
    os.makedirs(started, exist_ok=True)
    xhost.phase("slow", app_id=sc.applicationId)
    began = time.monotonic()
    result["slow"] = sc.parallelize(range(24), 24).map(slow_task(started)).collect()
    result["slow_seconds"] = time.monotonic() - began
    result["started"] = sorted(os.listdir(started))

    answer = xhost.pause("restart", **result)
    back = answer["host"]
    began = time.monotonic()
    rounds = []
    while True:
        rows = sc.parallelize(range(6), 6).map(cached_task(ref, builds)).collect()
        rounds.append(rows)
        if any(r["host"] == back for r in rows):
            break
        if time.monotonic() - began > 180:
            raise TimeoutError(f"no task ran on {back} within 180 s of its restart")
        time.sleep(0.5)
    result.update(back=back, rounds=rounds, back_seconds=time.monotonic() - began,
                  builds=Path(builds).read_text().splitlines())
    result["storage"] = xhost.table_and_checkpoint(spark, "default")
    xhost.phase("result", **result)
    spark.stop()


if __name__ == "__main__":
    main()
