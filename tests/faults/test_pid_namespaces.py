"""Liveness across PID namespaces, through real processes: a job runner in a container that
shares the host's name but not its PID namespace (``unshare --pid --mount-proc``) sees no
process with a live driver's pid. Neither ``spark-steward gc`` nor another application's attach
run there may take that for death; a driver really killed inside a namespace is still found dead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import (
    LOCAL_DIR,
    ONE_EXECUTOR,
    SCRIPTS,
    BackgroundJob,
    run_spark_submit,
    spark_submit_path,
    steward_conf,
)
from tests.spark.test_submit_cache import TRANSPARENT, write_input

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def _unshare_unavailable() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a PID namespace here: {probe.stderr.strip()[:200]}"
    return None


@pytest.fixture(autouse=True)
def _needs_pid_namespaces() -> None:
    reason = _unshare_unavailable()
    if reason:
        pytest.skip(reason)


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()} \
        if root.exists() else {}


def _cli(*args: str, prefix: list[str] = UNSHARE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "spark_steward.cli", *args],
                          capture_output=True, text=True, timeout=120)


def _states(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return {a["app_id"]: a["state"] for a in json.loads(result.stdout)["applications"]}


def test_gc_and_another_attach_from_another_pid_namespace_leave_a_live_application_alone(
        tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    url = storage.as_uri()
    # One executor each: liveness is the drivers' matter, and one host's folder is checked.
    run = BackgroundJob(SCRIPTS / "cache_job.py", steward_conf(storage, TRANSPARENT),
                        tmp_path / "live.json", str(write_input(tmp_path / "in")), "--sleep",
                        "600", master=ONE_EXECUTOR)
    live = run.wait_for_output()
    try:
        app = live["app_id"]
        # What local state would keep in this host's working dir of the application.
        (LOCAL_DIR / app / "state").mkdir(parents=True, exist_ok=True)
        (LOCAL_DIR / app / "state" / "value").write_bytes(b"x" * 100)
        owned = _files(storage / "tables") | {
            f"local/{k}": v for k, v in _files(LOCAL_DIR / app).items()}
        assert any(f.startswith("data/") for f in owned), owned
        assert any(f.startswith("local/") for f in owned), owned

        # The pid namespace really hides the driver: the old rule would have said crashed.
        hidden = subprocess.run([*UNSHARE, "sh", "-c", f"kill -0 {live['pid']}"],
                                capture_output=True)
        assert hidden.returncode != 0, "the driver's pid is visible from the new namespace"

        assert _states(_cli("status", "--storage", url, "--json")) == {app: "live"}
        gc = _cli("gc", "--storage", url, "--local-dir", str(LOCAL_DIR), "--json")
        assert gc.returncode == 0, gc.stdout + gc.stderr
        deleted = [c["deleted"] for c in json.loads(gc.stdout)["collectors"]]
        assert app not in json.dumps(deleted), gc.stdout

        # Another application attaches from another PID namespace on this host: its attach
        # sweeps dead applications' tables, blobs, checkpoints and local folders.
        second = run_spark_submit(SCRIPTS / "plain_job.py", steward_conf(storage),
                                  str(tmp_path / "second.json"),
                                  prefix=UNSHARE, master=ONE_EXECUTOR)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert json.loads((tmp_path / "second.json").read_text())["app_id"] != app

        after = _files(storage / "tables") | {
            f"local/{k}": v for k, v in _files(LOCAL_DIR / app).items()}
        missing = sorted(set(owned) - set(after))
        assert not missing, f"a live application's files were deleted: {missing}"
        assert _states(_cli("status", "--storage", url, "--json", prefix=[]))[app] == "live"
    finally:
        os.kill(live["pid"], signal.SIGKILL)
        run.thread.join(120)


def _global_pid(inner_pid: int, namespace_of: int) -> int:
    """The pid, in this namespace, of the process ``inner_pid`` of ``namespace_of``'s PID
    namespace."""
    target_ns = os.readlink(f"/proc/{namespace_of}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "pid") != target_ns:
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:") and int(line.split()[-1]) == inner_pid:
                return int(entry.name)
    raise AssertionError(f"no process {inner_pid} in the namespace of {namespace_of}")


def _wait_json(path: Path, proc: subprocess.Popen[str], timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return json.loads(path.read_text())  # type: ignore[no-any-return]
        except (FileNotFoundError, ValueError):
            time.sleep(0.2)
    raise AssertionError(f"{path.name} never appeared")


def test_a_driver_killed_inside_a_pid_namespace_is_found_dead(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    url = storage.as_uri()
    out = tmp_path / "job.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    submit = " ".join([spark_submit_path(), "--master", f"'{ONE_EXECUTOR}'",
                       "--conf", "spark.ui.enabled=false",
                       *steward_conf(storage, "spark.steward.heartbeat.interval=1s"),
                       str(SCRIPTS / "plain_job.py"), str(out), "--sleep", "600"])
    # The namespace's init is a shell that outlives the driver, so the namespace stays for the
    # probe from inside; the driver is its child and is killed alone.
    container = subprocess.Popen([*UNSHARE, "sh", "-c", f"{submit} >/dev/null 2>&1; sleep 600"],
                                 env=env, text=True, start_new_session=True)
    try:
        job = _wait_json(out, container)
        init = int(subprocess.run(["pgrep", "-P", str(container.pid)], capture_output=True,
                                  text=True, check=True).stdout.split()[0])
        driver = _global_pid(job["pid"], init)
        inside = ["nsenter", "-t", str(init), "--pid", "--mount", "--"]
        assert _states(_cli("status", "--storage", url, "--json", prefix=inside)) == {
            job["app_id"]: "live"}
        os.kill(driver, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Path(f"/proc/{driver}").exists():
            time.sleep(0.1)

        # Inside the driver's namespace the probe decides: crashed at once.
        assert _states(_cli("status", "--storage", url, "--json", prefix=inside)) == {
            job["app_id"]: "crashed"}
        # From the host's namespace only the heartbeat can tell: not yet stale is live ...
        assert _states(_cli("status", "--storage", url, "--json", prefix=[])) == {
            job["app_id"]: "live"}
        # ... and stale is crashed (heartbeat every 1s; a 3s timeout has passed by then).
        time.sleep(4)
        assert _states(_cli("status", "--storage", url, "--json", "--heartbeat-timeout", "3s",
                            prefix=[])) == {job["app_id"]: "crashed"}
    finally:
        # SIGKILL of a PID namespace's init ends every process in it.
        for pid in subprocess.run(["pgrep", "-P", str(container.pid)], capture_output=True,
                                  text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        container.kill()
        container.wait(30)
