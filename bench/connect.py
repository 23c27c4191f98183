"""Start-up cost of spark-steward's driver runtime where no Python of ours starts the driver (a
Spark Connect server), and of the two ways a classic PySpark driver can host it; and what a
Connect server keeps of its clients' sessions after they end, plain and with spark-steward.

spark-steward's Java plugin (``io.sparksteward.shim.StewardPlugin``) hosts the driver runtime
beside a driver that no spark-steward Python started: ``RuntimeHost`` runs ``python -m
spark_steward.kernel.host`` as a child of the driver JVM, which connects back over a py4j gateway,
waits for the SparkContext and attaches. In a classic PySpark driver with the autoload on (the
default) the runtime attaches in-process instead, before ``getOrCreate`` returns. Both must cost a
user little at start-up; the **start** measurement (parts 1 and 2) shows how little, against plain
Spark, one fresh application per variant and round (``--rounds``, 5 by default; the order of the
variants rotates per round):

1. **connect start.** ``sbin/start-connect-server.sh`` (``--master local-cluster[1,1,1024]``) is
   launched; a client in a separate process (started just before, so its own imports are done
   when the server comes up) polls the gRPC port every 50 ms, then runs
   ``SparkSession.builder.remote(url).getOrCreate()`` and ``spark.range(1000).count()``. Timed
   from the launch instant: the port accepting, the client holding its first job's result, and
   (spark-steward) the server log's ``attached to <app id>`` line, read every 50 ms (the hosted
   runtime ready). Variants: **plain** (no spark-steward flags) and **steward** (the flags of
   ``spark-steward conf --server --storage URL --local-dir DIR``). Once everything is in, the
   hosted runtime's CPU seconds so far are read from ``/proc`` and the server idles ``--idle``
   seconds (5) to show the idle CPU of the runtime and of the server JVM; then
   ``stop-connect-server.sh``, timed until the JVM is gone (the runtime detaches meanwhile).

2. **classic start, two ways of hosting the runtime.** ``spark-submit`` (same master) of this file
   in child mode: ``getOrCreate()``, ``spark.range(1000).count()``, CPU figures, ``spark.stop()``.
   Variants: **plain** (no flags, ``SPARK_STEWARD_AUTOLOAD=0``), **in-process** (``spark-steward
   conf`` flags, autoload on: the runtime attaches inside ``getOrCreate``, which the child checks
   with ``current_runtime()``) and **autoload-off** (``SPARK_STEWARD_AUTOLOAD=0`` and the ``conf
   --server`` flags, which add ``spark.jars`` and ``spark.plugins``). Until 9e6e9f9 the plugin
   hosted the runtime for such a driver as for a Connect server, and this variant was called
   **hosted** (figures in bench/RESULTS.md); since then the plugin hosts a runtime only where no
   Python builds the context, so here it runs none (checked) and the variant shows what the shim
   alone costs a PySpark driver that attaches later, or never. Timed from the launch: session ready, first job's result, runtime
   attached (the driver log's ``attached to`` line on spark-submit's output, for both steward
   variants), ``spark.stop()`` and spark-submit's exit. CPU, read by the child just before
   ``spark.stop()``: the driver's Python process (the in-process runtime lives there), the driver
   JVM, and the hosted runtime (a child of the JVM running ``spark_steward.kernel.host``).

3. **sessions.** Each Connect session is an owner scope of spark-steward's: its ``df.checkpoint()``
   folders go when it closes (``spark.stop()``) or expires. Per round (``--rounds``, 3 by
   default) one fresh server per variant: **plain** (``spark.checkpoint.dir`` set, which plain
   Connect's ``df.checkpoint()`` needs) and **steward** (the ``conf --server`` flags, no
   checkpoint dir); both with ``spark.connect.session.manager.defaultSessionTimeout=20s`` (the
   default is 60 minutes) and ``maintenanceInterval=2s``. After a first client's job (the
   baseline: executor registered, jars fetched, runtime attached), ``--sessions`` (100) client
   sessions, each made by ``SparkSession.builder.remote(url).create()``: ``spark.addArtifacts(<a
   4 KiB file>, file=True)``, ``spark.range(--rows).selectExpr(...).checkpoint()`` and its
   ``count()``, ``spark.range(--rows + k).cache()`` and its ``count()``. Half end with
   ``spark.stop()``, all in one client process; the other half belong to client processes of up
   to 10 sessions each, SIGKILLed once every client is done. 30 s later (expiry, its check, a
   margin) the figures are read: the files the server has that it did not have at the baseline,
   by where they are (checkpoint dir; Spark Connect's artifact store, ``artifacts-*`` in the
   JVM's ``java.io.tmpdir``, which is a folder of this run; the driver's copies of added files,
   ``userFiles-*``; the executor's work dir; the rest of ``spark.local.dir`` and of the tmpdir;
   spark-steward's own storage and local dir); the cached RDDs never removed (the executor's
   log); the sessions never closed (the server's log) and open per ``spark-steward status
   --json``; and VmRSS of the server JVM, hosted runtime and executor before the clients, at
   the peak (sampled every 0.5 s) and at the end.

Printed: median (min..max) of every figure, and the ratio to plain as the median of the per-round
ratios (min..max); ``--json PATH`` writes every application's figures and the summary.

Hygiene: loopback only (``spark.driver.host``/``bindAddress`` and the Connect binding address are
127.0.0.1, ``SPARK_LOCAL_IP=127.0.0.1``); ``SPARK_CONF_DIR`` is an empty folder and
``SPARK_LOG_DIR``/``SPARK_PID_DIR`` are per server, all in one temp dir that is removed at the end
(with, for **sessions**, the server JVM's ``java.io.tmpdir``: nothing of it lands in /tmp).
Every launch (clients too) is a session of its own, so whatever it starts (server JVM,
executors, hosted runtime) stays in its process group: after each application, and on failure,
Ctrl-C or SIGTERM, what is still running there gets SIGKILL (after a 10 s grace once the
application has ended; the pids that needed it are recorded). ``$SPARK_HOME/work/<app id>`` is
removed only when its executors name this run's driver port. The JVMs run with Spark's default
options (no class-data archive, unlike the test suite's), as a user's do.

    python bench/connect.py [--only start|sessions] [--rounds N] [--json PATH]
                            [--parts connect,classic] [--idle 5]   # start
                            [--sessions 100] [--rows 10000]        # sessions

One start application takes 12-30 s on this 2-core VM; 5 rounds take about 9 minutes. A sessions
round takes about 2 minutes per server with 100 sessions (3 rounds: 12 minutes). Anything else
running shows up in every figure: the 1-minute load average around each application is recorded.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
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
from typing import IO, Any, Callable, Iterable

LOOPBACK = "127.0.0.1"
MASTER = "local-cluster[1,1,1024]"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST_MODULE = "spark_steward.kernel.host"
CONNECT_VARIANTS = ("plain", "steward")
CLASSIC_VARIANTS = ("plain", "in-process", "autoload-off")
PARTS = ("connect", "classic")
SESSION_VARIANTS = ("plain", "steward")
MEASUREMENTS = ("start", "sessions")
COMMON_CONF = ("spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1",
               "spark.ui.enabled=false", "spark.ui.showConsoleProgress=false",
               "spark.executor.cores=1")
ATTACHED = re.compile(r"attached to (\S+) \(storage")
APP_ID = re.compile(r"\b(app-\d{14}-\d{4}|local-\d{13})\b")
#: Log lines whose first appearance is timed (wall clock, from the launch): where the time goes.
MILESTONES = {
    "app": APP_ID,
    "driver_port": re.compile(r"Successfully started service 'sparkDriver' on port (\d+)"),
    "runtime_started": re.compile(r"driver runtime (started) beside this driver"),
    "executor_registered": re.compile(r"(Registered executor)"),
    "connect_started": re.compile(r"(Spark Connect server started)"),
    "attached": ATTACHED,
}
POLL = 0.05
APP_TIMEOUT = 600.0
ATTACH_TIMEOUT = 120.0
STOP_TIMEOUT = 90.0


class Failure(Exception):
    """One application did not do what the benchmark needs; the message says what and shows logs."""


class Terminated(Exception):
    """SIGTERM: unwinds like Ctrl-C, so every ``finally`` cleans up."""


# -- /proc ---------------------------------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state first), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """``pid`` runs and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def ppid(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else -1


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` itself (not its children), or None."""
    fields = _stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def runtime_children(jvm: int) -> list[int]:
    """The hosted runtime processes of driver JVM ``jvm``."""
    return sorted(p for p in pids() if ppid(p) == jvm and HOST_MODULE in cmdline(p))


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# -- what this run started, and its end ----------------------------------------------------------

class Reaper:
    """Every process this run started. Each launch leads a process group of its own, and whatever
    it starts stays in that group: the Connect server JVM (spark-daemon.sh's background job), the
    local-cluster executors and the hosted runtime (the JVM's children). Application ids are not
    used to find executors: another run's local-cluster master can hand out the same id in the
    same second. A group is forgotten once empty, so a reused pid number is never taken for it."""

    def __init__(self) -> None:
        self.groups: set[int] = set()

    def members(self) -> list[int]:
        found = []
        for pid in pids():
            if pid == os.getpid() or not alive(pid):
                continue
            try:
                if os.getpgid(pid) in self.groups:
                    found.append(pid)
            except OSError:
                continue
        return found

    def sweep(self, grace: float = 10.0) -> list[int]:
        """Waits up to ``grace`` seconds for what is still running to end on its own, then
        SIGKILLs the rest; returns the pids that needed SIGKILL."""
        deadline = time.monotonic() + grace
        while (left := self.members()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while (still := self.members()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if still:
            raise Failure(f"processes of this run survived SIGKILL: {still}")
        self.groups.clear()
        return left


# -- watching logs -------------------------------------------------------------------------------

class Watch:
    """Lines of a log as they come: when each pattern first matched (wall clock) and its group."""

    def __init__(self, patterns: dict[str, re.Pattern[str]]) -> None:
        self.patterns = patterns
        self.seen: dict[str, tuple[float, str]] = {}
        self.tail: collections.deque[str] = collections.deque(maxlen=60)
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.done = threading.Event()

    def feed(self, line: str, now: float) -> None:
        with self.lock:
            self.tail.append(line.rstrip("\n"))
            for name, pattern in self.patterns.items():
                if name not in self.seen and (match := pattern.search(line)):
                    self.seen[name] = (now, match.group(1))

    def first(self, name: str) -> tuple[float, str] | None:
        with self.lock:
            return self.seen.get(name)

    def last_lines(self) -> str:
        with self.lock:
            return "\n".join(self.tail)

    def follow_pipe(self, stream: IO[str]) -> None:
        def read() -> None:
            for line in stream:
                self.feed(line, time.time())
        self._spawn(read)

    def follow_files(self, folder: Path, glob: str) -> None:
        """Polls the files ``folder/glob`` every :data:`POLL` seconds for appended lines."""
        def read() -> None:
            offsets: dict[Path, int] = {}
            partial: dict[Path, str] = {}
            while not self.done.is_set():
                for path in sorted(folder.glob(glob)) if folder.is_dir() else []:
                    try:
                        with open(path, encoding="utf-8", errors="replace") as f:
                            f.seek(offsets.get(path, 0))
                            chunk = f.read()
                            offsets[path] = f.tell()
                    except OSError:
                        continue
                    now = time.time()
                    *lines, rest = (partial.get(path, "") + chunk).split("\n")
                    partial[path] = rest
                    for line in lines:
                        self.feed(line, now)
                self.done.wait(POLL)
        self._spawn(read)

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=5)


# -- shared set-up -------------------------------------------------------------------------------

def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def steward_flags(work: Path, server: bool) -> list[str]:
    """The flags ``spark-steward conf [--server]`` prints, as a user would paste them."""
    cmd = [sys.executable, "-m", "spark_steward.cli", "conf", "--storage",
           (work / "steward-storage").as_uri(), "--local-dir", str(work / "steward-local")]
    if server:
        cmd.insert(4, "--server")
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()


def conf_flags(pairs: Iterable[str]) -> list[str]:
    return [flag for pair in pairs for flag in ("--conf", pair)]


def spark_env(root: Path, work: Path, autoload: bool) -> dict[str, str]:
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(root / "conf"),
               SPARK_LOCAL_IP=LOOPBACK, SPARK_LOG_DIR=str(work / "logs"),
               SPARK_PID_DIR=str(work), SPARK_IDENT_STRING=f"steward-bench-{os.getpid()}",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_STEWARD_AUTOLOAD="1" if autoload else "0")
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(name, None)
    return env


def forget_app(watch: "Watch") -> None:
    """Removes $SPARK_HOME/work/<app id>, where local-cluster executors keep their work dirs,
    when every executor there belonged to this run's driver (its port in the executor's launch
    command): another run may have had an application of the same id."""
    app, port = watch.first("app"), watch.first("driver_port")
    if app is None or port is None:
        return
    folder = spark_home() / "work" / app[1]
    logs = list(folder.glob("*/stderr"))
    mark = f"CoarseGrainedScheduler@{LOOPBACK}:{port[1]}\""
    if logs and all(mark in log.read_text(errors="replace")[:20000] for log in logs):
        shutil.rmtree(folder, ignore_errors=True)


def connect_command(work: Path, port: int, flags: list[str], conf: Iterable[str] = ()) -> list[str]:
    """``start-connect-server.sh`` on loopback ``port``, Spark's scratch space in ``work``."""
    return [str(spark_home() / "sbin" / "start-connect-server.sh"), "--master", MASTER,
            *conf_flags((*COMMON_CONF, f"spark.connect.grpc.binding.address={LOOPBACK}",
                         f"spark.connect.grpc.binding.port={port}",
                         f"spark.local.dir={work / 'spark-local'}", *conf)), *flags]


def server_pid_file(work: Path, env: dict[str, str]) -> Path:
    """Where ``spark-daemon.sh`` writes the Connect server JVM's pid."""
    return work / f"spark-{env['SPARK_IDENT_STRING']}-{SERVER_CLASS}-1.pid"


def connect_client_env(*, autoload_off: bool) -> dict[str, str]:
    """A Connect client's environment: this one, without what would make pyspark start a local
    server or connect elsewhere; ``autoload_off``: a plain client, spark-steward's autoload off."""
    env = dict(os.environ)
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(name, None)
    if autoload_off:
        env["SPARK_STEWARD_AUTOLOAD"] = "0"
    return env


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             check: Callable[[], None] = lambda: None) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        check()
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {timeout:.0f} s")
        time.sleep(POLL)
    return value


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- 1. connect start ----------------------------------------------------------------------------

def connect_client(url: str, out: Path) -> int:
    """Child mode: the Connect client. Imports first, then waits for the port, then one job."""
    started = time.time()
    from pyspark.sql import SparkSession
    import pyspark.sql.connect.session  # noqa: F401  (the client's imports, before the server)

    imported = time.time()
    host, port = url.removeprefix("sc://").split(":")
    deadline = time.monotonic() + APP_TIMEOUT
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"the server at {url} did not accept within {APP_TIMEOUT} s")
            time.sleep(POLL)
    accepting = time.time()
    spark = SparkSession.builder.remote(url).getOrCreate()
    session = time.time()
    count = spark.range(1000).count()
    result = time.time()
    if count != 1000:
        raise SystemExit(f"spark.range(1000).count() gave {count}")
    spark.stop()
    out.write_text(json.dumps({"started": started, "imported": imported, "accepting": accepting,
                               "session": session, "result": result}))
    return 0


def connect_round(variant: str, root: Path, work: Path, reaper: Reaper,
                  idle: float) -> dict[str, Any]:
    steward = variant == "steward"
    env = spark_env(root, work, autoload=False)
    port = free_port()
    url = f"sc://{LOOPBACK}:{port}"
    cmd = connect_command(work, port, steward_flags(work, server=True) if steward else [])
    pid_file = server_pid_file(work, env)
    client_out = work / "client.json"
    client_env = connect_client_env(autoload_off=False)
    watch = Watch(MILESTONES)
    record: dict[str, Any] = {"part": "connect", "variant": variant, "load_before": load()}
    server = -1
    launched = time.time()
    client: subprocess.Popen[bytes] | None = None
    script: subprocess.Popen[bytes] | None = None
    try:
        with open(work / "client.log", "wb") as client_log, \
                open(work / "start-script.log", "wb") as script_log:
            client = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                       "--connect-client", url, "--out", str(client_out)],
                                      env=client_env, stdout=client_log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            reaper.groups.add(client.pid)
            launched = time.time()
            script = subprocess.Popen(cmd, env=env, stdout=script_log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            reaper.groups.add(script.pid)
        watch.follow_files(work / "logs", "*.out")

        def server_alive() -> None:
            nonlocal server
            if server < 0 and pid_file.is_file() and pid_file.read_text().strip():
                server = int(pid_file.read_text())
            if server > 0 and not alive(server):
                raise Failure(f"the {variant} Connect server died:\n{watch.last_lines()}")

        def client_done() -> bool:
            assert client is not None
            if client.poll() is None:
                return False
            if client.returncode != 0 or not client_out.is_file():
                raise Failure(f"the client exited {client.returncode}:\n"
                              f"{(work / 'client.log').read_text()[-3000:]}\n"
                              f"server log:\n{watch.last_lines()}")
            return True

        wait_for(client_done, APP_TIMEOUT, "the client's first job", server_alive)
        got = json.loads(client_out.read_text())
        app = wait_for(lambda: watch.first("app"), 60, "the server's application id")[1]
        record.update(app_id=app, launched=launched,
                      client_imported_s=got["imported"] - launched,
                      accepting_s=got["accepting"] - launched,
                      session_s=got["session"] - launched,
                      first_result_s=got["result"] - launched, attached_s=None)
        if steward:
            when, attached_app = wait_for(lambda: watch.first("attached"), ATTACH_TIMEOUT,
                                          "the hosted runtime's 'attached to'", server_alive)
            if attached_app != app:
                raise Failure(f"the runtime attached to {attached_app}, the server runs {app}")
            record["attached_s"] = when - launched
        server_alive()
        runtimes = runtime_children(server)
        if steward and len(runtimes) != 1:
            raise Failure(f"expected one hosted runtime beside the server, found {runtimes}")
        runtime = runtimes[0] if runtimes else None
        record["runtime_pid"] = runtime
        # CPU so far (the runtime's: start, imports, attach, the pump until now), then idle.
        jvm_before = cpu_seconds(server) or 0.0
        runtime_before = cpu_seconds(runtime) if runtime else None
        idle_start = time.monotonic()
        time.sleep(idle)
        idle_s = time.monotonic() - idle_start
        jvm_after = cpu_seconds(server) or 0.0
        record.update(jvm_cpu_s=jvm_before, runtime_cpu_s=runtime_before, idle_s=idle_s,
                      jvm_idle_cpu_pct=100 * (jvm_after - jvm_before) / idle_s if idle else None,
                      runtime_idle_cpu_pct=None)
        if runtime and runtime_before is not None and idle:
            runtime_after = cpu_seconds(runtime)
            if runtime_after is not None:
                record["runtime_idle_cpu_pct"] = 100 * (runtime_after - runtime_before) / idle_s
        # The operator's stop: SIGTERM to the JVM, whose shutdown hook stops the application
        # (and, through the plugin, lets the hosted runtime detach).
        stop_start = time.monotonic()
        subprocess.run([str(spark_home() / "sbin" / "stop-connect-server.sh")], env=env,
                       capture_output=True, timeout=60, start_new_session=True)
        wait_for(lambda: not alive(server), STOP_TIMEOUT, "the server's exit")
        record["stop_s"] = time.monotonic() - stop_start
    finally:
        end_round(record, watch, reaper, launched, client, script)
    record["load_after"] = load()
    return record


def end_round(record: dict[str, Any], watch: "Watch", reaper: "Reaper", launched: float,
              *procs: "subprocess.Popen[Any] | None") -> None:
    """A start round's end, also on failure: stops following the logs, kills and reaps what
    it started, and records the leftovers swept and when each milestone came."""
    watch.stop()
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
    record["killed_after"] = reaper.sweep()
    record["milestones_s"] = {name: when - launched for name, (when, _) in watch.seen.items()}
    forget_app(watch)


# -- 2. classic start ----------------------------------------------------------------------------

def classic_child(variant: str, out: Path) -> int:
    """Child mode, run by spark-submit: one session, one job, the CPU figures, the stop."""
    script = time.time()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"bench-connect-{variant}").getOrCreate()
    session = time.time()
    in_process = None
    if variant == "in-process":  # loaded already by the autoload: no import on the clock
        from spark_steward.kernel.runtime import current_runtime

        in_process = current_runtime() is not None
    count = spark.range(1000).count()
    result = time.time()
    if count != 1000:
        raise SystemExit(f"spark.range(1000).count() gave {count}")
    if variant != "in-process":
        runtime_module = sys.modules.get("spark_steward.kernel.runtime")
        in_process = bool(runtime_module and runtime_module.current_runtime())
    jvm = os.getppid()  # PythonRunner starts this script as a child of the driver JVM
    runtimes = runtime_children(jvm)
    times = os.times()
    figures = {"variant": variant, "app_id": spark.sparkContext.applicationId, "script": script,
               "session": session, "result": result, "in_process_runtime": in_process,
               "jvm_is_parent": "java" in cmdline(jvm), "runtime_pids": runtimes,
               "python_cpu_s": times.user + times.system, "jvm_cpu_s": cpu_seconds(jvm),
               "runtime_cpu_s": cpu_seconds(runtimes[0]) if runtimes else None}
    stop = time.time()
    spark.stop()
    figures.update(stop=stop, stopped=time.time())
    out.write_text(json.dumps(figures))
    return 0


def classic_round(variant: str, root: Path, work: Path, reaper: Reaper) -> dict[str, Any]:
    env = spark_env(root, work, autoload=variant == "in-process")
    flags = {"plain": [], "in-process": steward_flags(work, server=False),
             "autoload-off": steward_flags(work, server=True)}[variant]
    out = work / "child.json"
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", MASTER,
           *conf_flags((*COMMON_CONF, f"spark.local.dir={work / 'spark-local'}")), *flags,
           os.path.abspath(__file__), "--classic-child", variant, "--out", str(out)]
    watch = Watch(MILESTONES)
    record: dict[str, Any] = {"part": "classic", "variant": variant, "load_before": load()}
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
            raise Failure(f"the {variant} application ran over {APP_TIMEOUT:.0f} s:\n"
                          f"{watch.last_lines()}") from None
        exited = time.time()
        watch.stop()
        if proc.returncode != 0 or not out.is_file():
            raise Failure(f"the {variant} application exited {proc.returncode}:\n"
                          f"{watch.last_lines()}")
        got = json.loads(out.read_text())
        record["app_id"] = got["app_id"]
        if variant == "in-process" and not got["in_process_runtime"]:
            raise Failure("no runtime attached in-process before getOrCreate returned")
        if variant != "in-process" and got["in_process_runtime"]:
            raise Failure(f"the {variant} driver's Python attached a runtime")
        if variant == "autoload-off" and got["runtime_pids"]:
            raise Failure(f"the plugin hosted a runtime for a PySpark driver: "
                          f"{got['runtime_pids']}")
        if not got["jvm_is_parent"]:
            raise Failure("the script's parent is not the driver JVM: the CPU figures are wrong")
        attached = watch.first("attached")
        if variant != "plain" and attached is not None and attached[1] != got["app_id"]:
            raise Failure(f"the runtime attached to {attached[1]}, the driver runs "
                          f"{got['app_id']}")
        if variant in ("plain", "autoload-off") and attached is not None:
            raise Failure(f"a runtime attached to the {variant} application")
        record.update(
            launched=launched, script_s=got["script"] - launched,
            session_s=got["session"] - launched, first_result_s=got["result"] - launched,
            attached_s=attached[0] - launched if attached else None,
            stop_s=got["stopped"] - got["stop"], exit_s=exited - launched,
            python_cpu_s=got["python_cpu_s"], jvm_cpu_s=got["jvm_cpu_s"],
            runtime_cpu_s=got["runtime_cpu_s"],
            runtime_pid=got["runtime_pids"][0] if got["runtime_pids"] else None,
            attached_before_stop=bool(attached and attached[0] <= got["stop"]))
    finally:
        end_round(record, watch, reaper, launched, proc)
    record["load_after"] = load()
    return record


# -- 3. sessions ---------------------------------------------------------------------------------

#: The session manager's expiry, shortened from its default of 60 minutes so that killed clients'
#: sessions expire within the run, and how often it checks.
SESSION_TIMEOUT_S = 20
MAINTENANCE_S = 2
#: From the last client done or killed until the figures are read: expiry, its check, a margin.
SETTLE_S = SESSION_TIMEOUT_S + MAINTENANCE_S + 8
SESSION_CONF = (f"spark.connect.session.manager.defaultSessionTimeout={SESSION_TIMEOUT_S}s",
                f"spark.connect.session.manager.maintenanceInterval={MAINTENANCE_S}s")
PER_KILLED_CLIENT = 10
#: How often a client that keeps its sessions touches each (Spark's expiry counts from the last
#: request: a live client's idle session would expire before the kill, not after it).
KEEPALIVE_S = 5
ARTIFACT_BYTES = 4096
SAMPLE = 0.5
READY = "READY "
#: Where what is left is looked for, in the order printed (see :func:`server_files`).
FILE_KINDS = ("checkpoints", "artifacts", "driver_files", "executor_files", "scratch",
              "jvm_tmp_other", "steward_other")
STORED = re.compile(r"Block rdd_(\d+)_(\d+) stored as \w+ in memory "
                    r"\(estimated size ([\d.]+) ([KMGT]?i?B)")
DROPPED = re.compile(r"Dropping block rdd_(\d+)_(\d+) from memory")
REMOVED_RDD = re.compile(r"Removing RDD (\d+)")
SESSION_SEEN = re.compile(r"sessionId: ([0-9a-f-]{36}) accessed")
SESSION_CLOSED = re.compile(r"Closing session with userId: .* and sessionId: ([0-9a-f-]{36})")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def sessions_client(url: str, first: int, count: int, rows: int, hold: bool,
                    folder: Path) -> int:
    """Child mode: ``count`` Connect sessions one after the other, each adding a file artifact,
    then checkpointing and caching a DataFrame of its own. Each ends with ``spark.stop()``, or
    (``hold``) is kept with its DataFrames until this process is SIGKILLed, and touched (a conf
    read: ``spark.version`` is answered from a client-side cache after its first call) every
    :data:`KEEPALIVE_S` seconds meanwhile, as a client in use would; if that fails, the process
    exits 3. Prints ``READY`` and the session ids once all ran.

    Each session runs in a thread of its own: pyspark's Connect client binds the DataFrame that
    ``df.checkpoint()`` returns to the thread's active session (the first one created in the
    thread and not stopped), not to ``df``'s, so a second live session in one thread would query
    its checkpoint in the first one's (``DATAFRAME_NOT_FOUND``)."""
    from pyspark.sql.connect.session import SparkSession

    kept: list[tuple[Any, ...]] = []
    ids: list[str] = []
    failed: list[BaseException] = []

    def session(k: int) -> None:
        try:
            spark = SparkSession.builder.remote(url).create()  # a new session every time
            artifact = folder / f"artifact-{k}.txt"
            artifact.write_text(f"session {k}\n" + "x" * ARTIFACT_BYTES)
            spark.addArtifacts(str(artifact), file=True)
            df = spark.range(rows).selectExpr("id * 3 AS x", "id % 7 AS y").checkpoint()
            checked = df.count()
            # A plan of its own per session: Spark's cache manager, which the server's sessions
            # share, would hold one copy of equal plans.
            df2 = spark.range(rows + k).cache()
            cached = df2.count()
            if (checked, cached) != (rows, rows + k):
                raise RuntimeError(f"session {k}: counts {checked}, {cached}")
            ids.append(spark.session_id)
            if hold:
                kept.append((spark, df, df2))
            else:
                spark.stop()
        except BaseException as exc:
            failed.append(exc)
            raise

    def keepalive() -> None:
        while True:
            time.sleep(KEEPALIVE_S)
            for spark, *_ in list(kept):
                try:
                    spark.conf.get("spark.sql.session.timeZone")  # a request to the server
                except Exception as exc:
                    print(f"keep-alive of session {spark.session_id} failed: {exc}", flush=True)
                    os._exit(3)

    if hold:
        threading.Thread(target=keepalive, name="keepalive", daemon=True).start()
    for k in range(first, first + count):
        thread = threading.Thread(target=session, args=(k,), name=f"session-{k}")
        thread.start()
        thread.join()
        if failed:
            return 1  # the thread printed the traceback
    print(READY + json.dumps(ids), flush=True)
    while hold:
        time.sleep(3600)
    return 0


def clip(text: str) -> str:
    """A client's output, for a message: its start (where pyspark puts the error) and its end."""
    return text if len(text) < 4000 else f"{text[:2500]}\n[...]\n{text[-1500:]}"


def rss_mib(pid: int) -> float | None:
    """``pid``'s resident memory (VmRSS) in MiB, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


class Memory:
    """VmRSS of a Connect server JVM, of its hosted runtime, of both ("server"), and of its
    executors (children of the JVM, found anew each time: a runtime may be restarted), and each
    one's peak while sampling every :data:`SAMPLE` seconds."""

    KINDS = ("jvm", "runtime", "server", "executors")

    def __init__(self, server: int) -> None:
        self.server = server
        self.peak = dict.fromkeys(self.KINDS, 0.0)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def now(self) -> dict[str, float]:
        children = [p for p in pids() if ppid(p) == self.server]
        executors = [p for p in children if "CoarseGrainedExecutorBackend" in cmdline(p)]
        runtimes = [p for p in children if HOST_MODULE in cmdline(p)]
        jvm = rss_mib(self.server) or 0.0
        runtime = sum(rss_mib(p) or 0.0 for p in runtimes)
        return {"jvm": jvm, "runtime": runtime, "server": jvm + runtime,
                "executors": sum(rss_mib(p) or 0.0 for p in executors)}

    def start(self) -> None:
        def sample() -> None:
            while not self.done.is_set():
                got = self.now()
                with self.lock:
                    for kind, value in got.items():
                        self.peak[kind] = max(self.peak[kind], value)
                self.done.wait(SAMPLE)
        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()

    def stop(self) -> dict[str, float]:
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        with self.lock:
            return dict(self.peak)


def tree(folders: Iterable[Path], skip: Callable[[Path], bool] = lambda path: False
         ) -> dict[str, int]:
    """Every file under ``folders`` (not followed into symlinks): path -> size."""
    found: dict[str, int] = {}
    for folder in folders:
        for parent, _, names in os.walk(folder):
            for name in names:
                path = Path(parent, name)
                try:
                    if not skip(path) and path.is_file():
                        found[str(path)] = path.stat().st_size
                except OSError:
                    continue
    return found


def rdd_folders(checkpoints: Path) -> int:
    return sum(1 for _, dirs, _ in os.walk(checkpoints) for d in dirs if d.startswith("rdd-"))


def server_files(work: Path, app: str, checkpoints: Path,
                 steward: bool) -> dict[str, dict[str, int]]:
    """The files a Connect server keeps, by kind: its checkpoint dir; Spark Connect's artifact
    store (``artifacts-*`` in the JVM's ``java.io.tmpdir``, a folder of this run); the driver's
    copies of files added to the SparkContext (``userFiles-*`` in ``spark.local.dir``); what the
    executors fetched into their work dirs (not their logs); the rest of ``spark.local.dir``
    (block manager and shuffle files, driver's and executors'); the rest of the JVM's tmpdir;
    and (steward) the rest of spark-steward's storage and local dir."""
    local, tmp = work / "spark-local", work / "jvm-tmp"
    executors = spark_home() / "work" / app
    steward_dirs = [work / "steward-storage", work / "steward-local"] if steward else []
    return {
        "checkpoints": tree([checkpoints]),
        "artifacts": tree(tmp.glob("artifacts-*")),
        "driver_files": tree(local.glob("*/userFiles-*")),
        "executor_files": tree([executors], skip=lambda p: p.parent.parent == executors
                               and p.name in ("stdout", "stderr")),
        "scratch": tree([local], skip=lambda p: any(part.startswith("userFiles-")
                                                    for part in p.relative_to(local).parts)),
        "jvm_tmp_other": tree([tmp], skip=lambda p: p.relative_to(tmp).parts[0]
                              .startswith("artifacts-")),
        "steward_other": tree(steward_dirs, skip=lambda p: checkpoints in p.parents),
    }


def left(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
         roots: list[Path]) -> dict[str, Any]:
    """Per kind, the files there now that were not there before: how many, KiB, a few paths."""
    def short(path: str) -> str:
        for root in roots:
            if path.startswith(str(root) + os.sep):
                return path[len(str(root)) + 1:]
        return path

    got: dict[str, Any] = {}
    for kind in FILE_KINDS:
        new = {path: size for path, size in after[kind].items() if path not in before[kind]}
        got[f"left_{kind}_files"] = len(new)
        got[f"left_{kind}_kib"] = sum(new.values()) / 1024
        got[f"left_{kind}_examples"] = [short(path) for path in sorted(new)[:3]]
    got["left_files"] = sum(got[f"left_{kind}_files"] for kind in FILE_KINDS)
    got["left_kib"] = sum(got[f"left_{kind}_kib"] for kind in FILE_KINDS)
    return got


def cached_rdds(executor_logs: Iterable[Path]) -> tuple[int, float]:
    """From the executors' logs: the RDDs with blocks cached and never removed (``Removing RDD``),
    and the KiB of their blocks still in memory (by the block manager's estimates)."""
    blocks: dict[tuple[str, str], float] = {}
    removed: set[str] = set()
    for log in executor_logs:
        for line in log.read_text(errors="replace").splitlines():
            if match := STORED.search(line):
                blocks[(match[1], match[2])] = float(match[3]) * UNITS.get(match[4], 1)
            elif match := DROPPED.search(line):
                blocks[(match[1], match[2])] = 0.0  # on disk now, or gone: not in memory
            elif match := REMOVED_RDD.search(line):
                removed.add(match[1])
    held = {(rdd, part): size for (rdd, part), size in blocks.items() if rdd not in removed}
    return len({rdd for rdd, _ in held}), sum(held.values()) / 1024


def server_log(work: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((work / "logs").glob("*.out")))


def log_sessions(log: str, earlier: set[str]) -> tuple[int, int]:
    """From the server log: the sessions seen but not in ``earlier``, and those of them never
    closed."""
    seen = set(SESSION_SEEN.findall(log)) - earlier
    return len(seen), len(seen - set(SESSION_CLOSED.findall(log)))


def steward_sessions(storage: Path, app: str) -> tuple[int | None, int | None]:
    """``spark-steward status --json``: the application's open and closed Connect sessions at
    its last heartbeat."""
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                          storage.as_uri(), "--json"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    for application in json.loads(out)["applications"]:
        if application["app_id"] == app:
            sessions = application.get("sessions") or {}
            return sessions.get("open_total", 0), sessions.get("closed_total", 0)
    return None, None


def sessions_round(variant: str, root: Path, work: Path, reaper: Reaper, sessions: int,
                   rows: int) -> dict[str, Any]:
    steward = variant == "steward"
    env = spark_env(root, work, autoload=False)
    port = free_port()
    url = f"sc://{LOOPBACK}:{port}"
    tmp = work / "jvm-tmp"
    tmp.mkdir()
    storage = work / "steward-storage"
    conf = [*SESSION_CONF, f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={tmp}"]
    if not steward:
        conf.append(f"spark.checkpoint.dir={work / 'checkpoints'}")  # df.checkpoint() needs one
    cmd = connect_command(work, port, steward_flags(work, server=True) if steward else [], conf)
    pid_file = server_pid_file(work, env)
    client_env = connect_client_env(autoload_off=True)
    artifacts = work / "client-artifacts"
    artifacts.mkdir()
    clean = sessions // 2
    batches = [(0, clean, False), *((first, min(PER_KILLED_CLIENT, sessions - first), True)
                                    for first in range(clean, sessions, PER_KILLED_CLIENT))]
    watch = Watch(MILESTONES)
    record: dict[str, Any] = {"part": "sessions", "variant": variant, "load_before": load(),
                              "sessions": sessions, "clean": clean, "killed": sessions - clean,
                              "rows": rows}
    server = -1
    launched = time.time()
    procs: list[subprocess.Popen[bytes]] = []
    memory: Memory | None = None

    def launch(args: list[str], log: Path, environ: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, env=environ, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        reaper.groups.add(proc.pid)
        procs.append(proc)
        return proc

    try:
        launched = time.time()
        launch(cmd, work / "start-script.log", env)
        watch.follow_files(work / "logs", "*.out")

        def server_alive() -> None:
            nonlocal server
            if server < 0 and pid_file.is_file() and pid_file.read_text().strip():
                server = int(pid_file.read_text())
            if server > 0 and not alive(server):
                raise Failure(f"the {variant} Connect server died:\n{watch.last_lines()}")

        # A first client (one job, then spark.stop()) waits for the port: the executor has
        # registered and fetched the server's jars when the baseline below is taken.
        warmup = launch([sys.executable, os.path.abspath(__file__), "--connect-client", url,
                         "--out", str(work / "warmup.json")], work / "warmup.log", client_env)

        def warmed() -> bool:
            if warmup.poll() is None:
                return False
            if warmup.returncode != 0:
                raise Failure(f"the first client exited {warmup.returncode}:\n"
                              f"{(work / 'warmup.log').read_text()[-3000:]}\n"
                              f"server log:\n{watch.last_lines()}")
            return True

        wait_for(warmed, APP_TIMEOUT, "the first client's job", server_alive)
        app = wait_for(lambda: watch.first("app"), 60, "the server's application id")[1]
        record["app_id"] = app
        if steward:
            attached = wait_for(lambda: watch.first("attached"), ATTACH_TIMEOUT,
                                "the hosted runtime's 'attached to'", server_alive)[1]
            if attached != app:
                raise Failure(f"the runtime attached to {attached}, the server runs {app}")
        server_alive()
        checkpoints = storage / "apps" / app / "spark-checkpoints" if steward \
            else work / "checkpoints"
        before = server_files(work, app, checkpoints, steward)
        earlier = set(SESSION_SEEN.findall(server_log(work)))  # the first client's
        memory = Memory(server)
        record["rss_before"] = memory.now()
        memory.start()
        # The clients: the clean sessions in one process, the killed ones by PER_KILLED_CLIENT.
        started = time.monotonic()
        clients: list[tuple[subprocess.Popen[bytes], Path, bool]] = []
        for first, count, hold in batches:
            log = work / f"client-{first}.log"
            clients.append((launch([sys.executable, os.path.abspath(__file__), "--sessions-client",
                                    url, "--first", str(first), "--count", str(count), "--rows",
                                    str(rows), "--out", str(artifacts),
                                    *(["--hold"] if hold else [])], log, client_env), log, hold))
        ids: list[str] = []

        def ready() -> bool:
            server_alive()
            for proc, log, hold in clients:
                text = log.read_text(errors="replace")
                if READY not in text or (not hold and proc.poll() is None):
                    if proc.poll() is not None:
                        raise Failure(f"a client exited {proc.returncode}:\n{clip(text)}\n"
                                      f"server log:\n{watch.last_lines()}")
                    return False
                if not hold and proc.returncode != 0:
                    raise Failure(f"the clean client exited {proc.returncode}:\n{clip(text)}")
            return True

        try:
            wait_for(ready, APP_TIMEOUT + 10 * sessions, "the clients' sessions")
        except Failure as exc:
            raise Failure(f"{exc}\n" + "".join(
                f"{log.name}:\n{clip(log.read_text(errors='replace'))}\n"
                for _, log, _ in clients) + f"server log:\n{watch.last_lines()}") from None
        for proc, log, hold in clients:
            line = next(ln for ln in log.read_text(errors="replace").splitlines()
                        if ln.startswith(READY))
            ids += json.loads(line[len(READY):])
        if len(set(ids)) != sessions:
            raise Failure(f"expected {sessions} distinct sessions, the clients had {len(set(ids))}")
        record["clients_s"] = time.monotonic() - started
        for proc, log, hold in clients:
            if hold and proc.poll() is not None:
                raise Failure(f"a client that keeps its sessions exited {proc.returncode} before "
                              f"the kill:\n{clip(log.read_text(errors='replace'))}")
        for proc, _, hold in clients:
            if hold:
                proc.kill()
                proc.wait()
        killed = time.monotonic()
        record["rdd_folders_at_kill"] = rdd_folders(checkpoints)
        if record["rdd_folders_at_kill"] < sessions - clean:  # the killed sessions' are there
            raise Failure(f"{record['rdd_folders_at_kill']} rdd-* folders in {checkpoints} for "
                          f"{sessions - clean} open sessions: the checkpoints went elsewhere, or "
                          f"the sessions closed before their clients were killed")
        # Expiry of the killed clients' sessions; meanwhile, when the last checkpoint folder went.
        gone: float | None = None
        while (waited := time.monotonic() - killed) < SETTLE_S:
            server_alive()
            if gone is None and not rdd_folders(checkpoints):
                gone = waited
            time.sleep(SAMPLE)
        record["rdd_folders_gone_s"] = gone
        record["rss_peak"] = memory.stop()
        record["rss_after"] = memory.now()
        after = server_files(work, app, checkpoints, steward)
        record.update(left(before, after, [work, spark_home() / "work"]))
        record["rdd_folders"] = rdd_folders(checkpoints)
        record["cached_rdds"], record["cached_kib"] = cached_rdds(
            (spark_home() / "work" / app).glob("*/stderr"))
        record["sessions_seen_log"], record["sessions_open_log"] = log_sessions(
            server_log(work), earlier)
        record["steward_open"], record["steward_closed"] = \
            steward_sessions(storage, app) if steward else (None, None)
        for kind in Memory.KINDS:
            for when in ("before", "peak", "after"):
                record[f"{kind}_rss_{when}"] = record[f"rss_{when}"][kind] or None
        stop_start = time.monotonic()
        subprocess.run([str(spark_home() / "sbin" / "stop-connect-server.sh")], env=env,
                       capture_output=True, timeout=60, start_new_session=True)
        wait_for(lambda: not alive(server), STOP_TIMEOUT, "the server's exit")
        record["stop_s"] = time.monotonic() - stop_start
    finally:
        if memory is not None:
            memory.stop()
        watch.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        record["killed_after"] = reaper.sweep()
        record["milestones_s"] = {name: when - launched
                                  for name, (when, _) in watch.seen.items()}
        forget_app(watch)
    record["load_after"] = load()
    return record


# -- the report ----------------------------------------------------------------------------------

def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": values}


def cell(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}..{max(values):.{digits}f})")


def column(records: list[dict[str, Any]], variant: str, field: str) -> list[float]:
    return [float(r[field]) for r in records if r["variant"] == variant and r.get(field) is not None]


def per_round(records: list[dict[str, Any]], variant: str, field: str) -> list[float]:
    """``variant``'s ``field`` over plain's, per round."""
    by: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["round"], {})[r["variant"]] = r
    return [float(got[variant][field]) / float(got["plain"][field]) for got in by.values()
            if variant in got and "plain" in got and got[variant].get(field) is not None
            and got["plain"].get(field)]


def table(title: str, records: list[dict[str, Any]], variants: tuple[str, ...],
          fields: list[tuple[str, str]], ratios: list[tuple[str, str]],
          digits: int = 2) -> dict[str, Any]:
    """Prints one markdown table: every field's median (min..max), then the ratios vs plain."""
    print(f"\n{title}\n")
    head = ["variant", *(label for label, _ in fields), *(label for label, _ in ratios)]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    summary: dict[str, Any] = {}
    for v in variants:
        cells = [cell(column(records, v, f), digits) for _, f in fields]
        got: dict[str, Any] = {f: stats(column(records, v, f)) for _, f in fields}
        for _, f in ratios:
            values = per_round(records, v, f)
            medians = column(records, v, f), column(records, "plain", f)
            got[f"{f}/plain"] = {**stats(values), "of_medians": (
                statistics.median(medians[0]) / statistics.median(medians[1])
                if all(medians) else None)}
            cells.append("**" + cell(values, 3) + "**" if v != "plain" else "1")
        print(f"| {v} | " + " | ".join(cells) + " |")
        summary[v] = got
    return summary


def extra_stats(records: list[dict[str, Any]], variants: tuple[str, ...],
                fields: list[str]) -> dict[str, Any]:
    return {v: {f: stats(column(records, v, f)) for f in fields} for v in variants}


def sessions_report(records: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    first = records[0]
    killed_clients = -(-first["killed"] // PER_KILLED_CLIENT)
    print(f"\nsessions: {rounds} rounds, one fresh Connect server per variant and round; "
          f"{first['sessions']} client sessions per server: {first['clean']} end with "
          f"spark.stop() (one client process), {first['killed']} belong to {killed_clients} client"
          f" process(es) SIGKILLed once all ran. Each session: spark.addArtifacts(<a "
          f"{ARTIFACT_BYTES // 1024} KiB file>, file=True), spark.range({first['rows']})"
          f".selectExpr(...).checkpoint().count(), spark.range({first['rows']} + k).cache()"
          f".count(). Both servers: spark.connect.session.manager.defaultSessionTimeout="
          f"{SESSION_TIMEOUT_S}s (the default is 60 min) and maintenanceInterval={MAINTENANCE_S}s;"
          f" plain has spark.checkpoint.dir set (plain Connect's df.checkpoint() needs one), "
          f"steward the `conf --server` flags and no checkpoint dir. Figures read {SETTLE_S} s "
          f"after the last client was done or killed; files: those not there before the clients"
          f" (after a first client's job); median (min..max); ratio = median of the per-round "
          f"ratios to plain (min..max)")
    kinds = [("checkpoints", "checkpoints"), ("artifact store", "artifacts"),
             ("driver's file copies", "driver_files"), ("executor work dirs", "executor_files"),
             ("spark.local.dir rest", "scratch"), ("JVM tmpdir rest", "jvm_tmp_other"),
             ("steward's own", "steward_other")]
    summary: dict[str, Any] = {}
    summary["files"] = table(
        "sessions: files left on the server", records, SESSION_VARIANTS,
        [*((label, f"left_{kind}_files") for label, kind in kinds), ("all", "left_files")],
        [("checkpoints / plain", "left_checkpoints_files"), ("all / plain", "left_files")],
        digits=0)
    summary["kib"] = table(
        "sessions: KiB left on the server", records, SESSION_VARIANTS,
        [*((label, f"left_{kind}_kib") for label, kind in kinds), ("all", "left_kib")],
        [("checkpoints / plain", "left_checkpoints_kib"), ("all / plain", "left_kib")],
        digits=1)
    summary["state"] = table(
        "sessions: what the server holds", records, SESSION_VARIANTS,
        [("rdd-* folders at the kill", "rdd_folders_at_kill"), ("rdd-* folders", "rdd_folders"),
         ("cached RDDs (executor log)", "cached_rdds"), ("their KiB in memory", "cached_kib"),
         ("sessions seen (server log)", "sessions_seen_log"),
         ("never closed (server log)", "sessions_open_log"),
         ("open (steward status)", "steward_open"),
         ("closed (steward status, with the first client's)", "steward_closed")], [], digits=0)
    summary["memory"] = table(
        "sessions: server memory, VmRSS MiB: before the clients (after a first job), peak while "
        "they ran and until the figures were read, then", records, SESSION_VARIANTS,
        [(f"{label} {when}", f"{kind}_rss_{when}")
         for label, kind in (("JVM", "jvm"), ("hosted runtime", "runtime"),
                             ("executor", "executors"))
         for when in ("before", "peak", "after")],
        [("JVM + runtime peak / plain", "server_rss_peak"),
         ("JVM + runtime after / plain", "server_rss_after")], digits=0)
    print("\nJVM + hosted runtime, MiB before / peak / after: " + "; ".join(
        f"{v} " + " / ".join(cell(column(records, v, f"server_rss_{when}"), 0)
                             for when in ("before", "peak", "after"))
        for v in SESSION_VARIANTS))
    summary["extra"] = extra_stats(records, SESSION_VARIANTS, [
        "clients_s", "rdd_folders_gone_s", "stop_s", "server_rss_before", "server_rss_peak",
        "server_rss_after"])
    steward = [r for r in records if r["variant"] == "steward"]
    met = sum(1 for r in steward if r["left_checkpoints_files"] == 0)
    print(f"\ntarget, no checkpoint file left by steward {SETTLE_S} s after the last client: met "
          f"in {met} of {len(steward)} rounds; the last rdd-* folder was gone "
          f"{cell(column(records, 'steward', 'rdd_folders_gone_s'), 1)} s after the kill; plain "
          f"left {cell(column(records, 'plain', 'left_checkpoints_files'), 0)} checkpoint files in"
          f" {cell(column(records, 'plain', 'rdd_folders'), 0)} rdd-* folders")
    print(f"clients ran their sessions in: plain {cell(column(records, 'plain', 'clients_s'), 1)} s"
          f", steward {cell(column(records, 'steward', 'clients_s'), 1)} s")
    for v in SESSION_VARIANTS:
        last = [r for r in records if r["variant"] == v][-1]
        examples = [f"{kind}: {last[f'left_{kind}_examples'][0]}" for _, kind in kinds
                    if last[f"left_{kind}_examples"]]
        if examples:
            print(f"{v} left, e.g. (round {last['round'] + 1}):\n  " + "\n  ".join(examples))
    return summary


def report(records: list[dict[str, Any]], rounds: int, session_rounds: int,
           idle: float) -> dict[str, Any]:
    import pyspark

    import spark_steward

    loads = [x for r in records for x in (r["load_before"], r["load_after"])]
    print(f"\nbench/connect.py, {MASTER}: pyspark {pyspark.__version__}, spark-steward from "
          f"{os.path.dirname(spark_steward.__file__)}, {os.cpu_count()} cores, 1-minute load "
          f"average around the applications {min(loads):.2f}..{max(loads):.2f}")
    summary: dict[str, Any] = {}
    sessions = [r for r in records if r["part"] == "sessions"]
    if sessions:
        summary["sessions"] = sessions_report(sessions, session_rounds)
    records = [r for r in records if r["part"] != "sessions"]
    if records:
        print(f"\nstart: {rounds} rounds, one fresh application per variant and round; seconds "
              f"from the launch, median (min..max); ratio = median of the per-round ratios to "
              f"plain (min..max)")
    connect = [r for r in records if r["part"] == "connect"]
    if connect:
        summary["connect"] = table(
            "connect start: start-connect-server.sh -> a client's first spark.range(1000).count()",
            connect, CONNECT_VARIANTS,
            [("port accepting", "accepting_s"), ("first job result", "first_result_s"),
             ("runtime attached", "attached_s"), ("stop-connect-server.sh -> exit", "stop_s")],
            [("first job / plain", "first_result_s"), ("accepting / plain", "accepting_s")])
        summary["connect_cpu"] = extra_stats(connect, CONNECT_VARIANTS, [
            "runtime_cpu_s", "runtime_idle_cpu_pct", "jvm_cpu_s", "jvm_idle_cpu_pct"])
        print(f"\nhosted runtime CPU s from its start until all of the above was in: "
              f"{cell(column(connect, 'steward', 'runtime_cpu_s'))}; idle over {idle:.0f} s: "
              f"runtime {cell(column(connect, 'steward', 'runtime_idle_cpu_pct'), 1)} % of a "
              f"core; server JVM plain {cell(column(connect, 'plain', 'jvm_idle_cpu_pct'), 1)} %,"
              f" steward {cell(column(connect, 'steward', 'jvm_idle_cpu_pct'), 1)} %")
        print(f"server JVM CPU s until then: plain {cell(column(connect, 'plain', 'jvm_cpu_s'))},"
              f" steward {cell(column(connect, 'steward', 'jvm_cpu_s'))}")
    classic = [r for r in records if r["part"] == "classic"]
    if classic:
        summary["classic"] = table(
            "classic start: spark-submit of getOrCreate + spark.range(1000).count() + stop",
            classic, CLASSIC_VARIANTS,
            [("session", "session_s"), ("first job result", "first_result_s"),
             ("runtime attached", "attached_s"), ("spark.stop()", "stop_s"),
             ("spark-submit exit", "exit_s")],
            [("first job / plain", "first_result_s"), ("exit / plain", "exit_s")])
        summary["classic_cpu"] = table(
            "classic CPU s until the first job's result (read just before spark.stop())",
            classic, CLASSIC_VARIANTS,
            [("driver Python", "python_cpu_s"), ("driver JVM", "jvm_cpu_s"),
             ("hosted runtime", "runtime_cpu_s")], [])
    if records:
        print("\nwhere the time goes, median s from the launch of the log lines' first appearance:"
              " driver RPC up ('sparkDriver'), hosted runtime started, executor registered, "
              "runtime attached, Connect server started")
    names = ("driver_port", "runtime_started", "executor_registered", "attached",
             "connect_started")
    for part, variants in (("connect", CONNECT_VARIANTS), ("classic", CLASSIC_VARIANTS)):
        for v in variants:
            got = [r["milestones_s"] for r in records if r["part"] == part and r["variant"] == v]
            if got:
                print(f"  {part:<8} {v:<11}" + "  ".join(
                    f"{name} {statistics.median(vals):.2f}" for name in names
                    if (vals := [m[name] for m in got if name in m])))
    if records:
        summary["milestones"] = {
            part: extra_stats([{"variant": r["variant"], **r["milestones_s"]} for r in records
                               if r["part"] == part], variants, list(MILESTONES))
            for part, variants in (("connect", CONNECT_VARIANTS), ("classic", CLASSIC_VARIANTS))}
    killed = [(r["part"], r["variant"], r["round"], r["killed_after"])
              for r in [*sessions, *records] if r["killed_after"]]
    if killed:
        print(f"\nneeded SIGKILL after the application had ended: {killed}")
    return summary


# -- main ----------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=MEASUREMENTS,
                        help="one of the two measurements (default: both)")
    parser.add_argument("--rounds", type=int,
                        help="rounds of each measurement (default: 5 of start, 3 of sessions)")
    parser.add_argument("--parts", type=lambda s: s.split(","), default=list(PARTS),
                        help="start: comma-separated, of connect, classic")
    parser.add_argument("--idle", type=float, default=5.0, metavar="SECONDS",
                        help="start: idle time per Connect server for the idle CPU figures (5)")
    parser.add_argument("--sessions", type=int, default=100,
                        help="sessions: client sessions per server, half killed (100)")
    parser.add_argument("--rows", type=int, default=10_000,
                        help="sessions: rows each session checkpoints and caches (10000)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--connect-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--classic-child", choices=CLASSIC_VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--sessions-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.connect_client:
        return connect_client(args.connect_client, Path(args.out))
    if args.classic_child:
        return classic_child(args.classic_child, Path(args.out))
    if args.sessions_client:
        return sessions_client(args.sessions_client, args.first, args.count, args.rows,
                               args.hold, Path(args.out))
    if unknown := [p for p in args.parts if p not in PARTS]:
        parser.error(f"unknown parts {unknown}")
    if args.sessions < 2 or args.rows < 1:
        parser.error("--sessions needs at least 2 (one clean, one killed), --rows at least 1")
    start_rounds = 0 if args.only == "sessions" else (args.rounds or 5)
    session_rounds = 0 if args.only == "start" else (args.rounds or 3)

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    load_start = load()
    if load_start > 2.5:
        progress(f"warning: 1-minute load average {load_start:.2f}: something else is running, "
                 "the figures will carry it")
    root = Path(tempfile.mkdtemp(prefix="bench-connect-"))
    (root / "conf").mkdir()  # SPARK_CONF_DIR: empty, Spark's defaults
    reaper = Reaper()
    records: list[dict[str, Any]] = []
    began = time.monotonic()
    try:
        for round_no in range(start_rounds):
            for part, variants in (("connect", CONNECT_VARIANTS), ("classic", CLASSIC_VARIANTS)):
                if part not in args.parts:
                    continue
                order = [variants[(i + round_no) % len(variants)] for i in range(len(variants))]
                for variant in order:
                    work = root / f"{part}-{variant}-{round_no}"
                    work.mkdir()
                    if part == "connect":
                        record = connect_round(variant, root, work, reaper, args.idle)
                    else:
                        record = classic_round(variant, root, work, reaper)
                    shutil.rmtree(work, ignore_errors=True)
                    record["round"] = round_no
                    records.append(record)
                    attached = record.get("attached_s")
                    progress(f"round {round_no + 1}/{start_rounds} {part:<7} {variant:<10} first "
                             f"job {record['first_result_s']:6.2f}s  attached "
                             + (f"{attached:6.2f}s" if attached is not None else "     -")
                             + (f"  exit {record['exit_s']:6.2f}s" if "exit_s" in record else
                                f"  stop {record['stop_s']:5.2f}s")
                             + f"  (load {record['load_before']:.2f})")
        for round_no in range(session_rounds):
            variants = SESSION_VARIANTS
            for variant in [variants[(i + round_no) % len(variants)]
                            for i in range(len(variants))]:
                work = root / f"sessions-{variant}-{round_no}"
                work.mkdir()
                record = sessions_round(variant, root, work, reaper, args.sessions, args.rows)
                shutil.rmtree(work, ignore_errors=True)
                record["round"] = round_no
                records.append(record)
                progress(f"round {round_no + 1}/{session_rounds} sessions {variant:<8} clients "
                         f"{record['clients_s']:5.1f}s  left: checkpoint files "
                         f"{record['left_checkpoints_files']}, all files {record['left_files']}"
                         f" ({record['left_kib']:.0f} KiB), cached RDDs {record['cached_rdds']}, "
                         f"open sessions {record['sessions_open_log']}  JVM RSS "
                         f"{record['jvm_rss_before']:.0f}/{record['jvm_rss_peak']:.0f}/"
                         f"{record['jvm_rss_after']:.0f} MiB  (load {record['load_before']:.2f})")
    except (KeyboardInterrupt, Terminated):
        progress("interrupted: stopping what this run started")
        raise
    finally:
        killed = reaper.sweep(grace=0)
        if killed:
            progress(f"SIGKILLed at the end: {killed}")
        shutil.rmtree(root, ignore_errors=True)
    summary = report(records, start_rounds, session_rounds, args.idle)
    print(f"\n{len(records)} applications in {time.monotonic() - began:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": {k: v for k, v in vars(args).items()
                      if k in ("only", "rounds", "parts", "idle", "sessions", "rows")},
             "rounds": {"start": start_rounds, "sessions": session_rounds},
             "master": MASTER, "load_start": load_start, "load_end": load(),
             "session_timeout_s": SESSION_TIMEOUT_S, "maintenance_interval_s": MAINTENANCE_S,
             "settle_s": SETTLE_S, "records": records, "summary": summary}, indent=1) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
