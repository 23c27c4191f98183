"""Shipping one large file to every task: spark-steward blobs vs ``sc.addFile`` vs ``sc.broadcast``.

One SparkSession on local-cluster[2,1,1024] (2 executors of 1 core on this host), one random file
of ``--size-mib`` MiB (256 by default). Every variant runs the same job,
``sc.parallelize(range(8), 8).map(task).collect()``, whose 8 tasks each read the whole file
through a reusable buffer:

* floor     tasks read the original path directly (page cache warm): what no shipping costs;
* steward   ``ref = spark_steward.blobs.put(path)`` (timed apart), tasks read
            ``spark_steward.blobs.get(ref)`` (same-host link of the driver's copy, crc32c check
            once per worker process);
* addFile   Spark's own ``sc.addFile`` (the original, not steward's transparent wrapper) and
            ``SparkFiles.get(name)`` in tasks;
* broadcast ``bc = sc.broadcast(data)``; tasks copy ``bc.value`` through the same buffer.

Each variant's "first job" is cold (a fresh blob with different bytes, a new file name, a new
broadcast: executors never saw it) and its "second job" is warm (the same object again). The
variants run interleaved (a balanced order per round, each after an untimed tiny job),
``--rounds`` times; medians are reported. Dirty pages are written back (``os.sync``, untimed)
before every timed job, so no variant pays for the writeback of another's files. After the
rounds, in the same process: the blob server's transfer rate (a BlobClient fetching from the
running driver's server into a file) against ``shutil.copyfile`` of the same file and against
raw SHA-256 over the same bytes in memory (every fetched byte is checked against its key, so
the hash bounds the rate), and the verification rate (``crc_of_file``) against raw ``crc32c`` over bytes already in memory; best
of 3 each, page cache warm.

    python bench/blobs.py [--size-mib 256] [--rounds 3] [--verbose]

A job here is ~0.4 s, nearly all of it Spark's own per-job and per-task cost, and identical
jobs differ by up to ±20% on the 2-core VM: the ratios near 1 need more rounds than the default
to settle (``--rounds 8`` takes about 4 minutes). ``--verbose`` prints, per job and worker
process, its first task's seconds and the part spent locating the object.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from steward_session import steward_session

TASKS = 8
BUF = 4 << 20  # the reusable read buffer of every task, all variants alike
VARIANTS = ("floor", "steward", "addFile", "broadcast")
# Order of the variants in each round: a balanced Latin square (Williams design), so over 4
# rounds every variant runs once in each position and follows every other variant once. (A
# plain rotation would always put the same variant after broadcast's 256 MiB destroy.)
ORDERS = ((0, 1, 3, 2), (1, 2, 0, 3), (2, 3, 1, 0), (3, 0, 2, 1))


# -- what tasks run (pickled by value: this module is __main__) ---------------------------------

def read_all(path: str) -> int:
    """Reads ``path`` whole through one reusable buffer; returns the bytes read."""
    buf = bytearray(BUF)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total


def copy_all(data: bytes) -> int:
    """The in-memory twin of :func:`read_all`: copies ``data`` through the same buffer."""
    buf = bytearray(BUF)
    view = memoryview(buf)
    src = memoryview(data)
    total = 0
    for off in range(0, len(src), BUF):
        n = min(BUF, len(src) - off)
        view[:n] = src[off:off + n]
        total += n
    return total


Row = tuple[int, int, float, float]
"""What a task returns: pid, bytes read, seconds in the task, of which locating the object
(``blobs.get``, ``SparkFiles.get``, ``bc.value``)."""


def floor_task(path: str) -> Callable[[int], Row]:
    def task(_: int) -> Row:
        start = time.perf_counter()
        n = read_all(path)
        return os.getpid(), n, time.perf_counter() - start, 0.0
    return task


def steward_task(ref: Any) -> Callable[[int], Row]:
    def task(_: int) -> Row:
        import spark_steward

        start = time.perf_counter()
        path = spark_steward.blobs.get(ref)
        located = time.perf_counter()
        n = read_all(path)
        return os.getpid(), n, time.perf_counter() - start, located - start
    return task


def addfile_task(name: str) -> Callable[[int], Row]:
    def task(_: int) -> Row:
        from pyspark import SparkFiles

        start = time.perf_counter()
        path = SparkFiles.get(name)
        located = time.perf_counter()
        n = read_all(path)
        return os.getpid(), n, time.perf_counter() - start, located - start
    return task


def broadcast_task(bc: Any) -> Callable[[int], Row]:
    def task(_: int) -> Row:
        start = time.perf_counter()
        value = bc.value
        located = time.perf_counter()
        n = copy_all(value)
        return os.getpid(), n, time.perf_counter() - start, located - start
    return task


# -- the driver ----------------------------------------------------------------------------------

class Job:
    """One timed job: driver wall time and what its tasks reported."""

    def __init__(self, wall: float, rows: list[Row], size: int) -> None:
        self.wall = wall
        self.rows = rows
        bad = [r for r in rows if r[1] != size]
        assert not bad, f"tasks read {[r[1] for r in bad]} bytes, expected {size}"

    def per_pid(self) -> str:
        """Per worker process: its first task (total/locate seconds), the median of the rest."""
        by: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for pid, _, secs, locate in self.rows:
            by[pid].append((secs, locate))
        parts = []
        for pid, s in sorted(by.items()):
            rest = (f", rest {statistics.median(t for t, _ in s[1:]):.3f}s" if len(s) > 1
                    else "")
            parts.append(f"pid {pid}: {len(s)} tasks, first {s[0][0]:.3f}s (locate "
                         f"{s[0][1]:.3f}s){rest}")
        return "; ".join(parts)


def run_job(sc: Any, task: Callable[[int], Row], size: int) -> Job:
    # Untimed: write back what earlier steps left dirty (prepared files, put's copies, the
    # executors' addFile copies). This VM throttles writers once ~0.5 GiB is dirty, and the
    # kernel flushes 30 s after the write: without this a variant pays for another's writes.
    os.sync()
    start = time.perf_counter()
    rows = sc.parallelize(range(TASKS), TASKS).map(task).collect()
    return Job(time.perf_counter() - start, rows, size)


def session(tmp: Path) -> Any:
    return steward_session(
        tmp, "bench-blobs",
        # The default, stated: one long-lived Python worker per executor runs every task, so
        # per-process state (steward's verified-copy cache, pyspark's loaded broadcasts) carries
        # over from the first job to the second, as in real use.
        **{"spark.python.worker.reuse": "true",
           # sc.broadcast of the file's bytes: the driver JVM holds the pieces in its heap.
           "spark.driver.memory": "4g"})


def write_random(path: Path, size: int) -> None:
    chunk = 16 << 20
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())


def variant_copy(src: Path, dest: Path, marker: bytes) -> None:
    """``dest`` = ``src`` with a few bytes rewritten, so its blob key is new; synced so its
    writeback does not land inside a timed job."""
    shutil.copyfile(src, dest)
    with open(dest, "r+b") as f:
        f.write(marker)
        f.flush()
        os.fsync(f.fileno())


def best_of(n: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="per-job task timings")
    args = parser.parse_args()
    size = args.size_mib << 20
    load_before = Path("/proc/loadavg").read_text().split()[:3]

    tmp = Path(tempfile.mkdtemp(prefix="bench-blobs-"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.pop("SPARK_CONF_DIR", None)
    spark = None
    executor_dirs: Path | None = None
    try:
        import crc32c

        import spark_steward
        from pyspark import SparkContext
        from spark_steward.blob.client import BlobClient
        from spark_steward.checksum import crc_of_file

        original = tmp / "data.bin"
        write_random(original, size)
        data = original.read_bytes()  # also leaves the file in the page cache for every variant

        spark = session(tmp)
        sc = spark.sparkContext
        runtime = spark_steward.runtime(spark)
        # local-cluster workers put executor dirs (with 2 copies of every addFile) in
        # $SPARK_HOME/work/<app id>, whatever SPARK_WORKER_DIR says (that variable is read only
        # by standalone worker daemons): removed at the end.
        from pyspark.find_spark_home import _find_spark_home

        executor_dirs = Path(_find_spark_home()) / "work" / sc.applicationId
        raw_add_file = getattr(SparkContext.addFile, "__wrapped__", None)
        assert raw_add_file is not None, "spark-steward's addFile wrapper is not installed"

        # Warm-up, untimed: Python workers forked, spark-steward's executor runtime and blob
        # cache built, every mechanism used once on a tiny object, and the floor file read.
        tiny = tmp / "warmup.bin"
        tiny.write_bytes(os.urandom(4096))
        raw_add_file(sc, str(tiny))
        tiny_bc = sc.broadcast(tiny.read_bytes())
        tiny_ref = spark_steward.blobs.put(tiny)
        for _ in range(2):
            for task in (floor_task(str(original)), steward_task(tiny_ref),
                         addfile_task(tiny.name), broadcast_task(tiny_bc)):
                sc.parallelize(range(TASKS), TASKS).map(task).collect()
        for _ in range(3):  # the JVM's task paths take a few jobs to get compiled
            run_job(sc, floor_task(str(original)), size)
        tiny_bc.destroy()

        first: dict[str, list[float]] = defaultdict(list)
        second: dict[str, list[float]] = defaultdict(list)
        prep: dict[str, list[float]] = defaultdict(list)
        last_ref = None
        for round_no in range(args.rounds):
            # Fresh objects for this round's cold jobs, prepared before any timing.
            if round_no == 0:
                steward_src = original
            else:
                steward_src = tmp / f"steward-r{round_no}.bin"
                variant_copy(original, steward_src, f"round {round_no} steward".encode())
            addfile_src = tmp / f"addfile-r{round_no}.bin"
            variant_copy(original, addfile_src, f"round {round_no} addFile".encode())
            order = [VARIANTS[i] for i in ORDERS[round_no % len(ORDERS)]]
            print(f"round {round_no + 1}/{args.rounds}: {', '.join(order)}", file=sys.stderr,
                  flush=True)
            for variant in order:
                # Untimed: a tiny job first, so every variant follows the same kind of job and
                # the previous variant's cleanup (a destroyed broadcast) is behind us.
                sc.parallelize(range(TASKS), TASKS).map(lambda x: x).collect()
                start = time.perf_counter()
                bc = None
                if variant == "floor":
                    task = floor_task(str(original))
                elif variant == "steward":
                    ref = spark_steward.blobs.put(steward_src)
                    last_ref = ref
                    task = steward_task(ref)
                elif variant == "addFile":
                    raw_add_file(sc, str(addfile_src))
                    task = addfile_task(addfile_src.name)
                else:
                    bc = sc.broadcast(data)
                    task = broadcast_task(bc)
                prep[variant].append(time.perf_counter() - start)
                cold = run_job(sc, task, size)
                warm = run_job(sc, task, size)
                first[variant].append(cold.wall)
                second[variant].append(warm.wall)
                print(f"  {variant:<9} prepare {prep[variant][-1]:6.3f}s  first {cold.wall:6.3f}s"
                      f"  second {warm.wall:6.3f}s", file=sys.stderr, flush=True)
                if args.verbose:
                    print(f"    first:  {cold.per_pid()}\n    second: {warm.per_pid()}",
                          file=sys.stderr, flush=True)
                if bc is not None:
                    bc.destroy()  # executors have 1 GiB: do not let rounds pile up broadcasts

        # Server transfer: a BlobClient against the running driver's server, into a file.
        assert last_ref is not None
        ctx = runtime.context
        port = ctx.server_port
        assert port is not None, "the blob server did not start"
        served = Path(spark_steward.blobs.get(last_ref))  # the server's own copy
        dest = tmp / "transfer.out"

        def fetch() -> None:
            with BlobClient(ctx.driver_host, port, ctx.auth_token) as client, \
                    open(dest, "wb") as out:
                got = client.fetch(last_ref.key, last_ref.scope, out).size
            assert got == size
            dest.unlink()

        def copy() -> None:
            shutil.copyfile(served, dest)
            dest.unlink()

        os.sync()
        fetch()  # warm: connection code paths, page cache of the served copy
        fetch_s = best_of(3, fetch)
        copy_s = best_of(3, copy)

        # Verification: crc_of_file (page cache warm) vs raw crc32c over bytes in memory.
        assert crc_of_file(original) == (crc32c.crc32c(data), size)
        file_crc_s = best_of(3, lambda: crc_of_file(original))
        raw_crc_s = best_of(3, lambda: crc32c.crc32c(data))
        # What a fetch must also do since issue 21: hash every byte with SHA-256.
        raw_sha_s = best_of(3, lambda: hashlib.sha256(data).digest())
    finally:
        if spark is not None:
            spark.stop()
        if executor_dirs is not None:
            shutil.rmtree(executor_dirs, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    med = {v: (statistics.median(first[v]), statistics.median(second[v]),
               statistics.median(prep[v])) for v in VARIANTS}
    floor_first, floor_second, _ = med["floor"]
    print(f"\nbench/blobs.py  ({args.size_mib} MiB file, {TASKS} tasks each reading it whole, "
          f"local-cluster[2,1,1024], {args.rounds} rounds interleaved; medians)")
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
    print(f"{'variant':<10} {'prepare s':>9} {'first s':>8} {'second s':>8} {'first/floor':>11} "
          f"{'second/floor':>12}")
    for v in VARIANTS:
        f, s, p = med[v]
        print(f"{v:<10} {p:>9.3f} {f:>8.3f} {s:>8.3f} {f / floor_first:>11.3f} "
              f"{s / floor_second:>12.3f}")
    print("prepare = put (steward), addFile call, sc.broadcast; not part of the job times")
    print("per round: seconds first/second job (ratio to the same round's floor)")
    for v in VARIANTS:
        cells = [f"{f:.3f}/{s:.3f} ({f / ff:.2f}/{s / fs:.2f})" for f, s, ff, fs
                 in zip(first[v], second[v], first["floor"], second["floor"])]
        print(f"  {v:<9} {'  '.join(cells)}  prepare {' '.join(f'{x:.3f}' for x in prep[v])}")
    mb = size / 1e6
    server, plain = mb / fetch_s, mb / copy_s
    file_crc, raw_crc = size / 1e9 / file_crc_s, size / 1e9 / raw_crc_s
    sha = mb / raw_sha_s
    print(f"server transfer {server:8.0f} MB/s   shutil.copyfile {plain:8.0f} MB/s   "
          f"ratio {server / plain:.3f}")
    print(f"server transfer {server:8.0f} MB/s   raw SHA-256     {sha:8.0f} MB/s   "
          f"ratio {server / sha:.3f}")
    print(f"crc_of_file     {file_crc:8.2f} GB/s   raw crc32c      {raw_crc:8.2f} GB/s   "
          f"ratio {file_crc / raw_crc:.3f}")
    sf, ss, _ = med["steward"]
    checks = [
        ("steward first job <= 1.3x floor", sf / floor_first <= 1.3,
         f"{sf / floor_first:.3f}"),
        ("steward first job faster than addFile and broadcast",
         sf < med["addFile"][0] and sf < med["broadcast"][0],
         f"{sf:.3f} vs {med['addFile'][0]:.3f} / {med['broadcast'][0]:.3f} s"),
        ("steward second job <= 1.1x floor", ss / floor_second <= 1.1,
         f"{ss / floor_second:.3f}"),
        # Issue 4 asked 70% of copyfile; since issue 21 every fetched byte is checked against
        # its SHA-256 key, which alone runs at ~0.45x copyfile here: the bound is the hash.
        ("server transfer >= 70% of raw SHA-256 (the verification bound)", server / sha >= 0.7,
         f"{server / sha:.3f} (of copyfile {server / plain:.3f})"),
        ("crc_of_file >= 80% of raw crc32c", file_crc / raw_crc >= 0.8,
         f"{file_crc / raw_crc:.3f}"),
    ]
    for label, ok, value in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
