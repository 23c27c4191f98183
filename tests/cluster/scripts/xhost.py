"""Shared by the cross-host capability and crash jobs (``capabilities.py``, ``restore.py``,
``victim.py``, ``successor.py``): the driver's hand-shake with the test, and what a task says
about where it runs.

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
    return sum(delta.get(k, 0) for k in ("ha", "server", "linked", "streamed"))
