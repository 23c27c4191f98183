"""The application's host-local folder on every worker host is removed by the time
``spark.stop()`` returns, across real host boundaries: the driver runs on a host of its own, so
only the executors can have removed a worker host's folder (each host has a private /tmp, where
the default ``spark.steward.local.dir`` lives).

An executor stopped in the middle of the application leaves its host's folder (the host keeps
working with it and it goes at the end, when the host runs an executor again); a host
unreachable at the end keeps it until the next application starts there (or ``gc``).

Two applications, in this order (the :func:`runs` fixture): one whose host w3 loses power
before ``spark.stop()`` (``plain``), then, once w3 is back, one whose w1 executor is stopped
mid-application (``kill``). The second is also the first's "next application" on w3: its tasks
store values on every host, so its w3 executor must sweep the first one's folder there. Its w2
and w3 hosts keep the executor that stored their values to the end, as in an application where
nothing happens, so it also shows that every worker host's folder (and the driver's) is gone
when ``spark.stop()`` returns and that the end summary names every executor.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.cluster.harness import Cluster, HarnessError, HostProcess
from tests.support.class_cache import java_options

SCRIPT = Path(__file__).parent / "scripts" / "app_end.py"
LOST = "w3"    # loses power before the first application's spark.stop()
VICTIM = "w1"  # its executor is stopped in the middle of the second application


class App:
    """One run of scripts/app_end.py on the driver host, driven phase by phase."""

    def __init__(self, cluster: Cluster, storage: Path, mode: str, *args: str) -> None:
        self.control = storage.parent / f"control-{mode}-{uuid.uuid4().hex[:8]}"
        self.control.mkdir(parents=True)
        flags = subprocess.run(
            [sys.executable, "-m", "spark_steward.cli", "conf", "--storage", storage.as_uri()],
            check=True, capture_output=True, text=True).stdout.split()
        # The scheduler's target: killExecutor lowers it by one and requestExecutors(1) raises
        # it back, so the victim host gets a new executor (left unset it would be 2).
        flags += ["--conf", "spark.executor.instances=3"]
        # The hosts get none of the run's SPARK_* variables: the quick-start JVM options go on
        # the command line (as tests/cluster/conftest.py's steward_setup does).
        flags += ["--conf", f"spark.driver.extraJavaOptions={java_options()}",
                  "--conf", f"spark.executor.extraJavaOptions={java_options()}"]
        self.out = open(self.control / "stdout", "w")
        self.err = open(self.control / "stderr", "w")
        self.proc: HostProcess = cluster.submit_background(
            SCRIPT, str(self.control), mode, *args, conf=flags, stdout=self.out, stderr=self.err)

    def log(self) -> str:
        return (self.control / "stdout").read_text() + (self.control / "stderr").read_text()

    def phase(self, name: str, timeout: float = 420) -> dict[str, Any]:
        path = self.control / f"{name}.json"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"the job ended ({self.proc.returncode}) before phase "
                                     f"{name}: {self.log()[-6000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no phase {name} within {timeout}s: {self.log()[-6000:]}")
            time.sleep(0.2)
        return json.loads(path.read_text())  # type: ignore[no-any-return]

    def go(self, name: str) -> None:
        (self.control / f"{name}.go").touch()

    def finish(self, timeout: float = 240) -> str:
        self.proc.wait(timeout)
        log = self.log()
        assert self.proc.returncode == 0, log[-6000:]
        return log

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.out.close()
        self.err.close()


def folder_on(cluster: Cluster, host: str, facts: dict[str, Any]) -> Path:
    local_dir = facts["local_dir"]
    assert local_dir.startswith("/tmp/"), f"expected the default local dir, got {local_dir}"
    return cluster.host_path(host, f"{local_dir}/{facts['app_id']}")


def listing(folder: Path) -> list[str]:
    """The folder's content, less the executors' peer endpoints (``peers/<executor>.json``):
    each JVM's own registration, which comes and goes with it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if not (p.parent.name == "peers" and p.suffix == ".json"))


def stored_keys(folder: Path) -> set[str]:
    return {p.name.split("~")[0] for p in (folder / "state" / "app-end").glob("p*")}


def end_summary(log: str, app_id: str) -> dict[str, str]:
    """executor id -> what it reported, from the driver's one application-end line."""
    lines = [line for line in log.splitlines()
             if f"spark-steward: application {app_id} ended; host-local folders" in line]
    assert len(lines) == 1, "no (or more than one) application-end summary in the driver's log"
    return dict(re.findall(r"executor (\d+) on [^:]+: ([a-z ]+?)(?:;|$| within)", lines[0]))


class Lost:
    """The first application (w3 lost before its stop): its phases, what the hosts held right
    after ``spark.stop()`` returned, and ``gc --dry-run`` on w3 once back."""

    def __init__(self, ready: dict[str, Any], stopped: dict[str, Any], folders: dict[str, Path],
                 left: dict[str, bool], lost_keys: set[str], gc: subprocess.CompletedProcess[str],
                 kept_for_gc: bool) -> None:
        self.ready, self.stopped, self.folders = ready, stopped, folders
        self.left = left                # worker host -> its folder existed after stop
        self.lost_keys = lost_keys      # values left in the lost host's folder
        self.gc = gc
        self.kept_for_gc = kept_for_gc  # the lost host's folder still there after the dry run


class Killed:
    """The second application (w1's executor stopped mid-application): its phases, its log and
    what the hosts held at each pause."""

    def __init__(self) -> None:
        self.ready: dict[str, Any] = {}
        self.keys: dict[str, set[str]] = {}       # worker host -> stored keys at ``ready``
        self.before: list[str] = []               # the victim's folder at ``ready``
        self.killed: dict[str, Any] = {}
        self.log_killed = ""                      # the job's log at ``killed``
        self.after_kill: list[str] = []           # the victim's folder at ``killed``
        self.stopped: dict[str, Any] = {}
        self.left: dict[str, list[str]] = {}      # worker host -> its folder after stop, if any
        self.driver_left = True                   # the driver host's folder after stop
        self.swept_lost = False                   # the first application's w3 folder gone
        self.log = ""


class Runs:
    def __init__(self, cluster: Cluster, lost: Lost, killed: Killed) -> None:
        self.cluster, self.lost, self.killed = cluster, lost, killed


@pytest.fixture(scope="module")
def runs(cluster: Cluster) -> Iterator[Runs]:
    # One storage dir for both: the second application is the first one's next on w3.
    storage = cluster.shared / f"app-end-{uuid.uuid4().hex[:8]}" / "storage"
    first = App(cluster, storage, "plain")
    try:
        ready = first.phase("ready")
        folders = {w: folder_on(cluster, w, ready) for w in cluster.workers}
        cluster.kill_host(LOST)  # a machine losing power: its disk (private /tmp) stays
        first.go("ready")
        stopped = first.phase("stopped")
        left = {w: f.exists() for w, f in folders.items()}
        lost_keys = stored_keys(folders[LOST])
        first.go("stopped")
        first.finish()
    finally:
        first.close()
        # The other tests expect three workers.
        try:
            cluster.holder_pid(LOST)
        except HarnessError:
            cluster.restart_worker(LOST)
    # The host is back: gc there would remove the folder (its application finished).
    gc = cluster.run(LOST, [sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                            storage.as_uri(), "--local-dir", ready["local_dir"], "--dry-run",
                            "--json"], timeout=120)
    lost = Lost(ready, stopped, folders, left, lost_keys, gc, folders[LOST].exists())

    k = Killed()
    second = App(cluster, storage, "kill", cluster.hostname(VICTIM))
    try:
        k.ready = second.phase("ready")
        k.keys = {w: stored_keys(folder_on(cluster, w, k.ready)) for w in cluster.workers}
        k.before = listing(folder_on(cluster, VICTIM, k.ready))
        second.go("ready")
        k.killed = second.phase("killed")
        k.log_killed = second.log()
        k.after_kill = listing(folder_on(cluster, VICTIM, k.ready))
        second.go("killed")
        k.stopped = second.phase("stopped")
        # Paused right after spark.stop() returned.
        k.left = {w: listing(f) for w in cluster.workers
                  if (f := folder_on(cluster, w, k.ready)).exists()}
        k.driver_left = folder_on(cluster, "driver", k.ready).exists()
        k.swept_lost = not folders[LOST].exists()
        second.go("stopped")
        k.log = second.finish()
    finally:
        second.close()
    yield Runs(cluster, lost, k)


def test_a_host_whose_executor_stopped_mid_application_keeps_working_and_is_cleaned_at_the_end(
        runs: Runs) -> None:
    cluster, k = runs.cluster, runs.killed
    victim = cluster.hostname(VICTIM)
    ready = k.ready
    assert set(ready["executors"]) == {cluster.hostname(w) for w in cluster.workers}, ready
    for w, keys in k.keys.items():
        assert keys, f"no values stored on {w}"
    held = sorted(k.keys[VICTIM])  # values are per host: those of tasks that ran there
    assert k.killed["kill_acknowledged"]
    # The executor asked on its way out and heard that the application runs: it left the folder.
    assert f"spark-steward: executor {ready['executors'][victim]} ends while " \
           "the application runs" in k.log_killed
    assert k.after_kill == k.before
    # A new executor on the victim host read every value the old one left on the host.
    stopped = k.stopped
    after = stopped["executors_after"]
    assert after[victim] != ready["executors"][victim]
    victim_rows = [r for r in stopped["read"] if r["host"] == victim]
    assert victim_rows and all(r["keys"] == held for r in victim_rows), (held, victim_rows)
    # Right after spark.stop() returned: every worker host is clean (the victim's by its new
    # executor, the others' by the executors that stored there), and the driver's; the stop
    # did not wait for an executor to its bound.
    assert not k.left, f"folders left on worker hosts after spark.stop(): {k.left}"
    assert not k.driver_left
    assert stopped["stop_seconds"] < 10, "spark.stop() waited for an executor to its bound"
    # The end summary reports each executor of the end (not the stopped one) as removed.
    reported = end_summary(k.log, ready["app_id"])
    assert sorted(reported) == sorted(after.values()), reported
    assert sorted(reported.values()) == ["removed"] * 3, reported


def test_a_host_unreachable_at_stop_keeps_the_folder_until_the_next_application_there(
        runs: Runs) -> None:
    cluster, lost = runs.cluster, runs.lost
    assert lost.left["w1"] is False and lost.left["w2"] is False, lost.left
    assert lost.left[LOST] and lost.lost_keys, "the unreachable host's folder went"
    assert lost.stopped["stop_seconds"] < 30
    # Back: gc there would remove the folder (its application finished) ...
    assert lost.gc.returncode == 0, lost.gc.stdout + lost.gc.stderr
    assert lost.ready["app_id"] in lost.gc.stdout and lost.kept_for_gc
    # ... and so does the next application whose tasks use host-local files there (the
    # second one, which stored values on every host and cleaned its own folders; see above).
    nxt = runs.killed
    assert cluster.hostname(LOST) in nxt.ready["executors"]
    assert nxt.swept_lost, "the next application did not sweep the folder"
    assert not nxt.left, nxt.left
