"""The same workloads through classic PySpark and through Spark Connect, with and without
spark-steward (issue 35): a merged checkpoint saved and restored, and a cached table reused.
The issue's target: each steward/plain ratio through Connect within 10 % of the same ratio in
classic, i.e. the quotient of the two ratios in 0.9..1.1.

Four applications per round (``--rounds``, 3 by default; the order of the four rotates per
round), each a fresh one on ``local-cluster[1,1,1024]``:

- **classic plain**: ``spark-submit`` of this file in child mode, no spark-steward flags,
  ``SPARK_STEWARD_AUTOLOAD=0``, ``spark.checkpoint.dir`` set (Spark's ``df.checkpoint()`` needs
  one);
- **classic steward**: ``spark-submit`` with the flags of ``spark-steward conf --storage URL
  --local-dir DIR``, autoload on (the runtime attaches in the driver's Python: checked, and its
  ``attached to <app id>`` line);
- **connect plain**: ``sbin/start-connect-server.sh`` with ``spark.checkpoint.dir`` set, and a
  client process (``SparkSession.builder.remote(url)``) running the same workload code;
- **connect steward**: the server with the flags of ``spark-steward conf --server --storage URL
  --local-dir DIR`` (the runtime beside the server; its ``attached to <app id>`` line is
  checked), the client with only ``import spark_steward`` (the thin client: every
  ``spark_steward`` call is a Connect command run on the server in the client's session).

The workload code (:func:`workloads`) is one function for all four. Its data: ``spark.range(0,
--rows, 1, 8)`` with six columns (longs, a double, a string, a hash). After a warm-up job
(``spark.range(1000).count()``: the executor has registered, so its start is outside the
workload timings), ``--reps`` (3) times, in this order:

1. **checkpoint**: steward ``cp = spark_steward.checkpoints("bench-<rep>"); cp.save(df)`` (file
   merging is on by default: the 8 partitions become segments of a few files; a new series per
   repetition, so no segment of an earlier save is reused), then ``cp.latest()``; plain
   ``df.checkpoint()`` (Spark's reliable, eager checkpoint). Then one aggregate over what came
   back (count, sums of every column, an exact decimal sum of the double, the max string).
   Timed: the save (``save`` / ``checkpoint()``), the restore with the aggregate, and both.
2. **cache**: steward ``t = spark_steward.cache(df)``, plain ``t = df.cache()``; then ``--queries``
   (5) different aggregates over ``t``. The first materializes the cache (steward: Parquet files
   in the storage dir; plain: the executor's blocks), the later ones read it. Timed: the call
   and the first query, the later queries, and all. Then (untimed) ``spark_steward.close()`` /
   ``t.unpersist(blocking=True)``. With ``--transparent``, steward caches as plain does, with
   ``df.cache()``, under ``spark.steward.cache.transparent=true`` (classic: its hooks; Connect:
   the server's ``TransparentCaches`` rule), and releases with ``unpersist``.

Every answer of every repetition in every application must equal the first one's, and the
counts and ``sum(id)`` their closed forms, or the run fails. The workload figures are
wall-clock seconds measured inside the driver or client around each workload: the first
repetition (what an application's first checkpoint and cached table cost, JIT and first-use
costs included) and the median of the later ones (steady state). Besides, the time a user meets
in a fresh application: from the launch (``spark-submit``; ``start-connect-server.sh``, whose
client was started just before and polls the port) until the first checkpoint workload, and
the first cache workload, is done (the warm-up job included).

Printed: median (min..max) over the rounds of each figure; per round the ratios steward/plain in
classic and in Connect and their quotient (Connect's over classic's), as medians (min..max) of
the per-round values; ``--json PATH`` writes every application's figures and the summary.

Others' CPU: the machine has two cores, and whatever else runs shows up in every figure. Before
each application the run waits (up to ``--quiet-timeout`` s) until the processes it did not
start use under 10 % of a core over 5 s; while an application runs, their CPU seconds are
sampled every second, and an application during which they used more than ``--max-foreign``
CPU-s (5) is run again (up to ``--attempts``, 3, then kept; the discarded ones are in the JSON).

Hygiene as in ``bench/connect.py``, whose helpers this uses: loopback only, an empty
``SPARK_CONF_DIR``, every work dir (logs, Spark's scratch space, spark-steward's storage and local
dir, the checkpoint dir) in one temp dir removed at the end; each launch leads a process group of
its own (groups its processes start, such as PySpark's daemon on an executor, are added), and
whatever is still running there gets SIGKILL after each application and on failure, Ctrl-C or
SIGTERM.

    python bench/connect_workloads.py [--rounds 3] [--rows 3000000] [--reps 3] [--queries 5]
                                      [--modes classic,connect] [--max-foreign 5]
                                      [--json PATH]
    python bench/connect_workloads.py --report A.json B.json   # earlier runs' rounds pooled

On this 2-core VM one application takes about 65 s with 3 million rows and 3 repetitions; 3
rounds take 15 minutes, 5 rounds 22, plus any wait for a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

# bench/connect.py, the start-up benchmark of issue 35: its process hygiene and report helpers.
from connect import (APP_TIMEOUT, ATTACH_TIMEOUT, COMMON_CONF, LOOPBACK, MASTER, MILESTONES,
                     STOP_TIMEOUT, Failure, Reaper, Terminated, Watch, alive, cell, clip,
                     _stat, conf_flags, connect_client_env, connect_command, forget_app,
                     free_port, load, pids, progress, server_pid_file, spark_env, spark_home,
                     stats, steward_flags, wait_for)

MODES = ("classic", "connect")
VARIANTS = ("plain", "steward")
#: ``--transparent``: the steward variant's cache workload uses ``df.cache()`` (set in main).
TRANSPARENT = False
PARTITIONS = 8
SERIES = "bench"
#: The DataFrame every application builds (``spark.range(0, rows, 1, PARTITIONS)``).
COLUMNS = ("id", "id % 1000 AS k", "(id * 7919) % 100003 AS v", "CAST(id AS DOUBLE) / 3 AS d",
           "concat('key-', CAST(id % 50000 AS STRING)) AS s", "hash(id) AS h")
#: The aggregate over the restored checkpoint: every column, exact (decimals as strings).
CHECK = ("count(*)", "sum(id)", "sum(k)", "sum(v)", "sum(h)", "max(s)",
         "CAST(sum(CAST(d AS DECIMAL(24, 4))) AS STRING)")
#: The aggregates over the cached table: select expressions, and None, "g" (grouped by ``g``)
#: or a filter.
QUERIES: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("count(*)", "sum(v)"), None),
    (("k % 10 AS g", "v", "h"), "g"),
    (("count(*)", "sum(id)", "max(v)"), "v < 1000"),
    (("max(s)", "min(s)", "count(DISTINCT k)"), None),
    (("CAST(sum(CAST(d AS DECIMAL(24, 4))) AS STRING)", "sum(h)", "min(h)"), None),
)


# -- the workloads: one code for the classic child and the Connect client -------------------------

def make_df(spark: Any, rows: int) -> Any:
    return spark.range(0, rows, 1, PARTITIONS).selectExpr(*COLUMNS)


def run_query(table: Any, index: int) -> list[list[Any]]:
    """Aggregate ``index`` of :data:`QUERIES` over ``table``, as JSON-able rows."""
    exprs, extra = QUERIES[index % len(QUERIES)]
    if extra is None:
        df = table.selectExpr(*exprs)
    elif extra == "g":  # a grouped one: 10 rows
        from pyspark.sql import functions as F

        df = table.selectExpr(*exprs).groupBy("g").agg(
            F.sum("v").alias("sum_v"), F.max("h").alias("max_h"), F.count("*").alias("n")) \
            .orderBy("g")
    else:
        df = table.where(extra).selectExpr(*exprs)
    return [list(row) for row in df.collect()]


def checkpoint_workload(spark: Any, steward: bool, rows: int, series: str) -> dict[str, Any]:
    """Saves the data, restores it and aggregates what was restored."""
    df = make_df(spark, rows)
    t0 = time.perf_counter()
    if steward:
        import spark_steward

        cp = spark_steward.checkpoints(series)
        cp.save(df)
        t1 = time.perf_counter()
        restored = cp.latest()
    else:
        restored = df.checkpoint()  # Spark's reliable checkpoint, eager
        t1 = time.perf_counter()
    t2 = time.perf_counter()
    answer = [list(row) for row in restored.selectExpr(*CHECK).collect()]
    t3 = time.perf_counter()
    return {"save_s": t1 - t0, "latest_s": t2 - t1, "aggregate_s": t3 - t2,
            "restore_s": t3 - t1, "checkpoint_s": t3 - t0, "answer": answer}


def cache_workload(spark: Any, steward: bool, rows: int, queries: int) -> dict[str, Any]:
    """Caches the data, then runs ``queries`` aggregates over the cached table; releases it
    (untimed)."""
    df = make_df(spark, rows)
    transparent = steward and TRANSPARENT
    if transparent:  # df.cache() itself, on spark-steward's path (classic hooks; Connect's rule)
        spark.conf.set("spark.steward.cache.transparent", "true")
    t0 = time.perf_counter()
    if steward and not transparent:
        import spark_steward

        table = spark_steward.cache(df)
    else:
        table = df.cache()
    t1 = time.perf_counter()
    answers, times = [], []
    for i in range(queries):
        q0 = time.perf_counter()
        answers.append(run_query(table, i))
        times.append(time.perf_counter() - q0)
    t2 = time.perf_counter()
    got = {"cache_call_s": t1 - t0, "query_s": times, "cache_first_s": t1 - t0 + times[0],
           "cache_rest_s": t2 - t1 - times[0], "cache_s": t2 - t0, "answers": answers}
    if steward and not transparent:
        import spark_steward

        got["materialized"] = bool(table.is_materialized)
        got["released"] = spark_steward.close()
    else:
        table.unpersist(blocking=True)
    return got


def workloads(spark: Any, steward: bool, rows: int, queries: int, reps: int) -> dict[str, Any]:
    """A warm-up job, then ``reps`` times the checkpoint and the cache workloads (each time the
    same data; steward saves into a new series each time, so nothing of an earlier save is
    reused); ``time.time()`` marks of the first repetition and every repetition's figures."""
    if steward:
        import spark_steward  # noqa: F401
    marks: dict[str, float] = {"start": time.time()}
    if spark.range(1000).count() != 1000:
        raise SystemExit("the warm-up job's count is wrong")
    marks["warm"] = time.time()
    got: dict[str, Any] = {"marks": marks, "checkpoint": [], "cache": []}
    for rep in range(reps):
        got["checkpoint"].append(checkpoint_workload(spark, steward, rows, f"{SERIES}-{rep}"))
        if rep == 0:
            marks["checkpoint_done"] = time.time()
        got["cache"].append(cache_workload(spark, steward, rows, queries))
        if rep == 0:
            marks["cache_done"] = time.time()
    return got


def classic_child(variant: str, rows: int, queries: int, reps: int, out: Path) -> int:
    """Child mode, run by spark-submit: the workloads in a classic driver."""
    script = time.time()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"bench-workloads-{variant}").getOrCreate()
    session = time.time()
    runtime_module = sys.modules.get("spark_steward.kernel.runtime")
    in_process = bool(runtime_module and runtime_module.current_runtime())
    if in_process != (variant == "steward"):
        raise SystemExit(f"the {variant} driver has {'a' if in_process else 'no'} runtime "
                         "in-process")
    got = workloads(spark, variant == "steward", rows, queries, reps)
    got.update(script=script, session=session, app_id=spark.sparkContext.applicationId)
    spark.stop()
    out.write_text(json.dumps(got))
    return 0


def connect_client(variant: str, url: str, rows: int, queries: int, reps: int,
                   out: Path) -> int:
    """Child mode: the Connect client. Imports first, waits for the port, then the workloads."""
    from pyspark.sql import SparkSession
    import pyspark.sql.connect.session  # noqa: F401  (the client's imports, before the server)

    if variant == "steward":
        import spark_steward  # noqa: F401  (the thin client: nothing else of spark-steward here)
    host, port = url.removeprefix("sc://").split(":")
    deadline = time.monotonic() + APP_TIMEOUT
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"the server at {url} did not accept within {APP_TIMEOUT} s")
            time.sleep(0.05)
    accepting = time.time()
    spark = SparkSession.builder.remote(url).getOrCreate()
    session = time.time()
    got = workloads(spark, variant == "steward", rows, queries, reps)
    got.update(accepting=accepting, session=session)
    spark.stop()
    out.write_text(json.dumps(got))
    return 0


# -- the applications ----------------------------------------------------------------------------

class Foreign:
    """CPU seconds of every process this run did not start, sampled each second while an
    application runs: what else shared the two cores (short-lived processes between two
    samples are missed).

    A process is this run's when it is this one or one of its descendants, or in a process
    group of this run's launches, or descends from one. PySpark's daemon on an executor starts
    a process group of its own, and a Connect server's JVM is no descendant of this process
    (``spark-daemon.sh`` leaves it to init): such groups are added to the reaper's, so its
    sweep reaches them too."""

    def __init__(self, reaper: Reaper) -> None:
        self.reaper = reaper
        self.seconds = 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, float]:
        """CPU seconds per process that is not this run's."""
        tick = os.sysconf("SC_CLK_TCK")
        parent: dict[int, int] = {}
        group: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for pid in pids():
            fields = _stat(pid)
            if fields is not None:
                parent[pid], group[pid] = int(fields[1]), int(fields[2])
                cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
        me = os.getpid()
        known: dict[int, bool] = {}

        def ours(pid: int) -> bool:
            chain = []
            found = False
            while pid > 1 and pid in parent:
                if pid in known:
                    found = known[pid]
                    break
                chain.append(pid)
                if pid == me or group[pid] in self.reaper.groups:
                    found = True
                    break
                pid = parent[pid]
            for p in chain:
                known[p] = found
            return found

        got = {}
        for pid, seconds in cpu.items():
            if not ours(pid):
                got[pid] = seconds
            elif pid != me and group[pid] == pid and pid not in self.reaper.groups:
                self.reaper.groups.add(pid)  # a group leader of this run's: swept with it
        return got

    def _run(self) -> None:
        before = self._sample()
        while not self.done.wait(1.0):
            now = self._sample()
            self.seconds += sum(max(0.0, cpu - before.get(pid, cpu)) for pid, cpu in now.items())
            before = now

    def __enter__(self) -> "Foreign":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def wait_quiet(reaper: Reaper, timeout: float, window: float = 5.0,
               limit: float = 0.5) -> float:
    """Waits until others used at most ``limit`` CPU seconds in a ``window`` (10 % of a core),
    up to ``timeout`` seconds; returns how long it waited."""
    start = time.monotonic()
    while True:
        with Foreign(reaper) as foreign:
            time.sleep(window)
        if foreign.seconds <= limit or time.monotonic() - start >= timeout:
            return time.monotonic() - start - window


def checkpoint_files(work: Path) -> dict[str, int]:
    """spark-steward's checkpoint data files in the storage dir (every series), by kind."""
    root = work / "steward-storage" / "checkpoints"
    return {kind: sum(1 for p in (root / kind).rglob("*") if p.is_file())
            for kind in ("merged", "data")}


def child_args(variant: str, args: argparse.Namespace, out: Path) -> list[str]:
    return ["--variant", variant, "--rows", str(args.rows), "--queries", str(args.queries),
            "--reps", str(args.reps), "--out", str(out),
            *(["--transparent"] if args.transparent else [])]


def classic_app(variant: str, root: Path, work: Path, reaper: Reaper,
                args: argparse.Namespace) -> dict[str, Any]:
    steward = variant == "steward"
    env = spark_env(root, work, autoload=steward)
    conf = [*COMMON_CONF, f"spark.local.dir={work / 'spark-local'}"]
    if not steward:
        conf.append(f"spark.checkpoint.dir={work / 'checkpoints'}")
    out = work / "child.json"
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", MASTER, *conf_flags(conf),
           *(steward_flags(work, server=False) if steward else []), os.path.abspath(__file__),
           "--child", "classic", *child_args(variant, args, out)]
    watch = Watch(MILESTONES)
    record: dict[str, Any] = {"mode": "classic", "variant": variant, "load_before": load()}
    proc: subprocess.Popen[str] | None = None
    launched = time.time()
    try:
        launched = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
        reaper.groups.add(proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        watch.follow_pipe(proc.stdout)
        watch.follow_pipe(proc.stderr)
        try:
            proc.wait(timeout=APP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure(f"the classic {variant} application ran over {APP_TIMEOUT:.0f} s:\n"
                          f"{watch.last_lines()}") from None
        record["exit_s"] = time.time() - launched
        watch.stop()
        if proc.returncode != 0 or not out.is_file():
            raise Failure(f"the classic {variant} application exited {proc.returncode}:\n"
                          f"{watch.last_lines()}")
        got = json.loads(out.read_text())
        attached = watch.first("attached")
        if steward and (attached is None or attached[1] != got["app_id"]):
            raise Failure(f"no 'attached to {got['app_id']}' line: {attached}")
        if not steward and attached is not None:
            raise Failure("a runtime attached to the plain application")
        record.update(app_id=got["app_id"], session_s=got["session"] - launched)
        record.update(figures(got, launched))
        if steward:
            record["checkpoint_files"] = checkpoint_files(work)
    finally:
        watch.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
        record["killed_after"] = reaper.sweep()
        forget_app(watch)
    record["load_after"] = load()
    return record


def connect_app(variant: str, root: Path, work: Path, reaper: Reaper,
                args: argparse.Namespace) -> dict[str, Any]:
    steward = variant == "steward"
    env = spark_env(root, work, autoload=False)
    port = free_port()
    url = f"sc://{LOOPBACK}:{port}"
    conf = [] if steward else [f"spark.checkpoint.dir={work / 'checkpoints'}"]
    cmd = connect_command(work, port, steward_flags(work, server=True) if steward else [], conf)
    pid_file = server_pid_file(work, env)
    out = work / "client.json"
    watch = Watch(MILESTONES)
    record: dict[str, Any] = {"mode": "connect", "variant": variant, "load_before": load()}
    server = -1
    procs: list[subprocess.Popen[bytes]] = []
    launched = time.time()
    try:
        with open(work / "client.log", "wb") as client_log, \
                open(work / "start-script.log", "wb") as script_log:
            client = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--child", "connect", "--url", url,
                 *child_args(variant, args, out)],
                env=connect_client_env(autoload_off=not steward), stdout=client_log,
                stderr=subprocess.STDOUT, start_new_session=True)
            reaper.groups.add(client.pid)
            procs.append(client)
            launched = time.time()
            script = subprocess.Popen(cmd, env=env, stdout=script_log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            reaper.groups.add(script.pid)
            procs.append(script)
        watch.follow_files(work / "logs", "*.out")

        def server_alive() -> None:
            nonlocal server
            if server < 0 and pid_file.is_file() and pid_file.read_text().strip():
                server = int(pid_file.read_text())
            if server > 0 and not alive(server):
                raise Failure(f"the {variant} Connect server died:\n{watch.last_lines()}")

        def client_done() -> bool:
            if client.poll() is None:
                return False
            if client.returncode != 0 or not out.is_file():
                raise Failure(f"the {variant} client exited {client.returncode}:\n"
                              f"{clip((work / 'client.log').read_text(errors='replace'))}\n"
                              f"server log:\n{watch.last_lines()}")
            return True

        wait_for(client_done, APP_TIMEOUT, f"the {variant} client's workloads", server_alive)
        got = json.loads(out.read_text())
        app = wait_for(lambda: watch.first("app"), 60, "the server's application id")[1]
        if steward:
            attached = wait_for(lambda: watch.first("attached"), ATTACH_TIMEOUT,
                                "the hosted runtime's 'attached to'", server_alive)
            if attached[1] != app:
                raise Failure(f"the runtime attached to {attached[1]}, the server runs {app}")
            record["attached_s"] = attached[0] - launched
        elif watch.first("attached") is not None:
            raise Failure("a runtime attached to the plain server")
        record.update(app_id=app, accepting_s=got["accepting"] - launched,
                      session_s=got["session"] - launched)
        record.update(figures(got, launched))
        server_alive()
        subprocess.run([str(spark_home() / "sbin" / "stop-connect-server.sh")], env=env,
                       capture_output=True, timeout=60, start_new_session=True)
        wait_for(lambda: not alive(server), STOP_TIMEOUT, "the server's exit")
        if steward:
            record["checkpoint_files"] = checkpoint_files(work)
    finally:
        watch.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        record["killed_after"] = reaper.sweep()
        forget_app(watch)
    record["load_after"] = load()
    return record


#: Each repetition's figures (seconds).
CHECKPOINT_FIELDS = ("save_s", "latest_s", "aggregate_s", "restore_s", "checkpoint_s")
CACHE_FIELDS = ("cache_call_s", "cache_first_s", "cache_rest_s", "cache_s")


def figures(got: dict[str, Any], launched: float) -> dict[str, Any]:
    """What a record keeps of a child's or client's output: the marks from the launch, every
    repetition, and per figure the first repetition's (``first_*``) and the median of the later
    ones' (``warm_*``)."""
    marks = got["marks"]
    record: dict[str, Any] = {
        "warm_job_s": marks["warm"] - launched,
        "launch_to_checkpoint_s": marks["checkpoint_done"] - launched,
        "launch_to_cache_s": marks["cache_done"] - launched,
        "checkpoint_reps": got["checkpoint"], "cache_reps": got["cache"]}
    for kind, fields in (("checkpoint", CHECKPOINT_FIELDS), ("cache", CACHE_FIELDS)):
        reps = got[kind]
        for field in fields:
            record[f"first_{field}"] = reps[0][field]
            record[f"warm_{field}"] = statistics.median(r[field] for r in reps[1:]) \
                if len(reps) > 1 else None
    return record


def check_answers(records: list[dict[str, Any]], rows: int) -> None:
    """Every repetition's answers in every application equal the first's, the counts and
    sums of ids equal their closed forms, and steward's tables were materialized."""
    first = records[0]
    [[count, sum_id, *_]] = first["checkpoint_reps"][0]["answer"]
    if (count, sum_id) != (rows, rows * (rows - 1) // 2):
        raise Failure(f"checkpoint aggregate: count {count}, sum(id) {sum_id} for {rows} rows")
    cached = first["cache_reps"][0]["answers"]
    if cached[0][0][0] != rows or cached[2][0][0] != _below(rows, 1000) \
            or sum(row[-1] for row in cached[1]) != rows:
        raise Failure(f"cache answers wrong: {cached[:3]}")
    want = {"checkpoint": first["checkpoint_reps"][0]["answer"], "cache": cached}
    for r in records:
        for rep, (ck, ca) in enumerate(zip(r["checkpoint_reps"], r["cache_reps"])):
            for what, answer in (("checkpoint", ck["answer"]), ("cache", ca["answers"])):
                if answer != want[what]:
                    raise Failure(f"{r['mode']} {r['variant']} (round {r['round'] + 1}, "
                                  f"repetition {rep + 1}) answered the {what} workload "
                                  f"differently from {first['mode']} {first['variant']}:\n"
                                  f"{answer}\n{want[what]}")
            if r["variant"] == "steward" and ca.get("materialized") is False:
                raise Failure(f"{r['mode']} steward: the cached table was not materialized")


def _below(rows: int, bound: int) -> int:
    """How many ids in range(rows) have (id * 7919) % 100003 < bound (100003 is prime)."""
    full, rest = divmod(rows, 100003)
    return full * bound + sum(1 for i in range(rest) if (i * 7919) % 100003 < bound)


# -- the report ----------------------------------------------------------------------------------

#: The workload figures of the tables: label, field (without its first_/warm_ prefix).
TIMES = (("checkpoint: save", "save_s"), ("restore + aggregate", "restore_s"),
         ("checkpoint total", "checkpoint_s"), ("cache: 1st query (materializes)", "cache_first_s"),
         ("later queries", "cache_rest_s"), ("cache total", "cache_s"))
#: steward's calls that are one command each through Connect (plain: nothing, or no call).
CALLS = (("cp.latest() call", "latest_s"), ("aggregate after it", "aggregate_s"),
         ("cache() call", "cache_call_s"))
FRESH = (("session ready", "session_s"), ("warm-up job done", "warm_job_s"),
         ("checkpoint workload done", "launch_to_checkpoint_s"),
         ("cache workload done", "launch_to_cache_s"))
QUOTIENT = (0.9, 1.1)


def values(records: list[dict[str, Any]], mode: str, variant: str, field: str) -> list[float]:
    return [float(r[field]) for r in records
            if r["mode"] == mode and r["variant"] == variant and r.get(field) is not None]


def ratios(records: list[dict[str, Any]], field: str) -> dict[str, list[float]]:
    """Per round: steward/plain in classic and in Connect, and Connect's over classic's."""
    by: dict[int, dict[tuple[str, str], dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["round"], {})[(r["mode"], r["variant"])] = r
    got: dict[str, list[float]] = {"classic": [], "connect": [], "connect/classic": []}
    for rnd in sorted(by):
        apps = by[rnd]
        per = {mode: apps[(mode, "steward")][field] / apps[(mode, "plain")][field]
               for mode in MODES if (mode, "steward") in apps and (mode, "plain") in apps
               and apps[(mode, "steward")].get(field) is not None
               and apps[(mode, "plain")].get(field)}
        for mode, value in per.items():
            got[mode].append(value)
        if len(per) == 2:
            got["connect/classic"].append(per["connect"] / per["classic"])
    return got


def of_medians(records: list[dict[str, Any]], field: str) -> dict[str, float | None]:
    """steward/plain of the medians over the rounds, per mode, and Connect's over classic's."""
    got: dict[str, float | None] = {}
    for mode in MODES:
        steward, plain = (values(records, mode, v, field) for v in ("steward", "plain"))
        got[mode] = statistics.median(steward) / statistics.median(plain) \
            if steward and plain else None
    classic, connect = got["classic"], got["connect"]
    got["connect/classic"] = connect / classic if connect and classic else None
    return got


def time_table(title: str, records: list[dict[str, Any]], modes: list[str],
               columns: tuple[tuple[str, str], ...], prefix: str,
               variants: tuple[str, ...] = VARIANTS) -> dict[str, Any]:
    print(f"\n{title}\n")
    head = ["mode", "variant", *(label for label, _ in columns)]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    summary: dict[str, Any] = {}
    for mode in modes:
        for v in variants:
            print(f"| {mode} | {v} | " + " | ".join(
                cell(values(records, mode, v, prefix + f)) for _, f in columns) + " |")
            summary[f"{mode} {v}"] = {f: stats(values(records, mode, v, prefix + f))
                                      for _, f in columns}
    return summary


def report(records: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    import pyspark

    loads = [x for r in records for x in (r["load_before"], r["load_after"])]
    print(f"\nbench/connect_workloads.py, {MASTER}: pyspark {pyspark.__version__}, "
          f"{os.cpu_count()} cores, {args.rows:,} rows in {PARTITIONS} partitions, "
          f"{args.queries} queries over the cached table, {args.reps} repetitions per "
          f"application, {args.rounds} rounds; 1-minute load average around the applications "
          f"{min(loads):.2f}..{max(loads):.2f}")
    modes = [m for m in MODES if m in args.modes]
    summary: dict[str, Any] = {"ratios": {}}
    summary["first"] = time_table(
        "first repetition (the application's first checkpoint and cached table, after a warm-up "
        "job), seconds inside the driver / client; median (min..max) over the rounds", records,
        modes, TIMES, "first_")
    if args.reps > 1:
        summary["warm"] = time_table(
            f"later repetitions (2..{args.reps}): their median per application, then median "
            "(min..max) over the rounds", records, modes, TIMES, "warm_")
    summary["calls"] = time_table(
        "steward's calls, seconds (through Connect: one command each); first repetition",
        records, modes, CALLS, "first_", ("steward",))
    if args.reps > 1:
        summary["calls_warm"] = time_table("the same, later repetitions", records, modes, CALLS,
                                           "warm_", ("steward",))
    summary["fresh"] = time_table(
        "fresh application: seconds from the launch (spark-submit; start-connect-server.sh, "
        "its client started just before and polling the port) until ...; the first repetition",
        records, modes, FRESH, "")
    low, high = QUOTIENT
    print(f"\nsteward / plain per round, median (min..max) over the rounds; connect / classic: "
          f"the quotient of the two per round, target {low}..{high}\n")
    print("| figure | classic steward/plain | connect steward/plain | connect / classic | "
          f"rounds within {low}..{high} | the same of the medians: classic, connect, "
          "connect / classic |\n|---|---|---|---|---|---|")
    rows = [*((f"{label} (first)", "first_" + f) for label, f in TIMES),
            *(((f"{label} (later)", "warm_" + f) for label, f in TIMES) if args.reps > 1 else ()),
            ("fresh: launch -> checkpoint done", "launch_to_checkpoint_s"),
            ("fresh: launch -> cache done", "launch_to_cache_s")]
    for label, field in rows:
        got = ratios(records, field)
        quotient = got["connect/classic"]
        within = sum(1 for q in quotient if low <= q <= high)
        medians = of_medians(records, field)
        print(f"| {label} | {cell(got['classic'], 3)} | {cell(got['connect'], 3)} | "
              + (f"**{cell(quotient, 3)}**" if quotient else "-")
              + f" | {within} of {len(quotient)} | " + ", ".join(
                  "-" if medians[k] is None else f"{medians[k]:.3f}"
                  for k in ("classic", "connect", "connect/classic")) + " |")
        summary["ratios"][field] = {k: stats(v) for k, v in got.items()}
        summary["ratios"][field].update(within=within, of_medians=medians)
    print()
    for field, label in (("checkpoint_s", "checkpoint"), ("cache_s", "cache")):
        for prefix in ("first_", "warm_") if args.reps > 1 else ("first_",):
            quotient = ratios(records, prefix + field)["connect/classic"]
            of_theirs = of_medians(records, prefix + field)["connect/classic"]
            if quotient and of_theirs is not None:
                median = statistics.median(quotient)
                print(f"target, {label} total ({'later' if prefix == 'warm_' else 'first'}): "
                      f"median of the per-round quotients {median:.3f}, quotient of the medians "
                      f"{of_theirs:.3f} -> " + ("met" if all(low <= q <= high for q in (
                          median, of_theirs)) else "NOT met")
                      + f"; {sum(1 for q in quotient if low <= q <= high)} of {len(quotient)} "
                      f"rounds within {low}..{high}")
    files = [r["checkpoint_files"] for r in records if r.get("checkpoint_files")]
    if files:
        print(f"\nsteward's checkpoint data files per application ({args.reps} saves of "
              f"{PARTITIONS} partitions each): merged {sorted({f['merged'] for f in files})}, "
              f"unmerged {sorted({f['data'] for f in files})}")
    print("\nCPU seconds of processes this run did not start, per application: " + ", ".join(
        f"{mode} {v} {cell(values(records, mode, v, 'foreign_cpu_s'), 1)}"
        for mode in modes for v in VARIANTS))
    killed = [(r["mode"], r["variant"], r["round"], r["killed_after"])
              for r in records if r["killed_after"]]
    if killed:
        print(f"\nneeded SIGKILL after the application had ended: {killed}")
    return summary


def pooled_report(args: argparse.Namespace) -> int:
    """``--report``: the report of earlier runs' records, their rounds numbered on."""
    records: list[dict[str, Any]] = []
    settings = None
    for path in args.report:
        run = json.loads(Path(path).read_text())
        these = {k: run["args"][k] for k in ("rows", "queries", "reps", "modes")}
        if settings is not None and these != settings:
            raise SystemExit(f"{path} ran with {these}, the first file with {settings}")
        settings = these
        offset = len({r["round"] for r in records})
        records += [{**r, "round": r["round"] + offset} for r in run["records"]]
        print(f"{path}: {run['args']['rounds']} rounds, {len(run['records'])} applications in "
              f"{run['elapsed_s']:.0f} s, {len(run.get('discarded', []))} run again")
    assert settings is not None
    for key, value in settings.items():
        setattr(args, key, value)
    args.rounds = len({r["round"] for r in records})
    summary = report(records, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"pooled": args.report, "args": settings,
                                               "summary": summary}, indent=1) + "\n")
    return 0


# -- main ----------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--rows", type=int, default=3_000_000, help="rows of the data (3000000)")
    parser.add_argument("--queries", type=int, default=5,
                        help=f"aggregates over the cached table (5; at most {len(QUERIES)} differ)")
    parser.add_argument("--reps", type=int, default=3,
                        help="repetitions of both workloads per application (3)")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES),
                        help="comma-separated, of classic, connect")
    parser.add_argument("--max-foreign", type=float, default=5.0, metavar="CPU_SECONDS",
                        help="an application during which processes this run did not start "
                        "used more CPU is run again (5)")
    parser.add_argument("--attempts", type=int, default=3,
                        help="tries per application before its figures are kept anyway (3)")
    parser.add_argument("--quiet-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="before each application, wait up to this long for the other "
                        "processes to use under 10%% of a core over 5 s (600)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--transparent", action="store_true",
                        help="steward caches with df.cache() under "
                             "spark.steward.cache.transparent=true (classic: its hooks; Connect: "
                             "the server's TransparentCaches) instead of spark_steward.cache(df)")
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="run nothing: the report of the runs these --json files hold, "
                        "their rounds pooled (same --rows, --queries, --reps, --modes)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global TRANSPARENT
    TRANSPARENT = args.transparent
    if args.child == "classic":
        return classic_child(args.variant, args.rows, args.queries, args.reps, Path(args.out))
    if args.child == "connect":
        return connect_client(args.variant, args.url, args.rows, args.queries, args.reps,
                              Path(args.out))
    if args.report:
        return pooled_report(args)
    if unknown := [m for m in args.modes if m not in MODES]:
        parser.error(f"unknown modes {unknown}")
    if args.rows < 1000 or args.queries < 3 or args.rounds < 1 or args.reps < 1:
        parser.error("--rows at least 1000, --queries at least 3, --rounds and --reps at least 1")

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    load_start = load()
    if load_start > 2.5:
        progress(f"warning: 1-minute load average {load_start:.2f}: something else is running, "
                 "the figures will carry it")
    root = Path(tempfile.mkdtemp(prefix="bench-connect-workloads-"))
    (root / "conf").mkdir()  # SPARK_CONF_DIR: empty, Spark's defaults
    reaper = Reaper()
    records: list[dict[str, Any]] = []
    discarded: list[dict[str, Any]] = []
    apps: list[tuple[str, str]] = [(m, v) for m in MODES if m in args.modes for v in VARIANTS]
    runners: dict[str, Callable[..., dict[str, Any]]] = {"classic": classic_app,
                                                        "connect": connect_app}
    began = time.monotonic()
    try:
        for round_no in range(args.rounds):
            for i in range(len(apps)):
                mode, variant = apps[(i + round_no) % len(apps)]
                work = root / f"{mode}-{variant}-{round_no}"
                for attempt in range(1, args.attempts + 1):
                    if work.exists():
                        shutil.rmtree(work)
                    work.mkdir()
                    waited = wait_quiet(reaper, args.quiet_timeout)
                    if waited > 1:
                        progress(f"waited {waited:.0f} s for the other processes to quiet down")
                    with Foreign(reaper) as foreign:
                        record = runners[mode](variant, root, work, reaper, args)
                    record.update(foreign_cpu_s=foreign.seconds, attempt=attempt,
                                  quiet_wait_s=waited)
                    if foreign.seconds <= args.max_foreign or attempt == args.attempts:
                        break
                    record["round"] = round_no
                    discarded.append(record)
                    progress(f"round {round_no + 1} {mode} {variant}: other processes used "
                             f"{foreign.seconds:.1f} CPU-s meanwhile; again")
                shutil.rmtree(work, ignore_errors=True)
                record["round"] = round_no
                records.append(record)
                check_answers(records, args.rows)
                warm = "" if args.reps < 2 else (
                    f"  later: checkpoint {record['warm_checkpoint_s']:5.2f}s cache "
                    f"{record['warm_cache_s']:5.2f}s")
                progress(f"round {round_no + 1}/{args.rounds} {mode:<7} {variant:<7} first: "
                         f"checkpoint {record['first_checkpoint_s']:5.2f}s (save "
                         f"{record['first_save_s']:5.2f}s) cache {record['first_cache_s']:5.2f}s"
                         f" (1st query {record['first_cache_first_s']:5.2f}s){warm}  launch->"
                         f"checkpoint done {record['launch_to_checkpoint_s']:5.2f}s  (load "
                         f"{record['load_before']:.2f}, others' CPU {foreign.seconds:.1f} s)")
    except (KeyboardInterrupt, Terminated):
        progress("interrupted: stopping what this run started")
        raise
    finally:
        killed = reaper.sweep(grace=0)
        if killed:
            progress(f"SIGKILLed at the end: {killed}")
        shutil.rmtree(root, ignore_errors=True)
    summary = report(records, args)
    if discarded:
        print(f"run again because others used over {args.max_foreign} CPU-s meanwhile: "
              + ", ".join(f"{r['mode']} {r['variant']} round {r['round'] + 1} "
                          f"({r['foreign_cpu_s']:.0f} CPU-s)" for r in discarded))
    elapsed = time.monotonic() - began
    print(f"\n{len(records)} applications in {elapsed:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": {k: v for k, v in vars(args).items()
                      if k in ("rounds", "rows", "queries", "reps", "modes", "max_foreign",
                               "attempts", "quiet_timeout")},
             "master": MASTER, "partitions": PARTITIONS, "columns": COLUMNS, "check": CHECK,
             "queries": QUERIES, "load_start": load_start, "load_end": load(),
             "elapsed_s": elapsed, "records": records, "discarded": discarded,
             "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
