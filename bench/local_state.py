"""The first job after an executor restart: spark-steward's recovered blob cache vs a fresh
transfer vs ``sc.addFile`` vs reading the original path (floor).

One SparkSession on local-cluster[2,1,1024] (2 executors of 1 core on this host), one random file
of ``--size-mib`` MiB (256 by default), read whole by each of 8 tasks. The blob cache's
same-host link and HA copies are off, so a blob that is not on the host comes over the driver's
blob server (what a fresh transfer costs on any other host). Each variant is warmed by one job
(every executor has what it needs), then one executor JVM is SIGKILLed, the standalone worker
starts a replacement, and the first job afterwards is timed:

* floor     tasks read the original path (page cache warm): what no shipping costs;
* recovery  ``spark_steward.blobs.get(ref)``: the replacement adopts the host-local copy after a
            crc32c check at its first use (no transfer);
* fresh     the same, but the host-local copy was removed while the executor was down: one
            transfer from the driver's blob server, then the host's other tasks share it;
* addFile   Spark's own ``sc.addFile`` + ``SparkFiles.get``, whose per-application fetch cache
            in ``spark.local.dir`` also outlives the executor.

After the replacement registers, an untimed no-op job starts its Python workers (and fetches
Spark's own dependencies), which every variant pays alike; the timed job is the first that reads.
addFile runs in a second session (a new application) against its own floor, because every new
executor fetches every file added to its application before its first task. The variants run
interleaved, ``--rounds`` times (a kill and a replacement each); medians are reported. Then, in the same process: verification speed (a first-use ``WorkingDir.lookup`` of the
cached 256 MiB copy, cold in this process, page cache warm) against raw ``crc32c`` over the same
bytes in memory, best of 3; and the crash sweep of ``tests/unit/crash_fs.py`` (a power cut at
every step of a put, then recovery) counting torn or stale values served.

On loopback a fresh transfer costs less than the job's own reads, so it cannot show what
recovery saves across hosts. ``--link-mbit N`` runs floor, recovery and fresh once more in the
same session with the driver's blob server behind an emulated N Mbit/s link: an ``htb`` class
on ``lo`` for the server's port only (needs root with CAP_NET_ADMIN and the kernel's htb and
u32; the qdisc is removed afterwards). Spark's own RPC stays unshaped.

    python bench/local_state.py [--size-mib 256] [--rounds 3] [--link-mbit 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import blobs
from blobs import TASKS, read_all
from checkpoints import Timer
from pyspark import cloudpickle
from steward_session import steward_session

cloudpickle.register_pickle_by_value(blobs)  # tasks call read_all; executors cannot import it

VARIANTS = ("floor", "recovery", "fresh", "addFile")
ROOT = Path(__file__).resolve().parent.parent


def executor_jvms(app_id: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"],
                         capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


def kill_one_executor(sc: Any) -> None:
    """SIGKILLs one executor JVM and waits until the replacement is registered."""
    app = sc.applicationId
    victim = executor_jvms(app)[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jvms = executor_jvms(app)
        if len(jvms) == 2 and victim not in jvms \
                and sc._jsc.sc().getExecutorMemoryStatus().size() == 3:
            return
        time.sleep(0.2)
    raise SystemExit("no replacement executor within 120 s")


@contextlib.contextmanager
def shaped_link(port: int, mbit: int) -> Iterator[None]:
    """Everything the blob server on ``port`` sends over loopback goes through an ``htb``
    class of ``mbit`` Mbit/s; other loopback traffic through a class far above what lo
    carries. The root qdisc is removed on the way out."""
    commands = [
        "tc qdisc add dev lo root handle 1: htb default 20",
        f"tc class add dev lo parent 1: classid 1:10 htb rate {mbit}mbit ceil {mbit}mbit "
        "burst 256kb",
        "tc class add dev lo parent 1: classid 1:20 htb rate 100gbit ceil 100gbit burst 16mb",
        f"tc filter add dev lo protocol ip parent 1: prio 1 u32 match ip sport {port} 0xffff "
        "flowid 1:10",
    ]
    try:
        for command in commands:
            done = subprocess.run(command.split(), capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"--link-mbit: `{command}` failed: {done.stderr.strip()} "
                                 "(needs root with CAP_NET_ADMIN and the kernel's htb and u32)")
        yield
    finally:
        subprocess.run("tc qdisc del dev lo root".split(), capture_output=True)


# bytes read, worker pid, the worker's blob transfers so far, seconds in blobs.get
Result = tuple[int, int, int, float]


def tasks_for(variant: str, original: str, ref: Any, name: str) -> Callable[[int], Result]:
    def run(_: int) -> Result:
        if variant == "floor":
            return read_all(original), os.getpid(), 0, 0.0
        if variant == "addFile":
            from pyspark import SparkFiles

            return read_all(SparkFiles.get(name)), os.getpid(), 0, 0.0
        import spark_steward
        from spark_steward.blob.executor import executor_blobs

        start = time.perf_counter()
        path = str(spark_steward.blobs.get(ref))
        got = time.perf_counter() - start
        return read_all(path), os.getpid(), executor_blobs().cache.stats["server"], got

    return run


class TransferCount:
    """Blob transfers of one job, from the per-process cumulative counters tasks return."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def __call__(self, results: list[Result]) -> int:
        latest: dict[int, int] = {}
        for _, pid, count, _ in results:
            latest[pid] = max(latest.get(pid, 0), count)
        new = sum(count - self.seen.get(pid, 0) for pid, count in latest.items())
        self.seen.update(latest)
        return new


def first_jobs(spark: Any, variants: tuple[str, ...], rounds: int, original: Path, ref: Any,
               name: str, work_dir: Path) -> tuple[dict[str, list[float]], dict[str, list[int]], dict[str, list[float]]]:
    """Per variant and round: warm job, executor SIGKILL, replacement, an untimed no-op job
    (starts the replacement's Python workers and fetches Spark's own dependencies, costs every
    variant pays alike), then the timed first job."""
    sc = spark.sparkContext
    size = original.stat().st_size
    times: dict[str, list[float]] = {v: [] for v in variants}
    transfers: dict[str, list[int]] = {v: [] for v in variants}
    acquire: dict[str, list[float]] = {v: [] for v in variants}
    count = TransferCount()
    for round_no in range(rounds):
        k = round_no % len(variants)
        for variant in variants[k:] + variants[:k]:
            run = tasks_for(variant, str(original), ref, name)
            count(sc.parallelize(range(TASKS), TASKS).map(run).collect())  # warm
            kill_one_executor(sc)
            if variant == "fresh":  # the host-local copy is lost while the executor is down
                from spark_steward.blob.cache import BlobCache
                from spark_steward.local.working_dir import WorkingDir

                work = WorkingDir(work_dir, sc.applicationId)
                work.remove(BlobCache(work, None).entry(ref.scope, ref.key))  # type: ignore[arg-type]
            sc.parallelize(range(TASKS), TASKS).map(lambda _: os.getpid()).collect()
            os.sync()
            with Timer() as t:
                results = sc.parallelize(range(TASKS), TASKS).map(run).collect()
            assert all(r[0] == size for r in results), f"{variant}: short read"
            times[variant].append(t.seconds)
            transfers[variant].append(count(results))
            acquire[variant].append(max(r[3] for r in results))
            print(f"  round {round_no + 1} {variant:<9} {t.seconds:6.3f}s, "
                  f"{transfers[variant][-1]} blob transfer(s)", file=sys.stderr, flush=True)
    return times, transfers, acquire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--link-mbit", type=int, default=0,
                        help="also run with the blob server behind an emulated link of this "
                             "many Mbit/s (root, tc)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp_name:
        tmp = Path(tmp_name)
        original = tmp / "model.bin"
        with open(original, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
        import spark_steward

        # Session 1: spark-steward. No sc.addFile here: every new executor fetches every file
        # added to its application before its first task, which would charge all variants.
        spark = steward_session(tmp, "bench-local-state", **{
            "spark.steward.blob.cache.same-host-link": "false",
            "spark.steward.blob.ha": "false"})
        ref = spark_steward.blobs.put(str(original))
        work_dir = tmp / "steward-local" / spark.sparkContext.applicationId
        times, transfers, acquire = first_jobs(spark, ("floor", "recovery", "fresh"), args.rounds,
                                      original, ref, "", work_dir)
        shaped: dict[str, list[float]] = {}
        if args.link_mbit:
            port = spark_steward.runtime(spark).context.server_port
            with shaped_link(port, args.link_mbit):
                shaped, _, _ = first_jobs(spark, ("floor", "recovery", "fresh"), args.rounds,
                                          original, ref, "", work_dir)
        verification(work_dir, spark.sparkContext.applicationId, ref, original)
        spark.stop()
        # Session 2: Spark's own addFile, against its own floor.
        spark = steward_session(tmp, "bench-local-state-addfile",
                                **{"spark.steward.blob.transparent": "false"})
        spark.sparkContext.addFile(str(original))
        times2, _, _ = first_jobs(spark, ("floor", "addFile"), args.rounds, original, None,
                               original.name, work_dir)
        spark.stop()
    med = {v: statistics.median(times[v]) for v in times}
    med2 = {v: statistics.median(times2[v]) for v in times2}
    print(f"\nfirst job after an executor SIGKILL, {TASKS} tasks each reading {args.size_mib} MiB,"
          f" median of {args.rounds} (2-core VM)")
    print(f"{'variant':<10} {'seconds':>8} {'x floor':>8} {'x fresh':>8}")
    for v in ("floor", "recovery", "fresh"):
        print(f"{v:<10} {med[v]:8.3f} {med[v] / med['floor']:8.2f} {med[v] / med['fresh']:8.2f}")
    print(f"{'addFile':<10} {med2['addFile']:8.3f} {med2['addFile'] / med2['floor']:8.2f} "
          f"{'':>8}   (its session's floor {med2['floor']:.3f} s)")
    print(f"blob transfers in the first job: recovery {transfers['recovery']}, "
          f"fresh {transfers['fresh']}")
    got = {v: statistics.median(acquire[v]) for v in ("recovery", "fresh")}
    print(f"getting the blob on the host (slowest blobs.get of the job): recovery "
          f"{got['recovery']:.3f} s (crc32c check), fresh {got['fresh']:.3f} s (transfer), "
          f"ratio {got['recovery'] / got['fresh']:.2f}")
    print(f"targets: recovery <= 1.2x floor: {med['recovery'] / med['floor']:.2f}; "
          f"recovery <= 0.25x fresh: {med['recovery'] / med['fresh']:.2f}")
    if shaped:
        link = {v: statistics.median(shaped[v]) for v in shaped}
        print(f"\nthe same with the blob server behind an emulated {args.link_mbit} Mbit/s link")
        print(f"{'variant':<10} {'seconds':>8} {'x floor':>8} {'x fresh':>8}")
        for v in ("floor", "recovery", "fresh"):
            print(f"{v:<10} {link[v]:8.3f} {link[v] / link['floor']:8.2f} "
                  f"{link[v] / link['fresh']:8.2f}")
        print(f"targets: recovery <= 1.2x floor: {link['recovery'] / link['floor']:.2f}; "
              f"recovery <= 0.25x fresh: {link['recovery'] / link['fresh']:.2f}")
    crash_sweep()


def verification(work_dir: Path, app_id: str, ref: Any, original: Path) -> None:
    """First-use verification against raw crc32c, for two copies of the same bytes: the blob as
    the cache last received it (over the emulated link with ``--link-mbit``, else loopback) and
    a local-state value written through the working dir in 8 MiB writes. The writes decide the
    folios the page cache holds them in, and so what the mapping's crc32c walk pays for."""
    import crc32c

    from spark_steward.blob.cache import BlobCache
    from spark_steward.local.stores import LocalState
    from spark_steward.local.working_dir import WorkingDir

    blob_entry = BlobCache(WorkingDir(work_dir, app_id), None).entry(  # type: ignore[arg-type]
        ref.scope, ref.key)
    LocalState(WorkingDir(work_dir, app_id), "bench").put("copy", str(original))
    copies = {"blob as fetched": (blob_entry, (ref.crc32c, ref.size)),
              "local-state value": ("state/bench/copy", None)}
    data = original.read_bytes()
    mib = len(data) / (1 << 20)
    for label, (entry, expected) in copies.items():
        raw = lookup = float("inf")
        for _ in range(3):
            with Timer() as t:
                crc32c.crc32c(data)
            raw = min(raw, t.seconds)
            work = WorkingDir(work_dir, app_id)  # cold: nothing verified in this instance
            with Timer() as t:
                assert work.lookup(entry, expected=expected) is not None
            lookup = min(lookup, t.seconds)
        print(f"verification, {label}: first-use lookup {mib / lookup:6.0f} MiB/s, raw crc32c "
              f"{mib / raw:6.0f} MiB/s, ratio {raw / lookup:.2f} (target >= 0.80)")


def crash_sweep() -> None:
    sys.path.insert(0, str(ROOT))
    from tests.unit.crash_fs import CrashFs, PowerCut

    from spark_steward.local.stores import LocalState
    from spark_steward.local.working_dir import WorkingDir

    old, new = b"old" * 5000, b"new!" * 7000
    root = Path("/bench/app")
    cuts = bad = 0
    for keep_names in (False, True):
        step = 1
        while True:
            fs = CrashFs()
            LocalState(WorkingDir(root, "app", fs=fs), "s").put("k", old)
            fs.crash_at = fs.steps + step
            try:
                LocalState(WorkingDir(root, "app", fs=fs), "s").put("k", new)
            except PowerCut:
                disk = fs.after_power_cut(keep_unsynced_names=keep_names)
                work = WorkingDir(root, "app", fs=disk)
                work.recover()
                cuts += 1
                bad += LocalState(work, "s").get("k") not in (old, new)
                step += 1
                continue
            break
    print(f"crash sweep: {cuts} power cuts across a put (both rename outcomes), "
          f"torn or stale values served after recovery: {bad}")


if __name__ == "__main__":
    main()
