"""File-merged checkpoints (FLIP-306) vs one file per partition vs Spark's ``df.checkpoint()``,
in one process run.

One SparkSession on local-cluster[2,1,1024] (2 executors of 1 core on this host) with
spark-steward enabled by conf flags. The DataFrame is ``--rows`` rows (1,000,000) of ``id``,
``x = id * 1.5`` and ``s = "name-" || id``, computed fresh for every save, in 200 and in 1000
partitions:

* builtin   Spark's own ``df.checkpoint(eager=True)`` (the original method) after
            ``sc.setCheckpointDir``: a part file and a ``.crc`` file per partition;
* unmerged  ``checkpoints(...).save(df)`` with ``file-merging.enabled=false``: a checksummed
            file per partition;
* merged    ``checkpoints(...).save(df)`` with file merging on (the default): Arrow IPC
            segments appended to host-shared physical files.

Both steward layouts compress with ``--codec`` (zstd, the default of
``spark.steward.checkpoints.compression``); ``merged-none`` is the merged layout with
compression off (what versions before issue 25 wrote), to show what compression costs and saves.

Per round the three saves run in a rotating order, each after an untimed tiny job and
``os.sync``; then each result is restored and read by one action over every row and column
(count, sum(id), sum(x), sum(length(s))), which must give the exact totals. Files and bytes
created per checkpoint are counted on disk (Spark's include its ``.crc`` files). Medians over
``--rounds`` (3) after an untimed warm-up round; ratios are medians of per-round ratios with
their spread (min..max).

Then a series of ``--steps`` (10) checkpoints of 200 partitions where 10% of the partitions
change before each save (partition p holds the version of the last step that changed it),
saved with ``across-checkpoint-boundary`` on and off (retained=1, max-space-amplification 2.0):
bytes written by the saves (new physical bytes in each save's own folder) and the series' space
amplification after the last save.

    python bench/checkpoint_merging.py [--rounds 3] [--rows 1000000] [--steps 10]
                                       [--codec zstd] [--partitions 200,1000]

The defaults take about 8 minutes on the 2-core VM; ``--steps 0`` skips the series.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from checkpoints import expected_totals, make_df, totals  # the same DataFrame and checks
from steward_session import steward_session
from spark_steward.checkpoint.service import CheckpointService

MERGING = "spark.steward.checkpoints.file-merging.enabled"
ACROSS = "spark.steward.checkpoints.file-merging.across-checkpoint-boundary"
CODEC = "spark.steward.checkpoints.compression"
KINDS = ("builtin", "unmerged", "merged", "merged-none")


def files_in(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


class Saves:
    """The ways of saving one DataFrame, each returning (DataFrame to read, files, bytes)."""

    def __init__(self, spark: Any, tmp: Path, codec: str = "zstd") -> None:
        import spark_steward
        from pyspark.sql.classic.dataframe import DataFrame

        self.spark = spark
        self.tmp = tmp
        self.codec = codec
        self.builtin_checkpoint = getattr(DataFrame.checkpoint, "__wrapped__",
                                          DataFrame.checkpoint)
        self.store = spark_steward.runtime().service(CheckpointService).require_store()
        self.storage = spark_steward.runtime().storage
        self.series = {k: spark_steward.checkpoints(f"bench-{k}", retained=1)
                       for k in ("unmerged", "merged", "merged-none")}
        spark.sparkContext.setCheckpointDir(str(tmp / "sparkcp"))
        self.sparkcp = Path(str(spark.sparkContext._jsc.sc().getCheckpointDir().get())
                            .replace("file:", ""))
        self.previous: Path | None = None

    def builtin(self, df: Any) -> tuple[Any, int, int]:
        if self.previous is not None:  # untimed: keep the disk from filling
            shutil.rmtree(self.previous, ignore_errors=True)
        before = {p.name for p in self.sparkcp.iterdir()} if self.sparkcp.exists() else set()
        result = self.builtin_checkpoint(df, True)
        new = [p for p in self.sparkcp.iterdir() if p.name not in before]
        self.previous = new[0] if new else None
        found = [f for p in new for f in files_in(p)]
        return result, len(found), sum(f.stat().st_size for f in found)

    def steward(self, kind: str, df: Any) -> tuple[Any, int, int]:
        self.spark.conf.set(MERGING, "false" if kind == "unmerged" else "true")
        self.spark.conf.set(CODEC, "none" if kind == "merged-none" else self.codec)
        series = self.series[kind]
        number = series.save(df)
        entry = self.store.get_completed(series.name, number)
        found = [Path(self.storage.path(rel)) for rel in entry.physical] if entry.merged else \
            files_in(Path(self.storage.path(entry.data)))
        return series.restore(number), len(found), sum(f.stat().st_size for f in found)


def compare_saves(spark: Any, saves: Saves, rows: int, partitions: int, rounds: int
                  ) -> dict[str, Any]:
    expected = expected_totals(rows)
    seconds: dict[str, list[float]] = {k: [] for k in KINDS}
    reads: dict[str, list[float]] = {k: [] for k in KINDS}
    files: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for r in range(rounds + 1):  # round 0 warms up
        order = KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]
        for kind in order:
            spark.range(10).count()
            os.sync()
            df = make_df(spark, rows, partitions)
            if kind == "builtin":
                took, (result, count, size) = timed(lambda: saves.builtin(df))
            else:
                took, (result, count, size) = timed(lambda: saves.steward(kind, df))
            read, got = timed(lambda: totals(result))
            if got != expected:
                sys.exit(f"{kind} at {partitions} partitions read {got}, expected {expected}")
            if r:
                seconds[kind].append(took)
                reads[kind].append(read)
            files[kind] = count
            sizes[kind] = size
        assert saves.store.cleaner.wait_idle(120)
        print(f"  round {r}{' (warm-up)' if r == 0 else ''}: " + ", ".join(
            f"{k} {seconds[k][-1] if r else 0:.2f} s" for k in KINDS), flush=True)
    ratios = {k: [m / b for m, b in zip(seconds[k], seconds["builtin"])] for k in KINDS}
    read_ratios = {k: [m / b for m, b in zip(reads[k], reads["builtin"])] for k in KINDS}
    return {"seconds": {k: statistics.median(v) for k, v in seconds.items()},
            "read": {k: statistics.median(v) for k, v in reads.items()},
            "files": files, "bytes": sizes,
            "ratio": {k: statistics.median(v) for k, v in ratios.items()},
            "ratio_spread": {k: (min(v), max(v)) for k, v in ratios.items()},
            "read_ratio": {k: statistics.median(v) for k, v in read_ratios.items()},
            "read_spread": {k: (min(v), max(v)) for k, v in read_ratios.items()}}


def series_run(spark: Any, saves: Saves, rows: int, steps: int, across: bool) -> dict[str, Any]:
    import spark_steward
    from pyspark.sql import functions as F

    from spark_steward.checkpoint import metadata as layout
    from spark_steward.checkpoint.gc import series_space

    runtime = spark_steward.runtime()
    name = f"bench-series-{'across' if across else 'within'}"
    series = spark_steward.checkpoints(name, retained=1)
    spark.conf.set(MERGING, "true")
    spark.conf.set(CODEC, saves.codec)
    spark.conf.set(ACROSS, "true" if across else "false")
    rng = random.Random(7)
    version: dict[int, int] = {}
    written = 0
    seconds = []
    for step in range(steps):
        if step:
            for p in rng.sample(range(200), 20):
                version[p] = step
        marks = F.create_map(*[x for p, v in sorted(version.items())
                               for x in (F.lit(p), F.lit(v))])
        df = make_df(spark, rows, 200).withColumn("p", F.spark_partition_id())
        current = F.coalesce(marks[F.col("p")], F.lit(0)) if version else F.lit(0)
        df = df.withColumn("v", current).drop("p")
        took, number = timed(lambda: series.save(df))
        seconds.append(took)
        folder = Path(saves.storage.path(layout.merged_path(name, number)))
        written += sum(p.stat().st_size for p in files_in(folder))
        assert saves.store.cleaner.wait_idle(120)
    (space,) = [s for s in series_space(runtime.registry) if s.series == name]
    got = series.latest().agg(F.sum("v")).first()[0]
    want = sum(v * (rows // 200) for v in version.values())
    if got != want:
        sys.exit(f"series {name}: restored sum(v) {got}, expected {want}")
    return {"written": written, "amplification": space.amplification,
            "seconds": statistics.median(seconds[1:]), "files": space.files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--codec", default="zstd", choices=("zstd", "lz4", "none"))
    parser.add_argument("--partitions", default="200,1000",
                        type=lambda v: [int(p) for p in v.split(",")])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-merging-"))
    spark = steward_session(tmp, "bench-checkpoint-merging", **{"spark.driver.memory": "2g"})
    try:
        saves = Saves(spark, tmp, args.codec)
        print(f"{args.rows:,} rows on local-cluster[2,1,1024]; codec {args.codec}; medians of "
              f"{args.rounds} rounds")
        results = {}
        for partitions in args.partitions:
            print(f"{partitions} partitions:", flush=True)
            results[partitions] = compare_saves(spark, saves, args.rows, partitions, args.rounds)
        print()
        def spread(pair: tuple[float, float]) -> str:
            return f"({pair[0]:.2f}..{pair[1]:.2f})"

        print(f"{'partitions':>10}  {'save':<11} {'seconds':>7} {'vs builtin':>22} "
              f"{'restore+read s':>14} {'vs builtin':>22} {'MB':>7} {'bytes':>7} {'files':>6}")
        for partitions, res in results.items():
            for kind in KINDS:
                print(f"{partitions:>10}  {kind:<11} {res['seconds'][kind]:>7.2f} "
                      f"{res['ratio'][kind]:>9.3f}x {spread(res['ratio_spread'][kind]):>12} "
                      f"{res['read'][kind]:>14.2f} "
                      f"{res['read_ratio'][kind]:>9.3f}x {spread(res['read_spread'][kind]):>12} "
                      f"{res['bytes'][kind] / 1e6:>7.1f} "
                      f"{res['bytes'][kind] / res['bytes']['builtin']:>6.2f}x "
                      f"{res['files'][kind]:>6}")
        print()
        for partitions, res in results.items():
            print(f"targets at {partitions}: merged bytes "
                  f"{res['bytes']['merged'] / res['bytes']['builtin']:.2f}x (<= 1.0), unmerged "
                  f"{res['bytes']['unmerged'] / res['bytes']['builtin']:.2f}x; save "
                  f"{res['ratio']['merged']:.3f}x (<= {0.6 if partitions >= 1000 else 1.0}); "
                  f"restore {res['read_ratio']['merged']:.3f}x (<= 1.1)")
        if not args.steps:
            return
        print()
        print(f"series of {args.steps} checkpoints, 200 partitions, 10% change per step:")
        runs = {across: series_run(spark, saves, args.rows, args.steps, across)
                for across in (False, True)}
        for across, res in runs.items():
            print(f"  across-checkpoint-boundary={str(across).lower():<5}  bytes written "
                  f"{res['written'] / 1e6:8.1f} MB  median save {res['seconds']:.2f} s  "
                  f"physical files {res['files']}  space amplification "
                  f"{res['amplification']:.3f}")
        ratio = runs[True]["written"] / runs[False]["written"]
        print(f"  bytes written, across on / off: {ratio:.3f}x (target <= 0.25x); final "
              f"amplification {runs[True]['amplification']:.3f} (bound 2.0)")
        if 1000 in results:
            print(f"files per checkpoint at 1000 partitions {results[1000]['files']['merged']} "
                  f"(<= 4; builtin {results[1000]['files']['builtin']})")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
