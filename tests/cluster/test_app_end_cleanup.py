"""The application's host-local folder on every worker host is removed by the time
``spark.stop()`` returns, across real host boundaries: the driver runs on a host of its own, so
only the executors can have removed a worker host's folder (each host has a private /tmp, where
the default ``spark.steward.local.dir`` lives).

An executor stopped in the middle of the application leaves its host's folder (the host keeps
working with it and it goes at the end, when the host runs an executor again); a host
unreachable at the end keeps it until the next application starts there (or ``gc``).
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

SCRIPT = Path(__file__).parent / "scripts" / "app_end.py"


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


@pytest.fixture
def storage(cluster: Cluster) -> Path:
    return cluster.shared / f"app-end-{uuid.uuid4().hex[:8]}" / "storage"


@pytest.fixture
def apps() -> Iterator[list[App]]:
    started: list[App] = []
    yield started
    for app in started:
        app.close()


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


def test_every_worker_hosts_folder_is_gone_when_spark_stop_returns(
        cluster: Cluster, storage: Path, apps: list[App]) -> None:
    app = App(cluster, storage, "plain")
    apps.append(app)
    ready = app.phase("ready")
    hosts = {cluster.hostname(w): w for w in cluster.workers}
    assert set(ready["executors"]) == set(hosts), ready
    folders = {w: folder_on(cluster, w, ready) for w in cluster.workers}
    for w, folder in folders.items():
        assert stored_keys(folder), f"no values stored on {w}"
    app.go("ready")
    stopped = app.phase("stopped")
    # Paused right after spark.stop() returned: every worker host is clean, and the driver's.
    left = {w: listing(f) for w, f in folders.items() if f.exists()}
    assert not left, f"folders left on worker hosts after spark.stop(): {left}"
    assert not folder_on(cluster, "driver", ready).exists()
    assert stopped["stop_seconds"] < 10, "spark.stop() waited for an executor to its bound"
    app.go("stopped")
    log = app.finish()
    reported = end_summary(log, ready["app_id"])
    assert sorted(reported.values()) == ["removed"] * 3, reported


def test_a_host_whose_executor_stopped_mid_application_keeps_working_and_is_cleaned_at_the_end(
        cluster: Cluster, storage: Path, apps: list[App]) -> None:
    victim = "w1"
    app = App(cluster, storage, "kill", cluster.hostname(victim))
    apps.append(app)
    ready = app.phase("ready")
    folder = folder_on(cluster, victim, ready)
    before = listing(folder)
    held = sorted(stored_keys(folder))  # values are per host: those of tasks that ran there
    assert held
    app.go("ready")
    killed = app.phase("killed")
    assert killed["kill_acknowledged"]
    # The executor asked on its way out and heard that the application runs: it left the folder.
    assert f"spark-steward: executor {ready['executors'][cluster.hostname(victim)]} ends while " \
           "the application runs" in app.log()
    assert listing(folder) == before
    app.go("killed")
    stopped = app.phase("stopped")
    # A new executor on the victim host read every value the old one left on the host.
    after = stopped["executors_after"]
    assert after[cluster.hostname(victim)] != ready["executors"][cluster.hostname(victim)]
    victim_rows = [r for r in stopped["read"] if r["host"] == cluster.hostname(victim)]
    assert victim_rows and all(r["keys"] == held for r in victim_rows), (held, victim_rows)
    for w in cluster.workers:
        assert not folder_on(cluster, w, ready).exists(), f"{w} kept the folder"
    app.go("stopped")
    reported = end_summary(app.finish(), ready["app_id"])
    assert sorted(reported) == sorted(after.values()), reported


def test_a_host_unreachable_at_stop_keeps_the_folder_until_the_next_application_there(
        cluster: Cluster, storage: Path, apps: list[App]) -> None:
    lost = "w3"
    app = App(cluster, storage, "plain")
    apps.append(app)
    try:
        ready = app.phase("ready")
        folders = {w: folder_on(cluster, w, ready) for w in cluster.workers}
        cluster.kill_host(lost)  # a machine losing power: its disk (private /tmp) stays
        app.go("ready")
        stopped = app.phase("stopped")
        assert not folders["w1"].exists() and not folders["w2"].exists()
        assert stored_keys(folders[lost]), "the unreachable host's folder went"
        assert stopped["stop_seconds"] < 30
        app.go("stopped")
        app.finish()

        # The host comes back: gc there would remove the folder (its application finished),
        # and so does the next application whose tasks use host-local files there.
        cluster.restart_worker(lost)
        local_dir = ready["local_dir"]
        gc = cluster.run(lost, [sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                                storage.as_uri(), "--local-dir", local_dir, "--dry-run",
                                "--json"], timeout=120)
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert ready["app_id"] in gc.stdout and folders[lost].exists()
        following = App(cluster, storage, "next")
        apps.append(following)
        ran = following.phase("stopped")
        assert cluster.hostname(lost) in ran["ran_on"]
        assert not folders[lost].exists(), "the next application did not sweep the folder"
        for w in cluster.workers:
            assert not folder_on(cluster, w, ran).exists()
        following.go("stopped")
        following.finish()
    finally:
        # The session's other tests expect three workers.
        try:
            cluster.holder_pid(lost)
        except HarnessError:
            cluster.restart_worker(lost)
