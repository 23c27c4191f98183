"""A real Spark Connect server for the tests: pyspark's own ``sbin/start-connect-server.sh``,
on loopback only, with a local-cluster master, and clients in other processes.

Everything it starts is stopped when the test ends, also on failure: the server (asked with
``stop-connect-server.sh``, then SIGKILL), the runtime spark-steward hosts beside it, and the
executors of its application.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.class_cache import install

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST_MODULE = "spark_steward.kernel.host"
IDENT = "steward-tests"
_APP_ID = re.compile(r"\b(app-\d{14}-\d{4}|local-\d{13})\b")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def alive(pid: int) -> bool:
    """``pid`` runs and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def wait_until(predicate: Any, timeout: float, what: str, step: float = 0.1) -> Any:
    """``predicate()``'s first truthy value within ``timeout`` seconds, else AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(step)


class ConnectServer:
    """One Connect server started by ``start-connect-server.sh`` with ``flags``."""

    def __init__(self, work: Path, flags: list[str], *, master: str = "local-cluster[1,1,1024]",
                 env: dict[str, str] | None = None, spark_home: Path | None = None) -> None:
        self.work = work
        self.home = spark_home or _spark_home()
        self.port = _free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.logs = work / "logs"
        self.env = dict(os.environ, SPARK_LOG_DIR=str(self.logs), SPARK_PID_DIR=str(work),
                        SPARK_IDENT_STRING=IDENT, SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                        SPARK_HOME=str(self.home))
        install(self.env)
        self.env.pop("SPARK_REMOTE", None)
        self.env.update(env or {})
        # pip's pyspark 4.0 ships the server jar without the script, which only runs this.
        script = self.home / "sbin" / "start-connect-server.sh"
        self._daemon = script.is_file()
        launcher = [str(script)] if self._daemon else [
            str(self.home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        self._process: subprocess.Popen[bytes] | None = None
        self.cmd = [*launcher,
                    "--master", master,
                    "--conf", "spark.driver.host=127.0.0.1",
                    "--conf", "spark.driver.bindAddress=127.0.0.1",
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                    "--conf", f"spark.connect.grpc.binding.port={self.port}",
                    "--conf", "spark.ui.enabled=false",
                    "--conf", "spark.executor.cores=1",
                    *flags, *([] if self._daemon else ["spark-internal"])]
        self.pid = -1
        self._children: set[int] = set()
        self._clients: list[subprocess.Popen[str]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 150) -> "ConnectServer":
        """Starts the server and waits until it accepts gRPC connections."""
        if self._daemon:
            done = subprocess.run(self.cmd, env=self.env, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            pid_file = self.work / f"spark-{IDENT}-{SERVER_CLASS}-1.pid"
            self.pid = int(wait_until(lambda: pid_file.is_file() and pid_file.read_text().strip(),
                                      30, "the server's pid file"))
        else:  # spark-submit execs the JVM: the child is the server
            self.logs.mkdir(parents=True, exist_ok=True)
            with open(self.logs / "server.out", "wb") as out:
                self._process = subprocess.Popen(self.cmd, env=self.env, stdout=out,
                                                 stderr=subprocess.STDOUT)
            self.pid = self._process.pid

        def accepting() -> bool:
            assert alive(self.pid), f"the Connect server died:\n{self.log()[-4000:]}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                return False

        wait_until(accepting, timeout, "the Connect server's port", step=0.25)
        return self

    def stop(self, timeout: float = 90) -> None:
        """``stop-connect-server.sh`` (the application ends as an operator ends it), waiting
        until the JVM is gone; SIGKILL after ``timeout``."""
        if self.pid > 0 and alive(self.pid):
            self._remember_children()
            if self._daemon:
                subprocess.run([str(self.home / "sbin" / "stop-connect-server.sh")],
                               env=self.env, capture_output=True, timeout=60)
            else:  # what spark-daemon.sh stop sends
                os.kill(self.pid, signal.SIGTERM)
            try:
                wait_until(lambda: not alive(self.pid), timeout, "the server's exit", step=0.2)
            finally:
                self.kill_everything()

    def kill(self) -> None:
        """SIGKILL of the server JVM (what it started is left to die on its own)."""
        self._remember_children()
        os.kill(self.pid, signal.SIGKILL)
        wait_until(lambda: not alive(self.pid), 10, "the killed server's exit")

    def kill_everything(self) -> None:
        """The server, its hosted runtime and its executors: SIGKILL to whatever still runs."""
        self._remember_children()
        for client in self._clients:
            if client.poll() is None:
                client.kill()
                client.wait(10)
        for pid in [self.pid, *self._children]:
            if pid > 0 and alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._process is not None:
            self._process.wait(10)

    def _remember_children(self) -> None:
        app = self.app_id(wait=0)
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            line = _cmdline(pid)
            if _ppid(pid) == self.pid or (app and "CoarseGrainedExecutorBackend" in line
                                          and app in line):
                self._children.add(pid)

    def __enter__(self) -> "ConnectServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill_everything()

    # -- what it shows -----------------------------------------------------------------------

    def log(self) -> str:
        """The server's log (its .out file) so far."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.out")))

    def app_id(self, wait: float = 60) -> str:
        """The application id the server runs (from its log)."""
        def found() -> str:
            match = _APP_ID.search(self.log())
            return match.group(0) if match else ""
        if wait <= 0:
            return found()
        return str(wait_until(found, wait, "the server's application id", step=0.25))

    def runtime_pids(self) -> list[int]:
        """The hosted runtime processes: the server's children running the host module."""
        return sorted(int(n) for n in os.listdir("/proc") if n.isdigit()
                      and _ppid(int(n)) == self.pid and HOST_MODULE in _cmdline(int(n)))

    # -- clients -----------------------------------------------------------------------------

    def held_client(self, code: str, *,
                    env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], Any]:
        """Runs ``code`` in a new client process that then holds its session open (until
        killed); returns the process and what the code assigned to ``result``."""
        script = ("import json, sys, time\nfrom pyspark.sql import SparkSession\n"
                  f"spark = SparkSession.builder.remote({self.url!r}).getOrCreate()\n"
                  "result = None\n" + code +
                  "\nprint('RESULT=' + json.dumps(result), flush=True)\ntime.sleep(3600)\n")
        full_env = dict(os.environ)
        full_env.pop("SPARK_REMOTE", None)
        full_env.update(env or {})
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=full_env)
        self._clients.append(proc)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("RESULT="):
                return proc, json.loads(line[len("RESULT="):])
        raise AssertionError(f"the held client ended: {proc.stderr.read()[-4000:] if proc.stderr else ''}")

    def client(self, code: str, *, timeout: float = 120,
               env: dict[str, str] | None = None) -> Any:
        """Runs ``code`` in a new Python process with ``spark`` a Connect session to this
        server; returns what the code assigned to ``result`` (JSON). ``env`` adds to the
        client's environment (another line's pyspark on PYTHONPATH, say)."""
        script = ("import json, sys\nfrom pyspark.sql import SparkSession\n"
                  f"spark = SparkSession.builder.remote({self.url!r}).getOrCreate()\n"
                  "result = None\n" + code + "\nprint('RESULT=' + json.dumps(result))\n")
        full_env = dict(os.environ, SPARK_STEWARD_AUTOLOAD="1")
        full_env.pop("SPARK_REMOTE", None)
        full_env.update(env or {})
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=timeout, env=full_env)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT=")]
        assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
        return json.loads(lines[-1][len("RESULT="):])


# -- what tests ask of a server and its storage ------------------------------------------------

def server_flags(storage: Path, local: Path, *extra: str) -> list[str]:
    """``spark-steward conf --server``'s flags, as an operator would paste them."""
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--server",
                          "--storage", storage.as_uri(), "--local-dir", str(local)],
                         check=True, capture_output=True, text=True).stdout.split()
    out += ["--conf", "spark.steward.heartbeat.interval=1s"]
    for item in extra:
        out += ["--conf", item]
    return out


def checkpoint_folders(storage: Path, app: str) -> set[str]:
    """Ground truth: the rdd-<id> folders in the server's checkpoint dir."""
    return {p.name for p in (storage / "apps" / app / "spark-checkpoints").glob("*/rdd-*")}


def sessions_of(storage: Path) -> dict[str, object]:
    """The one application's sessions as `spark-steward status --json` reports them."""
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                          storage.as_uri(), "--json"], capture_output=True, text=True, check=True)
    [app] = json.loads(out.stdout)["applications"]
    return app["sessions"] or {"open": [], "open_total": 0, "closed_total": 0}
