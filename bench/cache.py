"""Cached tables: spark-steward's ``cache(df)`` vs no cache, ``df.cache()``,
``persist(DISK_ONLY)`` and a hand-written Parquet round trip, one executor killed, and a second
application reusing a shared cache, in one process run.

One SparkSession on local-cluster[2,1,1024] (2 executors of 1 core on this host) with
spark-steward enabled by conf flags, as a user enables it. Inputs are written once, untimed, as
Parquet files in a temp dir (file inputs, so a shared cache can identify them): a fact table of
``--rows`` rows (2,000,000) in 8 files (``id``, dimension key ``k``, group ``g`` of
``--rows / 10`` groups, value ``v``) and a dimension table of ``--dim-rows`` rows (10,000:
``k``, ``name``, weight ``w``). The DataFrame under test joins them, computes ``score`` with a
plain Python ``@udf`` on every joined row and groups by ``g`` (``total = sum(score)``,
``n``, ``best = max(score)``): ``--rows / 10`` rows (200,000). Every action reads the
UDF-derived columns, so column pruning can never skip the UDF:

* count     ``df.where(total > 50000).count()``;
* aggregate ``df.groupBy(g % 100).agg(sum(total), max(best), sum(n))``, collected, 100 rows;
* top-N     ``df.orderBy(desc(total), g).limit(20)``, collected.

Variants, sequentially in this order on a DataFrame built afresh for each (its cache is released
before the next variant starts: ``unpersist(blocking=True)``; the Parquet copy and the
spark-steward table hold no memory and are kept for the executor loss below):

* none      no cache: every action recomputes the join, the UDF and the groupBy;
* memory    ``df.cache()``;
* disk      ``df.persist(StorageLevel.DISK_ONLY)``;
* parquet   ``df.write.parquet(copy)``, then ``spark.read.parquet(copy)``;
* steward   ``spark_steward.cache(df, shared=True)`` (shared, for the second application).

"materialize" is the caching call plus the first action (count), which builds the cache (for
"none" it is just the count); then all three actions run once more, each timed ("later"). Every
timed step follows an untimed tiny job and an untimed ``os.sync``; before the variants, one
untimed count of the uncached DataFrame warms the JVMs, the Python workers and the page cache.
Every result of every variant must equal the uncached result (integers only, so exactly), or the
run fails.

Executor loss: the DataFrame is cached again with ``df.cache()`` (untimed), then the aggregate
runs three times on each of the spark-steward table, the Parquet copy and ``df.cache()`` (the
median is "before"). Executor 0 is
SIGKILLed (its pid found by ``pgrep -af "CoarseGrainedExecutorBackend.*<app id>"``; it holds
about half of ``df.cache()``'s partitions, whose count before and after is printed) and the run
waits for the standalone master's replacement executor (2 executor processes again,
``getExecutorMemoryStatus().size() == 3`` with a new block manager). Three untimed jobs over
the input files (Parquet scan, shuffle, aggregate; no UDF, no cache) then give the new
executor's cold JVM its first tasks, as the warm-up did at the start, so that whichever read
lands there first does not pay for class loading and JIT. Then the aggregate runs once more on
each ("after", the first run after the loss: where ``df.cache()`` recomputes what it lost), in
the order steward, Parquet, ``df.cache()``.

Second application: ``spark_steward.close(spark)`` and ``spark.stop()`` end the first one (its
shared table is kept for ``spark.steward.cache.shared-retention``); then a separate Python process
(this script with ``--second-app``, same storage dir, same input files) warms up as the first did
(tiny job, three untimed jobs over the inputs, one untimed count of the uncached DataFrame),
builds the same DataFrame twice (plans and input schemas only; no job runs) and runs the
aggregate on
``spark_steward.cache(df, shared=True)`` (timed from the ``cache`` call: the adopted files'
full crc32c verification included), then the same aggregate without a cache; it prints its
timings and results as JSON. The reuse must read the key the first application materialized.

    python bench/cache.py [--rows 2000000] [--dim-rows 10000] [--keep] [--json FILE]
    python bench/cache.py --shared-rounds 5 [--fact-files 50] [--rows 2000000] [--json FILE]

Shared key and reuse, in rounds (``--shared-rounds N``, issue 33): the fact table in
``--fact-files`` (50) files; each round runs two fresh applications as subprocesses, as a user
meets them. The first times the shared key of the DataFrame above (50 input files, a Python UDF)
where materialization computes it (``TableService._key_for``): its first computation in the
application ("cold": class loading, module hashing) and the median of 10 more ("warm"), against
Spark's own plan identity ``df.semanticHash()`` on a twin DataFrame, cold and warm; then it
materializes the table. The second is the second application above (reuse vs recompute). It
prints every round, then medians with their spread [min..max]. Run it with ``PYTHONPATH`` set to
another checkout's ``python/`` folder to measure that version (before/after).

``--keep`` leaves the temp dir (inputs, Parquet copy, storage dir with the shared cache) in
place and prints its path; ``--json FILE`` also writes every figure as JSON (``-``: stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from pyspark.sql.functions import udf
from pyspark.sql.types import LongType

from checkpoints import Timer  # the same stopwatch
from steward_session import steward_session

VARIANTS = ("none", "memory", "disk", "parquet", "steward")
LABELS = {"none": "no cache",
          "memory": "df.cache()",
          "disk": "df.persist(DISK_ONLY)",
          "parquet": "hand-written Parquet round trip",
          "steward": "spark_steward.cache(df, shared=True)"}
ACTIONS = ("count", "aggregate", "top-N")
#: Runs of each variant before the loss (their median is the reference), and untimed jobs
#: over the inputs that warm the replacement executor's JVM before the first run after it.
LOSS_BEFORE_RUNS = 3
LOSS_WARMUPS = 3
LOSS_ACTION = "aggregate"  # the action run before and after the executor loss, and in app 2
FACT_FILES = 8
THRESHOLD = 50_000


# -- the workload ------------------------------------------------------------------------------

# A type comment, not annotations: with annotations pyspark tries to infer a pandas UDF and warns.
@udf(returnType=LongType())
def score(v, w, name):  # type: (int, int, str) -> int
    """A plain Python UDF (row at a time): a small hash of the name mixed with the value."""
    h = 0
    for ch in name:
        h = (h * 31 + ord(ch)) % 1009
    return (v * w + h * 7) % 10007


def write_inputs(spark: Any, root: Path, rows: int, dim_rows: int,
                 fact_files: int = FACT_FILES) -> None:
    from pyspark.sql.functions import col, concat, lit

    groups = max(1, rows // 10)
    spark.range(0, rows, numPartitions=fact_files).select(
        "id", ((col("id") * 7919) % dim_rows).alias("k"), (col("id") % groups).alias("g"),
        ((col("id") * 31) % 1000).alias("v")).write.parquet(str(root / "fact"))
    spark.range(0, dim_rows, numPartitions=1).select(
        col("id").alias("k"),
        concat(lit("dim-"), ((col("id") * 13) % 997).cast("string")).alias("name"),
        (col("id") % 7 + 1).alias("w")).write.parquet(str(root / "dim"))


def make_df(spark: Any, root: Path) -> Any:
    from pyspark.sql.functions import count, lit
    from pyspark.sql.functions import max as max_
    from pyspark.sql.functions import sum as sum_

    fact = spark.read.parquet(str(root / "fact"))
    dim = spark.read.parquet(str(root / "dim"))
    scored = fact.join(dim, "k").select("g", score("v", "w", "name").alias("score"))
    return scored.groupBy("g").agg(sum_("score").alias("total"), count(lit(1)).alias("n"),
                                   max_("score").alias("best"))


def act_count(df: Any) -> int:
    from pyspark.sql.functions import col

    return int(df.where(col("total") > THRESHOLD).count())


def act_aggregate(df: Any) -> list[list[int]]:
    from pyspark.sql.functions import col
    from pyspark.sql.functions import max as max_
    from pyspark.sql.functions import sum as sum_

    rows = df.groupBy((col("g") % 100).alias("b")).agg(
        sum_("total"), max_("best"), sum_("n")).collect()
    return sorted([int(x) for x in r] for r in rows)


def act_top(df: Any) -> list[list[int]]:
    from pyspark.sql.functions import desc

    return [[int(r["g"]), int(r["total"]), int(r["n"]), int(r["best"])]
            for r in df.orderBy(desc("total"), "g").limit(20).collect()]


RUN: dict[str, Callable[[Any], Any]] = {"count": act_count, "aggregate": act_aggregate,
                                         "top-N": act_top}


# -- helpers -----------------------------------------------------------------------------------

def session(tmp: Path, app_name: str, suffix: str = "") -> Any:
    return steward_session(tmp, app_name, **{
        "spark.driver.memory": "2g",
        "spark.steward.local.dir": str(tmp / f"steward-local{suffix}"),
        "spark.local.dir": str(tmp / f"spark-local{suffix}")})


def settle(sc: Any) -> None:
    """Untimed, before every timed step: a tiny job, dirty pages written back."""
    sc.parallelize(range(4), 4).map(lambda x: x).collect()
    os.sync()


def executor_dirs(sc: Any) -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()) / "work" / sc.applicationId


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- executor loss -----------------------------------------------------------------------------

def executor_pids(app_id: str) -> dict[int, str]:
    """pid -> executor id of this application's executor JVMs."""
    out = subprocess.run(["pgrep", "-af", f"CoarseGrainedExecutorBackend.*{app_id}"],
                         capture_output=True, text=True).stdout
    pids: dict[int, str] = {}
    for line in out.splitlines():
        pid, _, cmd = line.partition(" ")
        if "pgrep" in cmd:
            continue
        found = re.search(r"--executor-id\s+(\S+)", cmd)
        pids[int(pid)] = found.group(1) if found else "?"
    return pids


def block_managers(sc: Any) -> set[str]:
    """host:port of every block manager the driver knows (the driver's own included)."""
    status = sc._jsc.sc().getExecutorMemoryStatus()
    return {str(k) for k in sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        status.keySet())}


def cached_partitions(sc: Any) -> int:
    """Partitions of cached RDDs the driver knows of (only ``df.cache()``'s when called)."""
    return sum(int(info.numCachedPartitions()) for info in sc._jsc.sc().getRDDStorageInfo())


def kill_executor(sc: Any, timeout: float = 180.0) -> dict[str, Any]:
    """SIGKILLs the executor of lowest id and waits until its replacement has registered."""
    app_id = sc.applicationId
    pids = executor_pids(app_id)
    assert len(pids) == 2, f"expected 2 executor JVMs of {app_id}, found {pids}"
    victim = min(pids, key=lambda p: (len(pids[p]), pids[p]))
    before = block_managers(sc)
    assert len(before) == 3, f"expected the driver and 2 executors, found {before}"
    cached_before = cached_partitions(sc)
    os.kill(victim, signal.SIGKILL)
    with Timer() as waited:
        deadline = time.monotonic() + timeout
        while True:
            now = executor_pids(app_id)
            managers = block_managers(sc)
            if (len(now) == 2 and victim not in now and len(managers) == 3
                    and managers != before):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"FAIL: no replacement executor within {timeout:.0f}s "
                                 f"(executors {now}, block managers {managers})")
            time.sleep(0.2)
    return {"pid": victim, "executor": pids[victim], "replacement_s": waited.seconds,
            "replacement": sorted(set(now.values()) - set(pids.values())),
            "cached_partitions_before": cached_before,
            "cached_partitions_after": cached_partitions(sc)}


def warm_executors(spark: Any, inputs: Path) -> None:
    """Untimed: a job over the input files (Parquet scan, shuffle, aggregate, no UDF, no cache)
    that gives every executor, a new one included, tasks of the code paths the actions use."""
    from pyspark.sql.functions import col

    spark.read.parquet(str(inputs / "fact")).groupBy((col("g") % 100).alias("b")).agg(
        {"v": "sum"}).collect()


# -- the second application --------------------------------------------------------------------

def second_app(tmp: Path) -> int:
    """Runs in the subprocess: reuse of the shared cache vs recompute, JSON on stdout."""
    import spark_steward

    spark = session(tmp, "bench-cache-second", "-2")
    sc = spark.sparkContext
    dirs = executor_dirs(sc)
    action = RUN[LOSS_ACTION]
    try:
        for _ in range(LOSS_WARMUPS):  # a new application's JVMs: class loading and JIT
            settle(sc)
            warm_executors(spark, tmp / "input")
        act_count(make_df(spark, tmp / "input"))  # untimed, as the first application warmed up
        # Both DataFrames are built (plan and input schema, no job) before the timers.
        shared_df, plain_df = make_df(spark, tmp / "input"), make_df(spark, tmp / "input")
        settle(sc)
        with Timer() as reuse:
            t = spark_steward.cache(shared_df, shared=True)
            reused_rows = action(t)
        entry = t._steward_record.entry  # which application materialized what we read
        settle(sc)
        with Timer() as recompute:
            plain_rows = action(plain_df)
        out = {"app_id": sc.applicationId, "reuse_s": reuse.seconds,
               "recompute_s": recompute.seconds,
               "storage_key": t.storage_key, "materialized_by": entry.app_id if entry else None,
               "reused_rows": reused_rows, "plain_rows": plain_rows}
    finally:
        spark.stop()
        shutil.rmtree(dirs, ignore_errors=True)
    print(json.dumps(out), flush=True)
    return 0


def run_second_app(tmp: Path, rows: int, dim_rows: int) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--second-app", str(tmp),
           "--rows", str(rows), "--dim-rows", str(dim_rows)]
    with Timer() as whole:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"FAIL: the second application exited with {done.returncode}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1])
    result["process_s"] = whole.seconds
    return result


# -- the shared key and reuse, in rounds (issue 33) ---------------------------------------------

KEY_WARM_RUNS = 10


def shared_first(tmp: Path) -> int:
    """Runs in a subprocess: the shared key's cost against ``semanticHash``, then materializes."""
    import statistics

    import spark_steward
    from spark_steward.tables.service import TableService

    spark = session(tmp, "bench-cache-key", "-1")
    sc = spark.sparkContext
    dirs = executor_dirs(sc)
    try:
        settle(sc)
        warm_executors(spark, tmp / "input")
        df, twin = make_df(spark, tmp / "input"), make_df(spark, tmp / "input")
        service = spark_steward.runtime(spark).service(TableService)
        table = spark_steward.cache(df, shared=True)
        record = table._steward_record
        with Timer() as peer_cold:
            twin.semanticHash()
        with Timer() as key_cold:
            key = service._key_for(record)
        key_warm, peer_warm = [], []
        for _ in range(KEY_WARM_RUNS):
            with Timer() as t:
                assert service._key_for(record) == key
            key_warm.append(t.seconds)
            with Timer() as t:
                twin.semanticHash()
            peer_warm.append(t.seconds)
        rows = act_count(table)  # materializes the shared table for the second application
        out = {"app_id": sc.applicationId, "key": key, "key_cold_s": key_cold.seconds,
               "key_warm_s": statistics.median(key_warm), "peer_cold_s": peer_cold.seconds,
               "peer_warm_s": statistics.median(peer_warm), "count": rows,
               "materialized": table.storage_key, "input_files": len(df.inputFiles())}
    finally:
        spark.stop()
        shutil.rmtree(dirs, ignore_errors=True)
    print(json.dumps(out), flush=True)
    return 0


def _spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    ordered = sorted(values)
    mid = ordered[len(ordered) // 2] if len(ordered) % 2 else \
        (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
    return (f"{mid * scale:.{digits}f} [{ordered[0] * scale:.{digits}f}.."
            f"{ordered[-1] * scale:.{digits}f}]")


def shared_rounds(args: argparse.Namespace) -> int:
    import spark_steward

    base = Path(tempfile.mkdtemp(prefix="bench-cache-shared-"))
    rounds: list[dict[str, Any]] = []
    try:
        spark = session(base, "bench-cache-inputs")
        progress(f"writing inputs: {args.rows:,} fact rows in {args.fact_files} files, "
                 f"{args.dim_rows:,} dimension rows (spark-steward {spark_steward.__file__})")
        write_inputs(spark, base / "input", args.rows, args.dim_rows, args.fact_files)
        spark.stop()
        for r in range(args.shared_rounds):
            tmp = base / f"round-{r}"
            tmp.mkdir()
            (tmp / "input").symlink_to(base / "input")
            cmd = [sys.executable, os.path.abspath(__file__), "--shared-first", str(tmp)]
            done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            if done.returncode != 0:
                raise SystemExit(f"FAIL: round {r}: the first application exited with "
                                 f"{done.returncode}")
            first = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
            second = run_second_app(tmp, args.rows, args.dim_rows)
            if second["reused_rows"] != second["plain_rows"]:
                raise SystemExit(f"FAIL: round {r}: reused rows differ from recomputed rows")
            reused = second["storage_key"] == first["materialized"]
            progress(f"round {r}: key cold {first['key_cold_s'] * 1e3:.1f} ms, warm "
                     f"{first['key_warm_s'] * 1e3:.1f} ms (semanticHash "
                     f"{first['peer_cold_s'] * 1e3:.1f} / {first['peer_warm_s'] * 1e3:.1f} ms),"
                     f" {first['input_files']} input files; second app reuse "
                     f"{second['reuse_s']:.3f}s vs recompute {second['recompute_s']:.3f}s"
                     f"{'' if reused else ' (NOT reused: ' + str(second['storage_key']) + ')'}")
            rounds.append({"first": first, "second": second, "reused": reused})
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def col(f: Callable[[dict[str, Any]], float]) -> list[float]:
        return [f(r) for r in rounds]

    print(f"\nbench/cache.py --shared-rounds {args.shared_rounds} ({args.rows:,} fact rows in "
          f"{rounds[0]['first']['input_files']} input files + Python UDF; medians [min..max])")
    rows = [("shared key, cold (first in the app) ms", lambda r: r["first"]["key_cold_s"], 1e3, 1),
            ("shared key, warm ms", lambda r: r["first"]["key_warm_s"], 1e3, 1),
            ("semanticHash (Spark), cold ms", lambda r: r["first"]["peer_cold_s"], 1e3, 1),
            ("semanticHash (Spark), warm ms", lambda r: r["first"]["peer_warm_s"], 1e3, 1),
            ("key / semanticHash, warm",
             lambda r: r["first"]["key_warm_s"] / r["first"]["peer_warm_s"], 1.0, 2),
            ("second app: reuse s", lambda r: r["second"]["reuse_s"], 1.0, 3),
            ("second app: recompute s", lambda r: r["second"]["recompute_s"], 1.0, 3),
            ("second app: recompute / reuse",
             lambda r: r["second"]["recompute_s"] / r["second"]["reuse_s"], 1.0, 2)]
    for label, pick, scale, digits in rows:
        print(f"{label:<40} {_spread(col(pick), scale, digits)}")
    key_cold = sorted(col(lambda r: r["first"]["key_cold_s"]))[len(rounds) // 2]
    print(f"{'PASS' if key_cold <= 0.05 else 'FAIL'}  shared key on a plan with 50 input files "
          f"and a UDF <= 50 ms (cold median): {key_cold * 1e3:.1f} ms")
    print(f"{'PASS' if all(r['reused'] for r in rounds) else 'FAIL'}  every second application "
          "reused the first's table")
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=2) + "\n")
    return 0


# -- the driver --------------------------------------------------------------------------------

def _du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def stored_bytes(spark: Any, variant: str, target: Any, copy: Path) -> int:
    """What ``variant``'s cache keeps on disk once materialized: the DISK_ONLY blocks as the
    block managers report them, the Parquet copy's files, the steward table's data folder."""
    import spark_steward
    from spark_steward.tables.service import TableService

    if variant == "disk":
        return sum(int(info.diskSize()) for info in
                   spark.sparkContext._jsc.sc().getRDDStorageInfo())
    if variant == "parquet":
        return _du(copy)
    if variant == "steward":
        store = spark_steward.runtime().service(TableService).store
        found = store.lookup(target.storage_key) if store and target.storage_key else None
        return _du(Path(spark_steward.runtime().storage.path(store.data_rel(found[0])))) \
            if found else 0
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim-rows", type=int, default=10_000)
    parser.add_argument("--keep", action="store_true",
                        help="keep the temp dir (inputs, Parquet copy, storage dir)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON ('-': "
                        "stdout)")
    parser.add_argument("--second-app", metavar="TMP", help=argparse.SUPPRESS)
    parser.add_argument("--shared-rounds", type=int, metavar="N",
                        help="only the shared key's cost and second-application reuse, N rounds")
    parser.add_argument("--fact-files", type=int, default=50,
                        help="input files of the fact table with --shared-rounds (50)")
    parser.add_argument("--shared-first", metavar="TMP", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.pop("SPARK_CONF_DIR", None)
    if args.second_app:
        return second_app(Path(args.second_app))
    if args.shared_first:
        return shared_first(Path(args.shared_first))
    if args.shared_rounds:
        return shared_rounds(args)
    load_before = Path("/proc/loadavg").read_text().split()[:3]

    tmp = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    spark = None
    dirs: Path | None = None
    mat: dict[str, float] = {}
    stored: dict[str, int] = {}  # bytes each cache keeps on disk after materializing
    later: dict[str, dict[str, float]] = {v: {} for v in VARIANTS}
    expected: dict[str, Any] = {}
    loss_before: dict[str, float] = {}
    loss_after: dict[str, float] = {}
    steward_key = ""
    try:
        from pyspark import StorageLevel

        import spark_steward

        spark = session(tmp, "bench-cache")
        sc = spark.sparkContext
        app_id = sc.applicationId
        dirs = executor_dirs(sc)
        assert spark_steward.is_enabled(spark), "spark-steward is not on in this session"
        settle(sc)  # the JVMs' first job

        inputs = tmp / "input"
        progress(f"writing inputs: {args.rows:,} fact rows, {args.dim_rows:,} dimension rows")
        write_inputs(spark, inputs, args.rows, args.dim_rows)
        settle(sc)
        with Timer() as t:
            act_count(make_df(spark, inputs))  # untimed warm-up of the whole pipeline
        progress(f"warm-up count {t.seconds:.3f}s")

        def check(what: str, action: str, got: Any) -> None:
            if got != expected[action]:
                raise SystemExit(f"FAIL: {what}: {action} returned {str(got)[:300]}, the "
                                 f"uncached DataFrame {str(expected[action])[:300]}")

        copy = tmp / "parquet-copy"
        held: dict[str, Any] = {}
        for variant in VARIANTS:
            df = make_df(spark, inputs)
            settle(sc)
            with Timer() as t:
                if variant == "none":
                    target = df
                elif variant == "memory":
                    target = df.cache()
                elif variant == "disk":
                    target = df.persist(StorageLevel.DISK_ONLY)
                elif variant == "parquet":
                    df.write.parquet(str(copy))
                    target = spark.read.parquet(str(copy))
                else:
                    target = spark_steward.cache(df, shared=True)
                got = act_count(target)
            mat[variant] = t.seconds
            stored[variant] = stored_bytes(spark, variant, target, copy)
            if variant == "none":
                expected["count"] = got
            check(f"{variant} materialization", "count", got)
            progress(f"{variant:<8} materialize {t.seconds:7.3f}s")
            for action in ACTIONS:
                settle(sc)
                with Timer() as t:
                    got = RUN[action](target)
                later[variant][action] = t.seconds
                if variant == "none":
                    expected[action] = got
                check(f"{variant} later", action, got)
                progress(f"{variant:<8} {action:<11} {t.seconds:7.3f}s  rows ok")
            if variant in ("memory", "disk"):
                target.unpersist(blocking=True)
            elif variant in ("parquet", "steward"):
                held[variant] = target
        t_steward = held["steward"]
        steward_key = t_steward.storage_key or ""
        if not steward_key.startswith("s-"):
            progress(f"WARNING: the steward table is not shared (key {steward_key!r})")

        # Executor loss.
        loss_act = RUN[LOSS_ACTION]
        memory = make_df(spark, inputs).cache()
        act_count(memory)  # untimed: df.cache() materialized again
        loss_order = ("steward", "parquet", "memory")
        loss_targets = {"steward": t_steward, "parquet": held["parquet"], "memory": memory}
        for variant in loss_order:
            runs = []
            for _ in range(LOSS_BEFORE_RUNS):  # the steady state: median of three
                settle(sc)
                with Timer() as t:
                    got = loss_act(loss_targets[variant])
                check(f"{variant} before the executor loss", LOSS_ACTION, got)
                runs.append(t.seconds)
            loss_before[variant] = sorted(runs)[len(runs) // 2]
            progress(f"{variant:<8} {LOSS_ACTION} before loss {loss_before[variant]:7.3f}s "
                     f"(median of {runs})")
        killed = kill_executor(sc)
        progress(f"killed executor {killed['executor']} (pid {killed['pid']}); executor "
                 f"{', '.join(killed['replacement'])} registered after "
                 f"{killed['replacement_s']:.1f}s; df.cache() partitions cached: "
                 f"{killed['cached_partitions_before']} before, "
                 f"{killed['cached_partitions_after']} after")
        for _ in range(LOSS_WARMUPS):  # the new executor's JVM: class loading and JIT
            settle(sc)
            warm_executors(spark, inputs)
        for variant in loss_order:
            settle(sc)
            with Timer() as t:
                got = loss_act(loss_targets[variant])
            check(f"{variant} after the executor loss", LOSS_ACTION, got)
            loss_after[variant] = t.seconds
            progress(f"{variant:<8} {LOSS_ACTION} after loss  {t.seconds:7.3f}s")
        memory.unpersist(blocking=True)

        # The first application ends; its shared table stays for the second one.
        released = spark_steward.close(spark)
        spark.stop()
        spark = None
        shutil.rmtree(dirs, ignore_errors=True)
        dirs = None
        progress(f"first application stopped ({released} cached table(s) released); "
                 "second application ...")
        second = run_second_app(tmp, args.rows, args.dim_rows)
        check("second application, reusing", LOSS_ACTION, second["reused_rows"])
        check("second application, recomputing", LOSS_ACTION, second["plain_rows"])
        progress(f"second app: reuse {second['reuse_s']:.3f}s, recompute "
                 f"{second['recompute_s']:.3f}s, rows ok")
    finally:
        if spark is not None:
            spark.stop()
        if dirs is not None:
            shutil.rmtree(dirs, ignore_errors=True)
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    # -- report ----------------------------------------------------------------------------
    pq = "parquet"
    print(f"\nbench/cache.py  ({args.rows:,}-row fact join {args.dim_rows:,}-row dimension + "
          f"Python UDF + groupBy -> {expected_rows(args.rows):,} rows; local-cluster[2,1,1024]; "
          "one run)")
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
    head = f"{'variant':<38} {'materialize':>11}" + "".join(f" {a:>9}" for a in ACTIONS)
    print(f"{head}   (seconds; later actions after materialization)")
    for v in VARIANTS:
        print(f"{LABELS[v]:<38} {mat[v]:>11.3f}"
              + "".join(f" {later[v][a]:>9.3f}" for a in ACTIONS))
    print("ratios to the Parquet round trip")
    for v in VARIANTS:
        print(f"{LABELS[v]:<38} {mat[v] / mat[pq]:>11.3f}"
              + "".join(f" {later[v][a] / later[pq][a]:>9.3f}" for a in ACTIONS))
    print(f"steward materialization / df.cache()'s: {mat['steward'] / mat['memory']:.3f}, "
          f"/ persist(DISK_ONLY)'s: {mat['steward'] / mat['disk']:.3f}")
    print(f"bytes on disk: persist(DISK_ONLY) blocks {stored['disk'] / 1e6:.2f} MB, Parquet copy "
          f"{stored['parquet'] / 1e6:.2f} MB, spark-steward table {stored['steward'] / 1e6:.2f} MB"
          f" ({stored['steward'] / stored['disk']:.2f}x DISK_ONLY, "
          f"{stored['steward'] / stored['parquet']:.2f}x the Parquet copy)")
    print(f"results: every variant equals the uncached DataFrame (count = {expected['count']:,}"
          f", aggregate {len(expected['aggregate'])} rows, top-N {len(expected['top-N'])} rows)")

    print(f"\nexecutor loss: executor {killed['executor']} SIGKILLed, replacement registered "
          f"after {killed['replacement_s']:.1f}s (then an untimed warm-up job); df.cache() "
          f"partitions cached {killed['cached_partitions_before']} before, "
          f"{killed['cached_partitions_after']} after; {LOSS_ACTION}, run in the order "
          f"{', '.join(loss_order)}")
    print(f"{'variant':<38} {'before s':>9} {'after s':>9} {'after/before':>12}")
    for v in loss_order:
        print(f"{LABELS[v]:<38} {loss_before[v]:>9.3f} {loss_after[v]:>9.3f} "
              f"{loss_after[v] / loss_before[v]:>12.3f}")

    reuse_x = second["recompute_s"] / second["reuse_s"]
    reused = second["materialized_by"] == app_id
    print(f"\nsecond application ({second['app_id']}, process {second['process_s']:.1f}s), "
          f"{LOSS_ACTION}:")
    print(f"{'cache(df, shared=True) + action':<38} {second['reuse_s']:>9.3f}   reads "
          f"{second['storage_key']}, materialized by "
          f"{'the first application' if reused else second['materialized_by']}")
    print(f"{'recomputed, no cache':<38} {second['recompute_s']:>9.3f}")
    print(f"{'recompute / reuse':<38} {reuse_x:>9.3f}")

    checks = [("steward materialization <= 1.1x the Parquet round trip",
               mat["steward"] / mat[pq] <= 1.1,
               f"{mat['steward'] / mat[pq]:.3f} (vs df.cache(): "
               f"{mat['steward'] / mat['memory']:.3f})")]
    for a in ACTIONS:
        r = later["steward"][a] / later[pq][a]
        checks.append((f"steward later {a} <= 1.1x the same on the Parquet copy", r <= 1.1,
                       f"{r:.3f}"))
    r = loss_after["steward"] / loss_before["steward"]
    checks.append(("steward after the executor loss <= 1.2x before", r <= 1.2,
                   f"{r:.3f} (df.cache(): {loss_after['memory'] / loss_before['memory']:.3f})"))
    checks.append(("second application reuses the first's shared cache", reused,
                   str(second["storage_key"])))
    checks.append(("second-application reuse >= 10x faster than recomputing", reuse_x >= 10,
                   f"{reuse_x:.2f}x"))
    checks.append(("results equal to the uncached DataFrame (every variant, action, app)", True,
                   "checked"))
    for label, ok, value in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}: {value}")

    if args.json:
        figures = {"rows": args.rows, "dim_rows": args.dim_rows, "result_rows":
                   expected_rows(args.rows), "load_before": load_before,
                   "load_after": load_after, "materialize_s": mat, "later_s": later,
                   "loss": {"action": LOSS_ACTION, "order": loss_order,
                            "before_s": loss_before, "after_s": loss_after,
                            "killed": {k: v for k, v in killed.items()}},
                   "second_app": {k: v for k, v in second.items() if not k.endswith("_rows")},
                   "steward_key": steward_key,
                   "checks": [{"target": label, "pass": ok, "value": value}
                              for label, ok, value in checks]}
        text = json.dumps(figures, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


def expected_rows(rows: int) -> int:
    return min(rows, max(1, rows // 10))


if __name__ == "__main__":
    sys.exit(main())
