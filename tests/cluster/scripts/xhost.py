"""Shared by the cross-host capability and crash jobs (``capabilities.py``, ``restore.py``,
``victim.py``, ``successor.py``, ``hostloss.py``, ``nat.py``): the driver's hand-shake with the
test, what a task says about where it runs, and the table-and-checkpoint probe of a storage dir.

The driver and the test meet in a folder of the harness's shared dir (OUT_DIR, every job's first
argument): :func:`phase` writes ``OUT_DIR/<name>.json`` atomically; :func:`pause` does that and
then waits for the test to create ``OUT_DIR/<name>.go`` (after it looked at the hosts' private
/tmp, or killed something). Task functions here are shipped by value
(:func:`ship_by_value`): executors cannot import this folder.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

OUT_DIR = ""


def init(out_dir: str) -> None:
    global OUT_DIR
    OUT_DIR = out_dir
    os.makedirs(out_dir, exist_ok=True)


def ship_by_value() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def phase(name: str, **fields: Any) -> None:
    path = os.path.join(OUT_DIR, f"{name}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(fields, f)
    os.replace(path + ".tmp", path)


def pause(name: str, timeout: float = 600, **fields: Any) -> Any:
    """:func:`phase`, then waits for the test's ``<name>.go`` and returns its JSON content."""
    phase(name, **fields)
    go = os.path.join(OUT_DIR, f"{name}.go")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(go) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):  # not there yet, or half written
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never answered phase {name!r}")
        time.sleep(0.1)


def wait_for_executors(sc: Any, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while sc._jsc.sc().getExecutorMemoryStatus().size() < n + 1:  # + the driver
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sc._jsc.sc().getExecutorMemoryStatus().size() - 1} of "
                               f"{n} executors registered")
        time.sleep(0.2)


# -- inside tasks -------------------------------------------------------------------------------

def here() -> dict[str, Any]:
    """Host, Python worker pid and executor of the running task. A standalone executor runs in
    ``<work dir>/<app id>/<executor id>``, so the working dir names the executor."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "executor": os.path.basename(os.getcwd()),
            "partition": tc.partitionId() if tc else -1,
            "attempt": tc.attemptNumber() if tc else -1}


def transfers(delta: dict[str, int]) -> int:
    """Blob transfers in a blob cache counter delta (every way bytes reach a host)."""
    return sum(delta.get(k, 0) for k in ("ha", "server", "linked", "peers", "streamed"))


def table_and_checkpoint(spark: Any, series: str) -> dict[str, Any]:
    """A cached table counted and summed, and a checkpoint of ``series`` saved and restored,
    with whatever either raised: what a storage dir the hosts may not share gives back."""
    import traceback

    import spark_steward
    from pyspark.sql import functions as F

    out: dict[str, Any] = {}
    try:
        out["url"] = spark_steward.runtime(spark).storage.url
        table = spark_steward.cache(spark.range(0, 3000, numPartitions=6)
                                    .withColumn("v", F.col("id") * 2))
        out["table"] = {"count": table.count(), "sum": table.agg(F.sum("v")).first()[0]}
    except Exception:
        out["table"] = {"error": traceback.format_exc()[-2000:]}
    out["checkpoint"] = {}
    try:
        checkpoints = spark_steward.checkpoints(series)
        number = checkpoints.save(spark.range(0, 3000, numPartitions=6))
        out["checkpoint"]["saved"] = number
        out["checkpoint"]["restored"] = checkpoints.restore(number).count()
    except Exception as exc:
        out["checkpoint"]["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    return out
