"""One fresh application of ``bench/fanout.py``, run by spark-submit on the harness's driver
host against its standalone master (``spark.cores.max=HOSTS``, ``spark.executor.cores=1``: one
executor on each of HOSTS worker hosts); writes its timings as JSON to OUT. Tasks are pickled
by value (this module is ``__main__``): nothing of bench/ is imported on executors.

    fanout_job.py VARIANT OUT --file PATH --hosts N

It waits (untimed) until N executors are registered and runs one untimed job of N tasks, which
must land on N distinct hosts. Then, timed: the set-up (``peer``/``server``:
``spark_steward.blobs.put(PATH)``; ``addfile``: ``sc.addFile(PATH)``; ``broadcast``: reading
PATH and ``sc.broadcast`` of its bytes) and one job of N tasks, each of which reads the whole
file (``blobs.get(ref)``, ``SparkFiles.get(name)``, ``len(bc.value)``) and returns its host
name and the bytes it read. The hosts must all differ and every byte count must be PATH's size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import time
from typing import Any, Callable

from pyspark import cloudpickle

import blobs as blobs_bench  # bench/blobs.py (this script's folder is on the driver's path)
from blobs import read_all  # the same read as every other shipping benchmark

# Executors cannot import bench/: its functions travel by value, like this script's.
cloudpickle.register_pickle_by_value(blobs_bench)

VARIANTS = ("peer", "server", "addfile", "broadcast")

Row = tuple[Any, ...]
"""What a task returns: its host, the bytes it read, its seconds (and, with peer fetch on, where
its pieces came from)."""


def timed(fn: Callable[[], int]) -> Row:
    start = time.perf_counter()
    n = fn()
    return socket.gethostname(), n, time.perf_counter() - start


def wait_executors(sc: Any, hosts: int, timeout: float = 300.0) -> list[str]:
    """Waits until ``hosts`` executors are registered; their hosts, each of which must differ."""
    deadline = time.monotonic() + timeout
    jsc = sc._jsc.sc()
    while jsc.getExecutorMemoryStatus().size() - 1 < hosts:  # minus the driver's block manager
        if time.monotonic() > deadline:
            raise SystemExit(f"FAIL: {jsc.getExecutorMemoryStatus().size() - 1} of {hosts} "
                             f"executors registered after {timeout:.0f}s")
        time.sleep(0.1)
    driver = sc.getConf().get("spark.driver.host")
    infos = [e for e in jsc.statusTracker().getExecutorInfos() if e.host() != driver]
    found = sorted(e.host() for e in infos)
    if len(found) != hosts or len(set(found)) != hosts:
        raise SystemExit(f"FAIL: wanted {hosts} executors on distinct hosts, got {found}")
    return found


def run_tasks(sc: Any, task: Callable[[int], Row], hosts: int, size: int | None
              ) -> tuple[float, list[Row]]:
    """One job of ``hosts`` tasks; its wall seconds and rows. One task per host, all bytes."""
    start = time.perf_counter()
    rows = sc.parallelize(range(hosts), hosts).map(task).collect()
    wall = time.perf_counter() - start
    names = [r[0] for r in rows]
    if len(set(names)) != hosts:
        raise SystemExit(f"FAIL: {hosts} tasks ran on hosts {sorted(names)}, not {hosts} distinct")
    if size is not None and any(r[1] != size for r in rows):
        raise SystemExit(f"FAIL: tasks read {[r[1] for r in rows]} bytes, expected {size}")
    return wall, rows


def ship(sc: Any, variant: str, path: str, hosts: int, settle: float) -> dict[str, Any]:
    import spark_steward

    size = os.path.getsize(path)
    # Untimed: the Python workers start (reused afterwards) and every executor takes a task.
    run_tasks(sc, lambda _: timed(lambda: 0), hosts, None)
    # Untimed too: the fresh JVMs' JIT compilers calm down. On a real cluster each host has
    # its own cores for that; here every host's compile competes for the same two.
    time.sleep(settle)
    os.sync()
    began = time.monotonic()  # system-wide: a CPU sampler outside the hosts can line up with it
    start = time.perf_counter()
    if variant in ("peer", "server"):
        ref = spark_steward.blobs.put(path)

        def task(_: int, ref: Any = ref) -> Row:
            from spark_steward.blob.executor import executor_blobs

            row = timed(lambda: read_all(spark_steward.blobs.get(ref)))
            stats = executor_blobs().last_swarm  # where the pieces came from, with peers on
            return (*row, dataclasses.asdict(stats) if stats is not None else None)
    elif variant == "addfile":
        sc.addFile(path)
        name = os.path.basename(path)

        def task(_: int, name: str = name) -> Row:
            from pyspark import SparkFiles

            return timed(lambda: read_all(SparkFiles.get(name)))
    else:
        with open(path, "rb") as f:
            bc = sc.broadcast(f.read())
        task = lambda _, bc=bc: timed(lambda: len(bc.value))  # type: ignore[misc] # noqa: E731
    setup = time.perf_counter() - start
    job, rows = run_tasks(sc, task, hosts, size)
    print(f"{variant} on {hosts} hosts: {setup + job:.3f}s (set-up {setup:.3f}s, job "
          f"{job:.3f}s); tasks {', '.join(f'{r[0]} {r[2]:.2f}s' for r in sorted(rows))}",
          file=sys.stderr, flush=True)
    return {"setup": setup, "job": job, "total": setup + job, "size": size,
            "window": [began, time.monotonic()],
            "tasks": [{"host": r[0], "bytes": r[1], "seconds": r[2],
                       **({"pieces": r[3]} if len(r) > 3 and r[3] else {})} for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("out")
    parser.add_argument("--file", required=True)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--settle", type=float, default=0.0)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = SparkSession.builder.appName(f"bench-fanout-{args.variant}-{args.hosts}").getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    context = time.perf_counter() - started
    started = time.perf_counter()
    executors = wait_executors(sc, args.hosts)
    waited = time.perf_counter() - started
    result = ship(sc, args.variant, args.file, args.hosts, args.settle)
    stop_start = time.perf_counter()
    spark.stop()
    body = {"variant": args.variant, "hosts": args.hosts, "context_start": context,
            "executors_wait": waited, "executor_hosts": executors,
            "stop": time.perf_counter() - stop_start, **result}
    with open(args.out + ".tmp", "w") as f:
        json.dump(body, f)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
