"""Spark job for tests/cluster/test_app_end_cleanup.py: host-local state on every worker host,
paused at each phase so the test can look at (and do things to) the hosts.

Usage: spark-submit app_end.py CONTROL_DIR MODE [VICTIM_HOSTNAME]

At each phase the job writes ``CONTROL_DIR/<phase>.json`` and waits for
``CONTROL_DIR/<phase>.go``. Phases: ``ready`` (values stored on every worker host), then by
MODE: ``kill`` stops the VICTIM host's executor (``killExecutor``, an orderly stop), pauses at
``killed``, asks for a new executor (standalone starts it on the victim host, the only one with
a free core) and reads every value back on every host; ``plain`` goes straight on. Then
``spark.stop()`` and ``stopped`` (paused right after it returned).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from pyspark.sql import SparkSession

def put(index: int, _: Iterator[int]) -> Iterator[dict[str, Any]]:
    import socket
    import time

    import spark_steward.local

    time.sleep(0.3)  # keep each executor busy long enough for the others to take tasks
    spark_steward.local.state("app-end").put(f"p{index}", b"value-%d" % index)
    yield {"host": socket.gethostname(), "executor": os.path.basename(os.getcwd())}


def read(_: int, __: Iterator[int]) -> Iterator[dict[str, Any]]:
    import socket
    import time

    import spark_steward.local

    time.sleep(0.3)
    store = spark_steward.local.state("app-end")
    keys = sorted(store.ls())
    assert all(store.get(k) == b"value-%s" % k[1:].encode() for k in keys)  # verified reads
    yield {"host": socket.gethostname(), "executor": os.path.basename(os.getcwd()),
           "keys": keys}


def executors(sc: Any) -> int:
    return int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1  # less the driver


def wait_for(predicate: Any, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            print(f"{what}: not within {timeout}s", file=sys.stderr)
            sys.exit(2)
        time.sleep(0.2)


class Control:
    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def phase(self, name: str, **facts: Any) -> None:
        tmp = self.folder / f".{name}.json"
        tmp.write_text(json.dumps(facts))
        tmp.rename(self.folder / f"{name}.json")
        wait_for((self.folder / f"{name}.go").exists, f"go for {name}", timeout=600)


def on_every_host(sc: Any, fn: Any, hosts: int = 3) -> list[dict[str, Any]]:
    """Runs ``fn`` until its tasks ran on ``hosts`` hosts (tasks spread by chance)."""
    rows: list[dict[str, Any]] = []
    for _ in range(10):
        n = 4 * hosts
        rows = sc.parallelize(range(n), n).mapPartitionsWithIndex(fn).collect()
        if len({r["host"] for r in rows}) == hosts:
            return rows
    print(f"tasks never reached {hosts} hosts: {rows}", file=sys.stderr)
    sys.exit(3)


def main() -> None:
    control, mode = Control(sys.argv[1]), sys.argv[2]
    victim = sys.argv[3] if len(sys.argv) > 3 else None
    spark = SparkSession.builder.appName(f"app-end-{mode}").getOrCreate()
    sc = spark.sparkContext
    wait_for(lambda: executors(sc) == 3, "three executors")
    import spark_steward

    local_dir = spark_steward.runtime(spark).context.local_dir
    facts: dict[str, Any] = {"app_id": sc.applicationId, "local_dir": local_dir}
    rows = on_every_host(sc, put)
    facts["executors"] = {r["host"]: r["executor"] for r in rows}
    control.phase("ready", **facts)
    if mode == "kill":
        victim_executor = facts["executors"][victim]
        facts["kill_acknowledged"] = bool(sc._jsc.sc().killExecutor(victim_executor))
        wait_for(lambda: executors(sc) == 2, "the victim's executor gone")
        control.phase("killed", **facts)
        for attempt in range(6):  # the scheduler's target may need more than one raise
            sc._jsc.sc().requestExecutors(1)
            deadline = time.monotonic() + 20
            while executors(sc) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            if executors(sc) == 3:
                break
        facts["requests"] = attempt + 1
        wait_for(lambda: executors(sc) == 3, "a new executor", timeout=1)
        rows = on_every_host(sc, read)
        facts["read"] = rows
        facts["executors_after"] = {r["host"]: r["executor"] for r in rows}
    started = time.monotonic()
    spark.stop()
    facts["stop_seconds"] = time.monotonic() - started
    control.phase("stopped", **facts)


if __name__ == "__main__":
    main()
