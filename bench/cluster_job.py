"""One fresh application of ``bench/cluster.py``, run by spark-submit on the harness's driver
host against its standalone master; writes its timings as JSON to OUT. Tasks are pickled by
value (this module is ``__main__``; ``bench/blobs.py``'s reads are registered so): nothing of
bench/ is imported on executors.

    cluster_job.py blobs OUT --order steward,addfile,broadcast,floor --files DIR --floor PATH
    cluster_job.py checkpoints OUT --order ... --partitions N --rows R --spark-dir DIR
    cluster_job.py cache OUT --order steward,parquet --inputs DIR --copy DIR

blobs        ``--files DIR`` holds one file per shipping variant (``steward``, ``addfile``,
             ``broadcast``), each with different bytes so no variant finds another's copy.
             "first" is the set-up (``blobs.put``, ``sc.addFile``, reading the file and
             ``sc.broadcast``) plus the first job; "warm" is the same job again. ``floor`` reads
             ``--floor``, a copy already on every worker host (what no shipping costs).
checkpoints  ``df.checkpoint(eager=True)`` (Spark's own method, the hook's ``__wrapped__``) vs
             ``spark_steward.checkpoints(name).save(df)`` (the default, file-merged layout,
             zstd), ``steward-none`` the same without compression; then one action over each
             restored DataFrame; every total must be exact. Bytes stored are reported too.
cache        the first action materializes (``df.write.parquet`` + ``read.parquet`` vs
             ``spark_steward.cache(df)``), then three later actions run on each, alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any, Callable

from pyspark import cloudpickle

import blobs as blobs_bench  # bench/blobs.py (this script's folder is on the driver's path)
from blobs import copy_all, read_all  # the same reads as the local-cluster benchmark

# Executors cannot import bench/: its functions travel by value, like this script's.
cloudpickle.register_pickle_by_value(blobs_bench)

TASKS = 8

Row = tuple[str, int, float]
"""What a shipping task returns: its host, the bytes it read, its seconds."""


def timed(fn: Callable[[], int]) -> Row:
    start = time.perf_counter()
    n = fn()
    return socket.gethostname(), n, time.perf_counter() - start


def run_tasks(sc: Any, task: Callable[[int], Row], size: int) -> tuple[float, dict[str, int]]:
    """One job of TASKS tasks; wall seconds and tasks per host. Every task must read it all."""
    os.sync()
    start = time.perf_counter()
    rows = sc.parallelize(range(TASKS), TASKS).map(task).collect()
    wall = time.perf_counter() - start
    bad = [r for r in rows if r[1] != size]
    if bad:
        raise SystemExit(f"FAIL: tasks read {[r[1] for r in bad]} bytes, expected {size}")
    hosts: dict[str, int] = {}
    for host, _, _ in rows:
        hosts[host] = hosts.get(host, 0) + 1
    return wall, hosts


def blobs(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    import spark_steward

    sc = spark.sparkContext
    results: dict[str, Any] = {}
    for variant in args.order:
        sc.parallelize(range(TASKS), TASKS).map(lambda x: x).collect()  # untimed, before each
        path = args.floor if variant == "floor" else os.path.join(args.files, variant)
        size = os.path.getsize(path) if variant != "floor" else args.size
        os.sync()
        start = time.perf_counter()
        if variant == "steward":
            ref = spark_steward.blobs.put(path)
            task: Callable[[int], Row] = (
                lambda _, ref=ref: timed(lambda: read_all(spark_steward.blobs.get(ref))))
        elif variant == "addfile":
            sc.addFile(path)
            name = os.path.basename(path)

            def task(_: int, name: str = name) -> Row:
                from pyspark import SparkFiles

                return timed(lambda: read_all(SparkFiles.get(name)))
        elif variant == "broadcast":
            with open(path, "rb") as f:
                bc = sc.broadcast(f.read())
            task = lambda _, bc=bc: timed(lambda: copy_all(bc.value))  # noqa: E731
        else:
            task = lambda _, p=path: timed(lambda: read_all(p))  # noqa: E731
        setup = time.perf_counter() - start
        job, hosts = run_tasks(sc, task, size)
        warm, _ = run_tasks(sc, task, size)
        results[variant] = {"setup": setup, "first": setup + job, "warm": warm, "hosts": hosts}
        print(f"{variant}: first {setup + job:.3f}s (set-up {setup:.3f}s), warm {warm:.3f}s, "
              f"tasks per host {hosts}", file=sys.stderr, flush=True)
    return results


def make_frame(spark: Any, rows: int, partitions: int) -> Any:
    from pyspark.sql.functions import col, concat, lit

    return spark.range(0, rows, numPartitions=partitions).select(
        "id", (col("id") * 1.5).alias("x"),
        concat(lit("name-"), col("id").cast("string")).alias("s"))


def frame_totals(df: Any) -> list[Any]:
    from pyspark.sql.functions import count, length, lit
    from pyspark.sql.functions import sum as sum_

    return list(df.agg(count(lit(1)), sum_("id"), sum_("x"), sum_(length("s"))).collect()[0])


def _du(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root)
               for f in files)


def checkpoints(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    import spark_steward
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    sc = spark.sparkContext
    raw_checkpoint = getattr(ClassicDataFrame.checkpoint, "__wrapped__", None)
    if raw_checkpoint is None:
        raise SystemExit("FAIL: spark-steward's df.checkpoint hook is not installed")
    from spark_steward.checkpoint.service import CheckpointService

    store = spark_steward.runtime().service(CheckpointService).require_store()
    if args.spark_dir:
        sc.setCheckpointDir(args.spark_dir)
    series = spark_steward.checkpoints(f"bench-{args.partitions}", retained=1)
    expected = frame_totals(make_frame(spark, args.rows, args.partitions))
    results: dict[str, Any] = {}
    for variant in args.order:
        sc.parallelize(range(4), 4).map(lambda x: x).collect()
        os.sync()
        df = make_frame(spark, args.rows, args.partitions)
        start = time.perf_counter()
        if variant == "builtin":
            before = _du(args.spark_dir)  # setCheckpointDir made its <uuid> folder already
            restored = raw_checkpoint(df, eager=True)
            save = time.perf_counter() - start
            stored = _du(args.spark_dir) - before
            start = time.perf_counter()
        else:
            spark.conf.set("spark.steward.checkpoints.compression",
                           "none" if variant == "steward-none" else "zstd")
            cp = series.save(df)
            save = time.perf_counter() - start
            stored = store.get_completed(series.name, cp).bytes
            start = time.perf_counter()
            restored = series.restore(cp)
        got = frame_totals(restored)
        restore = time.perf_counter() - start
        if got != expected:
            raise SystemExit(f"FAIL: {variant} read back {got}, expected {expected}")
        results[variant] = {"save": save, "restore": restore, "bytes": stored}
        print(f"{variant}: save {save:.3f}s, restore+action {restore:.3f}s, {stored} bytes",
              file=sys.stderr, flush=True)
    return results


def cache_frame(spark: Any, inputs: str) -> Any:
    from pyspark.sql.functions import col, count, lit, udf
    from pyspark.sql.functions import max as max_
    from pyspark.sql.functions import sum as sum_
    from pyspark.sql.types import LongType

    @udf(returnType=LongType())
    def score(v, w, name):  # type: ignore[no-untyped-def]
        h = 0
        for ch in name:
            h = (h * 31 + ord(ch)) % 1009
        return (v * w + h * 7) % 10007

    fact = spark.read.parquet(os.path.join(inputs, "fact"))
    dim = spark.read.parquet(os.path.join(inputs, "dim"))
    return (fact.join(dim, "k").withColumn("score", score(col("v"), col("w"), col("name")))
            .groupBy("g").agg(sum_("score").alias("total"), count(lit(1)).alias("n"),
                              max_("score").alias("best")))


def cache_actions(df: Any) -> dict[str, Callable[[], Any]]:
    from pyspark.sql.functions import col, desc
    from pyspark.sql.functions import max as max_
    from pyspark.sql.functions import sum as sum_

    return {
        "count": lambda: df.where(col("total") > 50_000).count(),
        "aggregate": lambda: sorted(tuple(r) for r in df.groupBy((col("g") % 100).alias("m"))
                                    .agg(sum_("total"), max_("best"), sum_("n")).collect()),
        "top-N": lambda: [tuple(r) for r in df.orderBy(desc("total"), "g").limit(20).collect()],
    }


def cache(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    import spark_steward

    sc = spark.sparkContext
    reference = {name: fn() for name, fn in cache_actions(cache_frame(spark, args.inputs)).items()}
    tables: dict[str, Any] = {}
    results: dict[str, Any] = {v: {} for v in args.order}
    for variant in args.order:
        sc.parallelize(range(4), 4).map(lambda x: x).collect()
        os.sync()
        df = cache_frame(spark, args.inputs)
        start = time.perf_counter()
        if variant == "parquet":
            df.write.parquet(args.copy)
            table = spark.read.parquet(args.copy)
        else:
            table = spark_steward.cache(df)
        table.where("total > 50000").count()
        results[variant]["materialize"] = time.perf_counter() - start
        tables[variant] = table
    for action in ("count", "aggregate", "top-N"):
        for variant in args.order:
            sc.parallelize(range(4), 4).map(lambda x: x).collect()
            os.sync()
            start = time.perf_counter()
            got = cache_actions(tables[variant])[action]()
            results[variant][action] = time.perf_counter() - start
            if got != reference[action]:
                raise SystemExit(f"FAIL: {variant} {action} gave {got!r:.200}, expected "
                                 f"{reference[action]!r:.200}")
    for variant in args.order:
        print(f"{variant}: {results[variant]}", file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("blobs", "checkpoints", "cache"))
    parser.add_argument("out")
    parser.add_argument("--order", type=lambda s: s.split(","), required=True)
    parser.add_argument("--files")
    parser.add_argument("--floor")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spark-dir")
    parser.add_argument("--inputs")
    parser.add_argument("--copy")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = SparkSession.builder.appName(f"bench-cluster-{args.mode}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    context = time.perf_counter() - started
    results = {"blobs": blobs, "checkpoints": checkpoints, "cache": cache}[args.mode](spark, args)
    executors = sorted({e.host() for e in spark.sparkContext._jsc.sc().statusTracker()
                        .getExecutorInfos()} - {spark.sparkContext.getConf()
                                                 .get("spark.driver.host")})
    stop_start = time.perf_counter()
    spark.stop()
    body = {"mode": args.mode, "context_start": context, "stop": time.perf_counter() - stop_start,
            "executor_hosts": executors, "results": results}
    with open(args.out + ".tmp", "w") as f:
        json.dump(body, f)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
