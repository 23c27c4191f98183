"""Checkpoints: spark-steward's named series vs Spark's own ``df.checkpoint()``, and retried
cleanup vs Spark's one-shot delete, in one process run.

One SparkSession on local-cluster[2,1,1024] (2 executors of 1 core on this host) with
spark-steward enabled by conf flags, as a user enables it. The DataFrame is ``--rows`` rows
(1,000,000) in ``--partitions`` partitions (200) of ``id``, ``x = id * 1.5`` and
``s = "name-" || id``, computed fresh for every save (nothing cached):

* builtin  Spark's own ``df.checkpoint(eager=True)`` after ``sc.setCheckpointDir``: the original
           method (the wrapper's ``__wrapped__``), so plain Spark with nothing registered;
* owned    ``df.checkpoint(eager=True)`` as users call it in a session with spark-steward on
           (the same Spark call, then registered in the checkpoint store: a pending and a
           completed entry, durable records, as steward owns Spark's own checkpoints);
* steward  ``spark_steward.checkpoints("bench", retained=1).save(df)`` with file merging off
           (partitions written by the executors in crc32c blocks, durable pending entry before, artifact and completed
           entry after, the previous checkpoint subsumed on the cleanup pool).

The three saves run in a rotating order per round, ``--rounds`` times, each after an untimed
tiny job with dirty pages written back (untimed ``os.sync``). Then, in the same round, restore:
one action that reads every row and column (count, sum(id), sum(x), sum(length(s))) over the
DataFrame ``df.checkpoint()`` returned vs over ``series.restore(id)`` (the ``restore`` call is
timed with its action, and also reported alone); both must give the exact expected totals or
the run fails. A full untimed round warms everything up first. Medians are reported; the save
ratio is the median of the per-round ratios steward / builtin.

Cleanup, after the rounds in the same process: ``--cleanup-count`` (10,000) completed
checkpoints, each an entry, an artifact and a data folder of 2 small files, written straight to
disk (untimed), loaded by a :class:`CheckpointStore` on a local-directory Storage with a
:class:`RetryingCleaner` (4 io threads, the default; exponential delay 0.01..0.1 s). The
filesystem fails the first recursive delete of the data folder of ``--fail-share`` (30%) of
them with an OSError (EIO), chosen by a seeded random sample. Timed: ``store.discard`` of every
checkpoint until ``cleaner.outstanding()`` is empty; then every entry, artifact and data folder
must be gone. Spark's peer is what its ContextCleaner does for a checkpointed RDD
(``ReliableRDDCheckpointData.cleanCheckpoint``): one recursive Hadoop ``FileSystem.delete`` per
folder, on one thread, tried once: measured on the same number of identical data folders through
the driver JVM's Hadoop FileSystem (two py4j calls per folder, whose share is measured apart
with the same calls doing no filesystem work), no failures injected.
``--more-cleanup`` adds steward's discard without injected failures and the ``shutil.rmtree``
peer (a folder delete costs 1 to 6 ms on this VM's disk, depending on what else writes to it, so
each extra 10,000-delete run takes 10 s to a minute).

    python bench/checkpoints.py [--rounds 4] [--rows 1000000] [--partitions 200]
                                [--cleanup-count 10000] [--fail-share 0.3] [--seed 5]
                                [--more-cleanup]

The defaults take 3-4 minutes on the 2-core VM.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from steward_session import steward_session

SERIES = "bench"
SAVES = ("builtin", "owned", "steward")
LABELS = {"builtin": "Spark's own df.checkpoint(eager=True)",
          "owned": "df.checkpoint(eager=True), owned",
          "steward": 'checkpoints("bench").save(df)'}


# -- Spark: save and restore --------------------------------------------------------------------

def session(tmp: Path) -> Any:
    # The one-file-per-partition layout this benchmark measured when it was recorded; the
    # merged layout has its own benchmark (checkpoint_merging.py).
    return steward_session(tmp, "bench-checkpoints", **{
        "spark.driver.memory": "2g", "spark.steward.checkpoints.file-merging.enabled": "false"})


def make_df(spark: Any, rows: int, partitions: int) -> Any:
    from pyspark.sql.functions import col, concat, lit

    return spark.range(0, rows, numPartitions=partitions).select(
        "id", (col("id") * 1.5).alias("x"),
        concat(lit("name-"), col("id").cast("string")).alias("s"))


def totals(df: Any) -> tuple[int, int, float, int]:
    from pyspark.sql.functions import count, length, lit
    from pyspark.sql.functions import sum as sum_

    row = df.agg(count(lit(1)), sum_("id"), sum_("x"), sum_(length("s"))).collect()[0]
    return int(row[0]), int(row[1]), float(row[2]), int(row[3])


def expected_totals(rows: int) -> tuple[int, int, float, int]:
    ids = rows * (rows - 1) // 2
    digits = sum(len(str(i)) for i in range(rows))
    return rows, ids, ids * 1.5, 5 * rows + digits


def folder_bytes(url: str | None) -> int:
    if not url or not url.startswith("file://"):
        return -1
    total = 0
    for dirpath, _, names in os.walk(url[len("file://"):]):
        total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
    return total


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


# -- cleanup: a local filesystem that fails the first delete of chosen folders ---------------

def flaky_storage(root: Path, fail_first: set[str]) -> tuple[Any, Any]:
    from fsspec.implementations.local import LocalFileSystem

    from spark_steward.storage import Storage

    class FlakyLocalFileSystem(LocalFileSystem):
        """LocalFileSystem whose ``rm`` of a path in ``fail_first`` raises EIO the first time."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.fail_first = fail_first
            self.failed: set[str] = set()
            self.rm_calls = 0
            self._guard = threading.Lock()

        def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
            key = str(self._strip_protocol(path)) if isinstance(path, str) else ""
            with self._guard:
                self.rm_calls += 1
                fail = key in self.fail_first and key not in self.failed
                if fail:
                    self.failed.add(key)
            if fail:
                raise OSError(errno.EIO, "injected transient failure of rm", key)
            super().rm(path, recursive=recursive, maxdepth=maxdepth)

    fs = FlakyLocalFileSystem(skip_instance_cache=True)
    return Storage(fs, str(root), root.as_uri()), fs


def write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


PART = b"p" * 96  # each data file: 96 bytes


def write_data_folder(folder: str) -> None:
    os.mkdir(folder)
    write_file(os.path.join(folder, "part-00000"), PART)
    write_file(os.path.join(folder, "part-00001"), PART)


def write_checkpoints(root: Path, count: int, app_id: str) -> None:
    """``count`` completed checkpoints of SERIES straight to disk: no fsync, setup is untimed."""
    from spark_steward import records
    from spark_steward.checkpoint import metadata as layout
    from spark_steward.checkpoint import lifecycle as machine
    from spark_steward.checkpoint.lifecycle import CheckpointKind

    for folder in (layout.ENTRIES, layout.ARTIFACTS, layout.DATA):
        os.makedirs(root / folder / SERIES, exist_ok=True)
    now = time.time()
    base = str(root)
    for number in range(1, count + 1):
        data = layout.data_path(SERIES, number)
        entry = machine.complete(
            machine.pending(SERIES, number, app_id, CheckpointKind.SERIES, data, now), now,
            rows=2, bytes_=2 * len(PART), files=2)
        write_file(os.path.join(base, layout.entry_path(SERIES, number)),
                   records.encode_record(entry.to_json()))
        artifact = {"format": "spark-steward-rows/1", "series": SERIES, "id": number,
                    "app_id": app_id, "schema": '{"type":"struct","fields":[]}',
                    "files": [{"partition": p, "name": f"part-0000{p}", "rows": 1,
                               "bytes": len(PART), "crc32c": "00000000"} for p in (0, 1)]}
        write_file(os.path.join(base, layout.artifact_path(SERIES, number)),
                   records.encode_record(artifact))
        write_data_folder(os.path.join(base, data))


def leftovers(root: Path) -> tuple[int, int]:
    """Files below ``root`` and directories below its data folder of SERIES."""
    files = sum(len(names) for _, _, names in os.walk(root))
    data = root / "checkpoints" / "data" / SERIES
    folders = len(os.listdir(data)) if data.exists() else 0
    return files, folders


def steward_cleanup(tmp: Path, count: int, fail_share: float, seed: int) -> dict[str, Any]:
    from spark_steward.checkpoint import metadata as layout
    from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
    from spark_steward.cleaner import RetryingCleaner
    from spark_steward.lifecycle.retry import RetryStrategy

    root = tmp / f"cleanup-steward-{fail_share:g}"
    app_id = "app-bench-cleanup"
    write_checkpoints(root, count, app_id)
    doomed = random.Random(seed).sample(range(1, count + 1), round(count * fail_share))
    fail_first = {str(root / layout.data_path(SERIES, n)) for n in doomed}
    storage, fs = flaky_storage(root, fail_first)
    cleaner: RetryingCleaner[CheckpointCleanup] = RetryingCleaner(RetryStrategy.exponential(0.01, 0.1),
                                                    name="bench-cleanup")
    store = CheckpointStore(storage, app_id, cleaner, is_dead=lambda app: False)
    store.refresh(SERIES)
    entries = store.completed(SERIES)
    assert len(entries) == count, f"loaded {len(entries)} of {count} checkpoints"
    os.sync()  # untimed: the setup's writes are not the discard's to pay for
    try:
        start = time.perf_counter()
        submitted = sum(store.discard(e, "bench") for e in entries)
        calls = time.perf_counter() - start
        while cleaner.outstanding():
            cleaner.wait_idle(0.05)
        seconds = time.perf_counter() - start
        stats = cleaner.stats()
        given_up = cleaner.given_up()
    finally:
        cleaner.close(5.0)
    assert submitted == count, f"{count - submitted} discards were not accepted"
    assert not given_up, f"the cleaner gave up on {len(given_up)}: {list(given_up.items())[:3]}"
    files, folders = leftovers(root / "checkpoints")
    assert files == 0 and folders == 0, f"left behind: {files} files, {folders} data folders"
    assert not store.entries(), f"{len(store.entries())} entries still known to the store"
    assert len(fs.failed) == len(fail_first), \
        f"injected {len(fail_first)} failures, {len(fs.failed)} happened"
    shutil.rmtree(root)
    return {"seconds": seconds, "calls": calls, "attempts": stats["attempts"],
            "failures": stats["failures"], "injected": len(fs.failed), "rm_calls": fs.rm_calls}


def peer_folders(root: Path, count: int) -> list[str]:
    os.makedirs(root)
    folders = [str(root / f"rdd-{n}") for n in range(1, count + 1)]
    for folder in folders:
        write_data_folder(folder)
    os.sync()
    return folders


def hadoop_peer(sc: Any, tmp: Path, count: int) -> tuple[float, float]:
    """Spark's ContextCleaner.doCleanCheckpoint: one recursive FileSystem.delete per folder.

    Returns its seconds and those of the same py4j calls doing no filesystem work (a Path
    built and ``fs.getScheme()``): the bridge's share, which Spark's own cleaner does not pay."""
    root = tmp / "cleanup-hadoop"
    folders = peer_folders(root, count)
    jvm = sc._jvm
    path_class = jvm.org.apache.hadoop.fs.Path
    fs = path_class(root.as_uri()).getFileSystem(sc._jsc.hadoopConfiguration())
    urls = [Path(f).as_uri() for f in folders]
    start = time.perf_counter()
    deleted = sum(bool(fs.delete(path_class(url), True)) for url in urls)
    seconds = time.perf_counter() - start
    assert deleted == count and not os.listdir(root), f"Hadoop deleted {deleted} of {count}"
    shutil.rmtree(root)
    start = time.perf_counter()
    for url in urls:
        path_class(url)
        fs.getScheme()
    return seconds, time.perf_counter() - start


def rmtree_peer(tmp: Path, count: int) -> float:
    root = tmp / "cleanup-rmtree"
    folders = peer_folders(root, count)
    start = time.perf_counter()
    for folder in folders:
        shutil.rmtree(folder)
    seconds = time.perf_counter() - start
    assert not os.listdir(root)
    shutil.rmtree(root)
    return seconds


# -- the driver ------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--cleanup-count", type=int, default=10_000)
    parser.add_argument("--fail-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--more-cleanup", action="store_true",
                        help="also steward's discard without failures and shutil.rmtree")
    args = parser.parse_args()
    load_before = Path("/proc/loadavg").read_text().split()[:3]

    tmp = Path(tempfile.mkdtemp(prefix="bench-checkpoints-"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.pop("SPARK_CONF_DIR", None)
    spark = None
    executor_dirs: Path | None = None
    save: dict[str, list[float]] = defaultdict(list)
    restore: dict[str, list[float]] = defaultdict(list)
    restore_call: list[float] = []
    sizes: dict[str, int] = {}
    expected = expected_totals(args.rows)
    try:
        import spark_steward
        from pyspark.find_spark_home import _find_spark_home
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
        from spark_steward.checkpoint.spark_checkpoints import checkpointed_rdd_of_dataframe

        spark = session(tmp)
        sc = spark.sparkContext
        executor_dirs = Path(_find_spark_home()) / "work" / sc.applicationId
        assert spark_steward.is_enabled(spark), "spark-steward is not on in this session"
        raw_checkpoint = getattr(ClassicDataFrame.checkpoint, "__wrapped__", None)
        assert raw_checkpoint is not None, "spark-steward's df.checkpoint hook is not installed"
        sc.setCheckpointDir(str(tmp / "spark-checkpoints"))
        series = spark_steward.checkpoints(SERIES, retained=1)

        def check(what: str, got: tuple[int, int, float, int]) -> None:
            if got != expected:
                raise SystemExit(f"FAIL: {what} read back (count, sum id, sum x, sum length s) = "
                                 f"{got}, expected {expected}")

        def one_round(round_no: int | None) -> None:
            """round_no None: the untimed warm-up round."""
            order = [SAVES[(i + (round_no or 0)) % len(SAVES)] for i in range(len(SAVES))]
            label = "warm-up" if round_no is None else f"round {round_no + 1}/{args.rounds}"
            print(f"{label}: {', '.join(order)}", file=sys.stderr, flush=True)
            held: dict[str, Any] = {}
            for variant in order:
                sc.parallelize(range(4), 4).map(lambda x: x).collect()  # untimed, as before each
                os.sync()
                df = make_df(spark, args.rows, args.partitions)
                with Timer() as t:
                    if variant == "builtin":
                        held[variant] = raw_checkpoint(df, eager=True)
                    elif variant == "owned":
                        held[variant] = df.checkpoint(eager=True)
                    else:
                        held[variant] = series.save(df)
                if round_no is not None:
                    save[variant].append(t.seconds)
                print(f"  save {variant:<8} {t.seconds:7.3f}s", file=sys.stderr, flush=True)
            if "builtin" not in sizes:
                sizes["builtin"] = folder_bytes(checkpointed_rdd_of_dataframe(held["builtin"])[1])
                sizes["steward"] = next(c.bytes for c in series.list()
                                        if c.id == held["steward"]) or -1
            for variant in ("builtin", "steward") if (round_no or 0) % 2 == 0 else \
                    ("steward", "builtin"):
                sc.parallelize(range(4), 4).map(lambda x: x).collect()
                with Timer() as t:
                    if variant == "builtin":
                        got = totals(held["builtin"])
                    else:
                        with Timer() as call:
                            restored = series.restore(held["steward"])
                        got = totals(restored)
                check(f"{variant} restore", got)
                if round_no is not None:
                    restore[variant].append(t.seconds)
                    if variant == "steward":
                        restore_call.append(call.seconds)
                print(f"  restore {variant:<8} {t.seconds:7.3f}s  totals ok", file=sys.stderr,
                      flush=True)
            if round_no is not None:
                print(f"  steward/builtin save {save['steward'][-1] / save['builtin'][-1]:.3f}"
                      f"  restore {restore['steward'][-1] / restore['builtin'][-1]:.3f}",
                      file=sys.stderr, flush=True)

        one_round(None)
        for round_no in range(args.rounds):
            one_round(round_no)

        # Cleanup: steward's store with injected failures, without, and Spark's peers.
        print(f"cleanup: {args.cleanup_count} checkpoints ...", file=sys.stderr, flush=True)
        flaky = steward_cleanup(tmp, args.cleanup_count, args.fail_share, args.seed)
        print(f"  steward, {args.fail_share:.0%} failing once: {flaky['seconds']:.2f}s",
              file=sys.stderr, flush=True)
        hadoop_s, bridge_s = hadoop_peer(sc, tmp, args.cleanup_count)
        print(f"  Hadoop FileSystem.delete: {hadoop_s:.2f}s", file=sys.stderr, flush=True)
        if args.more_cleanup:
            clean = steward_cleanup(tmp, args.cleanup_count, 0.0, args.seed)
            print(f"  steward, no failures: {clean['seconds']:.2f}s", file=sys.stderr, flush=True)
            rmtree_s = rmtree_peer(tmp, args.cleanup_count)
            print(f"  shutil.rmtree: {rmtree_s:.2f}s", file=sys.stderr, flush=True)
    finally:
        if spark is not None:
            spark.stop()
        if executor_dirs is not None:
            shutil.rmtree(executor_dirs, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    med = {v: statistics.median(save[v]) for v in SAVES}
    ratios = {v: statistics.median(a / b for a, b in zip(save[v], save["builtin"]))
              for v in SAVES}
    print(f"\nbench/checkpoints.py  ({args.rows:,} rows x 3 columns, {args.partitions} partitions, "
          f"local-cluster[2,1,1024], {args.rounds} rounds, rotating order; medians)")
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
    print(f"{'save':<40} {'median s':>8} {'/ builtin':>9}   per round s (ratio to builtin)")
    for v in SAVES:
        cells = "  ".join(f"{a:.3f} ({a / b:.2f})" for a, b in zip(save[v], save["builtin"]))
        print(f"{LABELS[v]:<40} {med[v]:>8.3f} {ratios[v]:>9.3f}   {cells}")
    print(f"on disk: builtin {sizes['builtin'] / 1e6:.1f} MB, steward {sizes['steward'] / 1e6:.1f}"
          " MB")
    rb, rs = statistics.median(restore["builtin"]), statistics.median(restore["steward"])
    rc = statistics.median(restore_call)
    r_ratio = statistics.median(a / b for a, b in zip(restore["steward"], restore["builtin"]))
    print(f"restore: one action over all rows (count, sums), totals checked = {expected}")
    print(f"{'over the checkpointed DataFrame':<40} {rb:>8.3f} {1:>9.3f}   "
          + "  ".join(f"{a:.3f}" for a in restore["builtin"]))
    print(f"{'series.restore(id) + action':<40} {rs:>8.3f} {r_ratio:>9.3f}   "
          + "  ".join(f"{a:.3f} ({a / b:.2f})" for a, b in zip(restore["steward"],
                                                               restore["builtin"])))
    print(f"{'  of which series.restore(id)':<40} {rc:>8.3f}")

    n = args.cleanup_count
    print(f"cleanup: {n:,} checkpoints (entry + artifact + data folder of 2 files each), "
          "until all are gone")
    print(f"{'':<44} {'seconds':>8} {'per s':>8} {'attempts':>8} {'failures':>8}")
    rows = [(f"steward discard, {args.fail_share:.0%} failing once", flaky)]
    if args.more_cleanup:
        rows.append(("steward discard, no failures", clean))
    for label, r in rows:
        print(f"{label:<44} {r['seconds']:>8.2f} {n / r['seconds']:>8.0f} {r['attempts']:>8} "
              f"{r['failures']:>8}")
    print(f"{'Hadoop FileSystem.delete via py4j, 1 thread':<44} {hadoop_s:>8.2f} "
          f"{n / hadoop_s:>8.0f} {n:>8} {0:>8}")
    print(f"{'  of which py4j calls (no filesystem work)':<44} {bridge_s:>8.2f}")
    if args.more_cleanup:
        print(f"{'shutil.rmtree, 1 thread':<44} {rmtree_s:>8.2f} {n / rmtree_s:>8.0f} {n:>8} "
              f"{0:>8}")
    print(f"steward calls to store.discard returned after {flaky['calls']:.2f}s "
          f"({flaky['calls'] / n * 1e6:.0f} us each); injected failures {flaky['injected']}")
    print(f"steward throughput ({args.fail_share:.0%} failing once) / Hadoop delete's: "
          f"{hadoop_s / flaky['seconds']:.3f}")
    if args.more_cleanup:
        print(f"  / rmtree's {rmtree_s / flaky['seconds']:.3f}; without failures / Hadoop's "
              f"{hadoop_s / clean['seconds']:.3f}, / rmtree's {rmtree_s / clean['seconds']:.3f}")
    checks = [
        ("steward save <= 1.2x Spark's own df.checkpoint()", ratios["steward"] <= 1.2,
         f"{ratios['steward']:.3f}"),
        ("restored totals equal (both)", True, "checked every round"),
        (f"all {n:,} discarded, {flaky['injected']} transient failures retried, none given up",
         True, f"{flaky['attempts']} attempts"),
    ]
    for label, ok, value in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
