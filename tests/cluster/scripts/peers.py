"""Peer fetch across hosts, with the serving host lost mid-transfer
(tests/cluster/test_peer_fetch.py).

usage: peers.py OUT_DIR SIZE_MIB SEED_HOST

1. ``blobs.put`` of SIZE_MIB random MiB (run with HA off: the driver is the origin).
2. Jobs of three slow tasks until one ran on SEED_HOST; tasks there fetch the blob, the others
   do nothing: SEED_HOST now holds a verified copy its executor JVM serves.
3. ``pause("fanout")``: the test shapes the links, so the transfer takes seconds.
4. ``phase("fetching")``, then a job of six tasks, each fetching the blob, returning its host,
   the SHA-256 of what it read and its process's last peer-fetch statistics. The test SIGKILLs
   SEED_HOST while the others fill from it; the job must still succeed everywhere else.

``pause("fetched")`` with the rows, so the test sees the hosts' caches before the application's
end removes them; ``phase("result")`` after the stop.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import sys
import time
from typing import Any, Callable

from pyspark.sql import SparkSession

import spark_steward
import xhost


def fetch_task(ref: Any, only_on: str | None) -> Callable[[int], dict[str, Any]]:
    def run(_: int) -> dict[str, Any]:
        from spark_steward.blob.executor import executor_blobs

        row = xhost.here()
        if only_on is not None and socket.gethostname() != only_on:
            time.sleep(1.0)  # keep this executor busy so the others get the other tasks
            return row
        blobs = executor_blobs()
        blobs.last_swarm = None
        with open(spark_steward.blobs.get(ref), "rb") as f:
            row["sha256"] = hashlib.sha256(f.read()).hexdigest()
        stats = blobs.last_swarm
        row["swarm"] = dataclasses.asdict(stats) if stats is not None else None
        if only_on is not None:
            time.sleep(1.0)
        return row
    return run


def main() -> None:
    out, size_mib, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("peer-fetch").getOrCreate()
    sc = spark.sparkContext
    xhost.wait_for_executors(sc, 3)
    data = os.urandom(size_mib << 20)
    ref = spark_steward.blobs.put(data)
    expected = hashlib.sha256(data).hexdigest()
    del data
    for _ in range(20):
        rows = sc.parallelize(range(3), 3).map(fetch_task(ref, seed)).collect()
        if any("sha256" in r for r in rows):
            break
    else:
        raise SystemExit(f"no task ran on {seed} in 20 jobs")
    xhost.pause("fanout", app_id=sc.applicationId, expected=expected)
    xhost.phase("fetching")
    rows = sc.parallelize(range(6), 6).map(fetch_task(ref, None)).collect()
    xhost.pause("fetched", rows=rows, expected=expected)
    spark.stop()
    xhost.phase("result")


if __name__ == "__main__":
    main()
