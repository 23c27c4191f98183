"""Shipping one large file to every task, met the way a user meets it: one fresh application per
variant, the put and the addFile call timed.

``bench/blobs.py`` measures shipping inside one long-lived SparkSession that every variant
shares, after a warm-up: the JVMs are compiled, the Python workers forked, spark-steward's
executor runtime built. A user meets it differently: a new application starts, its executors and
Python workers are new, and the first job pays for everything that happens once. Here every
variant runs in its own application (a ``spark-submit`` of this script in child mode, on
``local-cluster[2,1,1024]``: 2 executors of 1 core, reused Python workers), so the JVM, the
executors and the Python workers are all new. One random file of ``--size-mib`` MiB (256 by
default) is written once and every application ships that same file to the 8 tasks of a job,
``sc.parallelize(range(8), 8).map(task).collect()``; each task reads it whole through a reusable
4 MiB buffer (``bench/blobs.py``'s ``read_all``) and must see every byte:

* floor          plain Spark (no spark-steward flags, its autoload off): tasks read the original
                 path directly (page cache warm). The "direct read": what no shipping costs.
* steward        spark-steward enabled by conf flags as a user enables it (the flags ``spark-steward
                 conf --storage URL --local-dir DIR`` prints: plugin, jar, enabled, storage dir,
                 so blob HA is on); ``ref = spark_steward.blobs.put(path)`` timed, then tasks
                 read ``spark_steward.blobs.get(ref)``.
* addFile        plain Spark: ``sc.addFile(path)`` timed, then tasks read ``SparkFiles.get(name)``.
* floor-steward  (diagnostic, only with ``--variants``) spark-steward enabled as for steward,
                 tasks read the original path: what merely having spark-steward on costs the
                 first job (executor bootstrap, event forwarding), without any blob.

Each application: creates its session (``getOrCreate``, timed: for steward it includes the
attach), waits until both executors have registered (timed apart, not part of any figure
below), idles ``--settle`` seconds (0 by default), ``os.sync()`` (untimed), the put or addFile
(timed: "prepare"), ``os.sync()`` (untimed, reported: so no variant's job pays for the writeback
of its own or another's copies), the first job (timed), ``os.sync()``, the same job again
(timed, "second": warm). The variants run in an order rotated per round (``--rounds``).
Printed: medians with (min..max) of each figure, and the ratios steward first / floor first,
(put + first) / (addFile + first) and steward first / addFile first, each as the median of the
per-round ratios (min..max) and as the ratio of the medians.

With ``--settle 0`` the executors are still finishing their own start (class loading, JIT) when
the first job arrives, and a variant whose session start or put takes longer gives them more
time to do so: steward's attach (~1-2 s) and put hide part of what the floor's first job pays.
That is what a user meets; ``--settle 10`` compares the jobs on executors that are idle and
started.

Where the first job's time goes: every task returns its process ids, wall-clock start and end
and, read from ``/proc``, when its Python worker process and that worker's daemon started; so
for the first task of each worker the report shows, relative to the job's submission, when the
daemon started, when the worker was forked, when the task function began (after pyspark's
worker set-up and the command's unpickling, where spark-steward installs its executor context)
and when it ended. Steward tasks also split their work: importing ``spark_steward.blob.executor``,
building the process's blob service (``executor_blobs()``: executor runtime conf, working dir
recovery, the once-per-host sweep of dead applications, the blob cache), ``blobs.get`` (the
same-host link of the driver's copy, its verification, the manifest records, the ``use`` report
to the driver) and the read; and the cache's counters (linked, verified, hit).

    python bench/blobs_fresh.py [--size-mib 256] [--rounds 3] [--variants floor,steward,addFile]
                                [--settle 0] [--conf KEY=VALUE] [--json FILE] [--verbose]

One application takes 18-30 s here (JVM, executor and Python worker start dominate), so the
default 3 rounds of 3 variants take about 4 minutes at 256 MiB. Single jobs on this 2-core VM
vary by ±20%, and the load of anything else running shows up in every figure: the load average
before and after each application is recorded. ``--verbose`` prints each application's timeline
per worker process. To measure a commit rather than the work tree, export it and put its
``python/`` first on ``PYTHONPATH`` (with its shim jar built and its modules byte-compiled, as
an installed wheel has them); executors get the same path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import blobs as blobs_bench  # bench/blobs.py: the same read as the warm-session benchmark
from blobs import read_all, write_random

TASKS = 8
VARIANTS = ("floor", "steward", "addFile")
DIAGNOSTIC = ("floor-steward",)
STEWARD_VARIANTS = ("steward", "floor-steward")
MASTER = "local-cluster[2,1,1024]"
EXECUTORS = 2
BASE_CONF = ("spark.ui.enabled=false", "spark.ui.showConsoleProgress=false",
             "spark.executor.cores=1",
             # The default, stated: one long-lived Python worker per executor runs every task.
             "spark.python.worker.reuse=true")


# -- what tasks run (pickled by value: this module is __main__ in the application) ------------

def _proc_started(pid: int) -> float | None:
    """Wall-clock start of process ``pid`` from /proc (10 ms resolution), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    boot = time.time() - uptime
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime


def _steward_modules() -> int:
    return sum(1 for name in sys.modules if name.startswith("spark_steward"))


def _row(start_wall: float, start: float, n: int, parts: dict[str, float],
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What every task returns (a dict: pickled back to the driver)."""
    pid, ppid = os.getpid(), os.getppid()
    return {"pid": pid, "bytes": n, "start": start_wall,
            "end": start_wall + (time.perf_counter() - start),
            "worker_started": _proc_started(pid), "daemon_started": _proc_started(ppid),
            "parts": parts, **(extra or {})}


def floor_task(path: str) -> Callable[[int], dict[str, Any]]:
    def task(_: int) -> dict[str, Any]:
        start_wall, start = time.time(), time.perf_counter()
        modules = _steward_modules()
        n = read_all(path)
        return _row(start_wall, start, n, {"read": time.perf_counter() - start},
                    {"steward_modules": modules})
    return task


def addfile_task(name: str) -> Callable[[int], dict[str, Any]]:
    def task(_: int) -> dict[str, Any]:
        from pyspark import SparkFiles

        start_wall, start = time.time(), time.perf_counter()
        path = SparkFiles.get(name)
        located = time.perf_counter()
        n = read_all(path)
        return _row(start_wall, start, n, {"locate": located - start,
                                           "read": time.perf_counter() - located})
    return task


def steward_task(ref: Any) -> Callable[[int], dict[str, Any]]:
    def task(_: int) -> dict[str, Any]:
        start_wall, start = time.time(), time.perf_counter()
        modules = _steward_modules()  # what the command's unpickling (the bootstrap) imported
        import spark_steward
        try:
            from spark_steward.blob import executor as blob_executor
        except ImportError:  # renamed: the split below is lost, the figures stay
            blob_executor = None  # type: ignore[assignment]
        imported = time.perf_counter()
        service = blob_executor.executor_blobs() if blob_executor is not None else None
        built = time.perf_counter()
        path = spark_steward.blobs.get(ref)
        got = time.perf_counter()
        n = read_all(path)
        done = time.perf_counter()
        stats = dict(getattr(getattr(service, "cache", None), "stats", {}) or {})
        return _row(start_wall, start, n,
                    {"import": imported - start, "service": built - imported,
                     "get": got - built, "read": done - got},
                    {"steward_modules": modules, "steward_modules_after": _steward_modules(),
                     "cache": stats, "library": os.path.dirname(spark_steward.__file__)})
    return task


# -- one application (child mode, run by spark-submit) ------------------------------------------

def _executors(sc: Any) -> int:
    return int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1  # minus the driver's


def _job(sc: Any, task: Callable[[int], dict[str, Any]], size: int) -> dict[str, Any]:
    # Untimed: write back what earlier steps left dirty (the put's two copies, addFile's driver
    # copy), as bench/blobs.py does, so no job pays for writeback it did not cause.
    os.sync()
    start_wall, start = time.time(), time.perf_counter()
    rows = sc.parallelize(range(TASKS), TASKS).map(task).collect()
    wall = time.perf_counter() - start
    bad = [r["bytes"] for r in rows if r["bytes"] != size]
    if bad:
        raise SystemExit(f"FAIL: tasks read {bad} bytes, expected {size}")
    return {"wall": wall, "start": start_wall, "rows": rows}


def child(args: argparse.Namespace) -> int:
    script_started = time.time()
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    # Executors cannot import bench/: read_all travels by value, like this module's functions.
    cloudpickle.register_pickle_by_value(blobs_bench)
    variant, path = args.child, args.data
    size = os.path.getsize(path)
    start = time.perf_counter()
    spark = SparkSession.builder.appName(f"blobs-fresh-{variant}").getOrCreate()
    session_s = time.perf_counter() - start
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    out: dict[str, Any] = {"variant": variant, "app_id": sc.applicationId,
                           "launch_to_script": script_started - args.launched,
                           "session": session_s}
    try:
        if variant in STEWARD_VARIANTS:
            import spark_steward

            if not spark_steward.is_enabled(spark):
                raise SystemExit("FAIL: spark-steward is not enabled by the conf flags")
        start = time.perf_counter()
        while _executors(sc) < EXECUTORS:  # untimed for the figures: all variants alike
            if time.perf_counter() - start > 120:
                raise SystemExit(f"FAIL: {_executors(sc)} of {EXECUTORS} executors after 120 s")
            time.sleep(0.02)
        out["executors_wait"] = time.perf_counter() - start
        time.sleep(args.settle)
        os.sync()
        start = time.perf_counter()
        if variant == "steward":
            import spark_steward

            ref = spark_steward.blobs.put(path)
            task = steward_task(ref)
        elif variant == "addFile":
            sc.addFile(path)
            task = addfile_task(os.path.basename(path))
        else:
            task = floor_task(path)
        out["prepare"] = time.perf_counter() - start
        start = time.perf_counter()
        os.sync()
        out["sync_after_prepare"] = time.perf_counter() - start
        out["first"] = _job(sc, task, size)
        out["second"] = _job(sc, task, size)
    finally:
        start = time.perf_counter()
        spark.stop()
        out["stop"] = time.perf_counter() - start
    Path(args.out).write_text(json.dumps(out))
    return 0


# -- the driver of the benchmark (parent mode) --------------------------------------------------

def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def steward_flags(storage: Path, local_dir: Path) -> list[str]:
    """The flags ``spark-steward conf`` prints, as a user would paste them."""
    return subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--storage",
                           storage.as_uri(), "--local-dir", str(local_dir)],
                          check=True, capture_output=True, text=True).stdout.split()


def run_application(variant: str, data: Path, tmp: Path, extra: list[str],
                    settle: float) -> dict[str, Any]:
    out = tmp / f"{variant}-{time.monotonic_ns()}.json"
    flags = ["--master", MASTER]
    for item in (*BASE_CONF, f"spark.local.dir={tmp / 'spark-local'}", *extra):
        flags += ["--conf", item]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("SPARK_CONF_DIR", None)
    if variant in STEWARD_VARIANTS:
        flags += steward_flags(tmp / "steward-storage", tmp / "steward-local")
        if os.environ.get("PYTHONPATH"):  # a spark-steward tree put first: executors too
            flags += ["--conf", f"spark.executorEnv.PYTHONPATH={os.environ['PYTHONPATH']}"]
    else:
        env["SPARK_STEWARD_AUTOLOAD"] = "0"  # plain Spark: nothing of spark-steward runs
    before = load()
    launched = time.time()
    start = time.perf_counter()
    result = subprocess.run([spark_submit(), *flags, str(Path(__file__).resolve()),
                             "--child", variant, "--data", str(data), "--out", str(out),
                             "--launched", repr(launched), "--settle", repr(settle)],
                            capture_output=True, text=True, timeout=900, env=env)
    wall = time.perf_counter() - start
    if result.returncode != 0 or not out.exists():
        tail = (result.stdout + result.stderr)[-4000:]
        raise SystemExit(f"FAIL: the {variant} application exited {result.returncode}:\n{tail}")
    body: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    body["submit_wall"] = wall
    body["load_before"], body["load_after"] = before, load()
    # local-cluster executors keep their work dirs (2 copies of every addFile) in
    # $SPARK_HOME/work/<app id>, whatever spark.local.dir says.
    from pyspark.find_spark_home import _find_spark_home

    shutil.rmtree(Path(_find_spark_home()) / "work" / body["app_id"], ignore_errors=True)
    return body


def first_tasks(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The first task of each Python worker process, in order of pid."""
    by: dict[int, dict[str, Any]] = {}
    for row in sorted(job["rows"], key=lambda r: r["start"]):
        by.setdefault(row["pid"], row)
    return [by[pid] for pid in sorted(by)]


def timeline(job: dict[str, Any]) -> list[str]:
    """Per worker process: its first task's timeline, relative to the job's submission."""
    lines = []
    t0 = job["start"]

    def at(value: float | None) -> str:
        return f"{value - t0:+.3f}" if value is not None else "?"

    for row in first_tasks(job):
        parts = "  ".join(f"{k} {v:.3f}" for k, v in row["parts"].items())
        tasks = sum(1 for r in job["rows"] if r["pid"] == row["pid"])
        line = (f"pid {row['pid']} ({tasks} tasks): daemon {at(row['daemon_started'])}  "
                f"worker {at(row['worker_started'])}  task {at(row['start'])}..{at(row['end'])}"
                f"  [{parts}]")
        if "cache" in row:
            line += f"  cache {row['cache']}"
        if "steward_modules" in row:
            line += f"  steward modules {row['steward_modules']}"
            if "steward_modules_after" in row:
                line += f"->{row['steward_modules_after']}"
        lines.append(line)
    return lines


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def summarize(apps: list[dict[str, Any]], variants: list[str], rounds: int,
              size_mib: int) -> dict[str, Any]:
    by = {v: [a for a in apps if a["variant"] == v] for v in variants}
    def values(variant: str, field: str) -> list[float]:
        got = []
        for app in by.get(variant, []):
            value = app[field]
            got.append(value["wall"] if isinstance(value, dict) else value)
        return got

    import spark_steward

    loads = [x for a in apps for x in (a["load_before"][0], a["load_after"][0])]
    used = {r["library"] for a in apps for job in ("first", "second") for r in a[job]["rows"]
            if "library" in r}
    if used - {os.path.dirname(spark_steward.__file__)}:
        print(f"warning: executors ran spark-steward from {sorted(used)}, the driver from "
              f"{os.path.dirname(spark_steward.__file__)}", file=sys.stderr)
    print(f"\nbench/blobs_fresh.py  ({size_mib} MiB file, {TASKS} tasks each reading it whole, "
          f"{MASTER}, one fresh application per variant and round, {rounds} rounds; "
          f"median (min..max) s)")
    print(f"1-minute load average around the applications: {min(loads):.2f}..{max(loads):.2f};"
          f" spark-steward from {os.path.dirname(spark_steward.__file__)}")
    print(f"{'variant':<14}" + "".join(f"{f:>24}" for f in
                                       ("session", "prepare", "first job", "second job",
                                        "application")))
    for v in variants:
        print(f"{v:<14}" + "".join(f"{spread(values(v, f)):>24}" for f in
                                   ("session", "prepare", "first", "second", "submit_wall")))
    print("prepare = blobs.put (steward) / sc.addFile (addFile); application = the whole "
          "spark-submit")
    for label, field in (("executors up", "executors_wait"),
                         ("sync after prepare", "sync_after_prepare")):
        print(f"{label} (untimed): " + ", ".join(f"{v} {spread(values(v, field))}"
                                                   for v in variants))

    # Per round pairing: ratios of applications of the same round.
    rounds_of: dict[int, dict[str, dict[str, Any]]] = {}
    for app in apps:
        rounds_of.setdefault(app["round"], {})[app["variant"]] = app

    def ratio(name: str, num: Callable[[dict[str, Any]], float],
              den: Callable[[dict[str, Any]], float], a: str, b: str) -> dict[str, Any]:
        per_round = [num(r[a]) / den(r[b]) for r in rounds_of.values() if a in r and b in r]
        medians = [num(x) for x in by.get(a, [])], [den(x) for x in by.get(b, [])]
        of_medians = (statistics.median(medians[0]) / statistics.median(medians[1])
                      if all(medians) else None)
        text = spread(per_round)
        print(f"  {name:<44} {text:<26} ratio of medians "
              f"{of_medians:.3f}" if of_medians is not None else f"  {name:<44} -")
        return {"per_round": per_round, "of_medians": of_medians}

    def first(app: dict[str, Any]) -> float:
        return float(app["first"]["wall"])

    def put_first(app: dict[str, Any]) -> float:
        return float(app["prepare"]) + first(app)

    print("ratios: median of per-round ratios (min..max)")
    ratios = {
        "steward_first/floor_first": ratio("steward first / floor first", first, first,
                                           "steward", "floor"),
        "steward_put_first/addfile_first": ratio("(put + first) / (addFile + first)",
                                                 put_first, put_first, "steward", "addFile"),
        "steward_first/addfile_first": ratio("steward first / addFile first", first, first,
                                             "steward", "addFile"),
        "steward_second/floor_second": ratio(
            "steward second / floor second", lambda a: float(a["second"]["wall"]),
            lambda a: float(a["second"]["wall"]), "steward", "floor"),
    }
    if "floor-steward" in by:
        ratios["floor-steward_first/floor_first"] = ratio(
            "floor-steward first / floor first", first, first, "floor-steward", "floor")
        ratios["steward_first/floor-steward_first"] = ratio(
            "steward first / floor-steward first", first, first, "steward", "floor-steward")

    # First task of each worker in the first job: when it started after the job's submission,
    # and (steward) its parts; medians over the applications' workers.
    print("first job, first task of each Python worker, median over workers and rounds (s): "
          "job submitted -> daemon started -> worker forked -> task function -> its end")
    phases: dict[str, Any] = {}
    for v in variants:
        rows = [(app["first"]["start"], row) for app in by[v] for row in first_tasks(app["first"])]
        if not rows:
            continue
        # job submitted -> daemon started -> worker forked -> task function starts -> ends
        steps: dict[str, list[float]] = {"to daemon": [], "daemon->fork": [], "fork->task": [],
                                         "task": []}
        for t0, row in rows:
            daemon, fork = row["daemon_started"], row["worker_started"]
            if daemon is not None and fork is not None and daemon <= row["start"]:
                # The first job of a fresh application starts the daemon and the workers (/proc
                # times: 10 ms resolution).
                steps["to daemon"].append(daemon - t0)
                steps["daemon->fork"].append(fork - daemon)
                steps["fork->task"].append(row["start"] - fork)
            steps["task"].append(row["end"] - row["start"])
        keys = list(rows[0][1]["parts"])
        parts = {k: [row["parts"][k] for _, row in rows] for k in keys}
        print(f"  {v:<14} " + "  ".join(f"{k} {spread(vals)}" for k, vals in steps.items()))
        print(f"  {'':<14} task: " + "  ".join(f"{k} {spread(vals)}" for k, vals in
                                                parts.items()))
        phases[v] = {"steps": steps, "parts": parts}
    return {"ratios": ratios, "first_tasks": phases}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS),
                        help=f"comma-separated, of {', '.join(VARIANTS + DIAGNOSTIC)}")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a further Spark conf pair for every application")
    parser.add_argument("--settle", type=float, default=0.0, metavar="SECONDS",
                        help="idle time after the executors registered, before the put (0: as "
                             "a user meets it; executors then finish starting during whatever "
                             "comes first, which favours variants with a longer session start "
                             "or put)")
    parser.add_argument("--json", help="write every application's figures and the summary")
    parser.add_argument("--verbose", action="store_true", help="per-application timelines")
    # Child mode: one application, run by spark-submit.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    unknown = [v for v in args.variants if v not in VARIANTS + DIAGNOSTIC]
    if unknown:
        parser.error(f"unknown variants {unknown}")
    started = load()
    if started[0] > 2.5:
        print(f"warning: 1-minute load average {started[0]:.2f}: something else is running, "
              "the figures will carry it", file=sys.stderr)
    size = args.size_mib << 20
    tmp = Path(tempfile.mkdtemp(prefix="bench-blobs-fresh-"))
    apps: list[dict[str, Any]] = []
    try:
        data = tmp / "data.bin"
        write_random(data, size)
        data.read_bytes()  # in the page cache for every variant
        for round_no in range(args.rounds):
            order = [args.variants[(i + round_no) % len(args.variants)]
                     for i in range(len(args.variants))]
            print(f"round {round_no + 1}/{args.rounds}: {', '.join(order)}", file=sys.stderr,
                  flush=True)
            for variant in order:
                app = run_application(variant, data, tmp, args.conf, args.settle)
                app["round"] = round_no
                apps.append(app)
                print(f"  {variant:<14} session {app['session']:6.3f}s  executors "
                      f"{app['executors_wait']:6.3f}s  prepare {app['prepare']:6.3f}s  first "
                      f"{app['first']['wall']:6.3f}s  second {app['second']['wall']:6.3f}s  "
                      f"(application {app['submit_wall']:.1f}s, load "
                      f"{app['load_before'][0]:.2f})", file=sys.stderr, flush=True)
                if args.verbose:
                    for line in timeline(app["first"]):
                        print(f"    first  {line}", file=sys.stderr)
                    for line in timeline(app["second"]):
                        print(f"    second {line}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarize(apps, args.variants, args.rounds, args.size_mib)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "load_start": started, "load_end": load(), "apps": apps,
             "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
