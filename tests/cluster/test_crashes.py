"""Crashes across real host boundaries: a driver SIGKILLed in the middle of a checkpoint save,
and a worker host losing every process in the middle of a job.

The driver runs on its own host, so only the application record's heartbeat tells the other
hosts (and this test process) that it died; on the driver's host its vanished pid does. What it
left is removed as the README promises: the next application's attach (checkpoints, tables, the
driver host's folder; it takes the HA blobs over and deletes them by its end), that
application's executors (their hosts' folders), and ``spark-steward gc --local-dir`` run on a
host it never reached (that host's folder); a ``gc --dry-run`` from a worker host shows what gc
would delete, once the heartbeat is old enough.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.cluster.conftest import StewardApp, sigkill_on, steward_setup
from tests.cluster.harness import Cluster

pytestmark = pytest.mark.cluster

HEARTBEAT_TIMEOUT = "5s"


def _cli(cluster: Cluster, host: str, *args: str) -> dict[str, Any]:
    """``spark-steward ARGS --json`` run on ``host``; its JSON output."""
    done = cluster.run(host, [sys.executable, "-m", "spark_steward.cli", *args, "--json"],
                       timeout=120)
    assert done.returncode == 0, f"spark-steward {' '.join(args)} on {host}: {done.stderr}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _by_name(gc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in gc["collectors"]}


def _states(status: dict[str, Any]) -> dict[str, str]:
    return {a["app_id"]: a["state"] for a in status["applications"]}


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout}s")
        time.sleep(0.2)


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) \
        if folder.exists() else []


def test_a_killed_drivers_leftovers_are_removed_on_every_host(cluster: Cluster) -> None:
    flags, storage, local_dir = steward_setup(cluster, "crash")
    url = storage.as_uri()
    out = cluster.shared / "crash"
    metadata = CheckpointMetadata(Storage.from_url(url))
    with StewardApp(cluster, "victim.py", out / "victim", flags) as victim:
        ready = victim.wait_phase("ready", timeout=300)
        app = ready["app_id"]
        second = storage / "checkpoints" / "merged" / "victim" / f"{2:010d}"
        _wait(lambda: bool(_files(second)), 120, "a physical file of checkpoint 2")
        # SIGKILL of the driver: its Python process and its spark-submit JVM, on its host.
        sigkill_on(cluster, "driver", ready["pid"], ready["jvm"])
        victim.proc.wait(60)
        assert not (out / "victim" / "survived.json").exists()

    # Judged where its pid means something (the driver host): crashed at once, with the
    # default 2 min heartbeat timeout. Elsewhere its fresh heartbeat says live ...
    assert _states(_cli(cluster, "driver", "status", "--storage", url)) == {app: "crashed"}
    assert _states(_cli(cluster, "w1", "status", "--storage", url)) == {app: "live"}
    # ... until it is older than the timeout.
    registry = ApplicationRegistry(Storage.from_url(url), heartbeat_timeout=5)
    record = registry.read(app)
    assert record is not None and not record.finished and record.host == "sst-driver"
    _wait(lambda: registry.liveness(record) is Liveness.CRASHED, 30, "crashed by heartbeat")
    assert _states(_cli(cluster, "w1", "status", "--storage", url, "--heartbeat-timeout",
                        HEARTBEAT_TIMEOUT)) == {app: "crashed"}

    # What the crash left: blobs (HA), a pending and a completed checkpoint, a ready table,
    # and the application's folder on the driver host and on every worker host.
    blobs = storage / "apps" / app / "blobs"
    assert _files(blobs) == [f"{ready['scope']}/{ready['blob']}"]
    entry = metadata.read_entry("victim", 2)
    assert entry is not None and entry.state.value == "pending" and entry.app_id == app
    assert _files(second)
    table_entry = storage / "tables" / "entries" / f"{ready['table']}.json"
    assert table_entry.exists() and _files(storage / "tables" / "data" / ready["table"])
    folder = f"{local_dir}/{app}"
    assert {r["host"] for r in ready["rows"]} == {cluster.hostname(w) for w in cluster.workers}
    for host in ("driver", *cluster.workers):
        assert cluster.host_path(host, folder).is_dir(), host
    for host in cluster.workers:
        assert cluster.host_path(host, f"{folder}/state").is_dir(), host
        assert cluster.host_path(host, f"{folder}/blob-cache").is_dir(), host

    # gc from a worker host: with the default timeout it leaves the fresh-looking application
    # alone; with the short one it would delete its blobs, pending checkpoint and table.
    patient = _cli(cluster, "w1", "gc", "--storage", url, "--dry-run")
    assert all(c["deleted"] == [] for c in patient["collectors"]), patient
    assert [s["app_id"] for s in _by_name(patient)["blobs"]["skipped"]] == [app]
    planned = _by_name(_cli(cluster, "w1", "gc", "--storage", url, "--dry-run",
                            "--heartbeat-timeout", HEARTBEAT_TIMEOUT))
    assert [d["app_id"] for d in planned["blobs"]["deleted"]] == [app], planned
    assert "victim" in json.dumps(planned["checkpoints"]["deleted"]), planned
    assert ready["table"] in json.dumps(planned["caches"]["deleted"]), planned
    assert _files(blobs) and _files(second), "a dry run deletes nothing"

    # The next application, on two of the three worker hosts.
    later_flags, _, _ = steward_setup(cluster, "crash", **{
        "spark.cores.max": "2", "spark.steward.heartbeat.timeout": HEARTBEAT_TIMEOUT})
    with StewardApp(cluster, "successor.py", out / "successor", later_flags, "victim") as nxt:
        successor = nxt.finish(timeout=300)
    assert successor["idle"] == {"checkpoints": True, "tables": True}
    # Its attach: the pending checkpoint and its file are gone, the completed one restores;
    # the dead application's table is gone.
    assert successor["listed"] == [[1, "completed"]]
    assert successor["restored"] == {"n": 1000, "ids": sum(range(1000)),
                                     "v": 5 * sum(range(1000))}
    assert metadata.read_entry("victim", 2) is None
    assert not second.exists()
    assert metadata.read_entry("victim", 1) is not None
    assert not table_entry.exists()
    assert _files(storage / "tables" / "data" / ready["table"]) == []
    # The driver host's folder went at its attach; each worker host that ran its executors
    # swept the dead application's folder there.
    assert not cluster.host_path("driver", folder).exists()
    used = {w for w in cluster.workers if cluster.hostname(w) in successor["hosts"]}
    assert len(used) == 2, successor["hosts"]
    for host in used:
        assert not cluster.host_path(host, folder).exists(), f"{host} kept {folder}"
    [untouched] = set(cluster.workers) - used
    assert cluster.host_path(untouched, f"{folder}/state").is_dir()

    # Its attach took the dead application's HA blobs over; its stop deleted them.
    assert not blobs.exists()
    # spark-steward gc, run on the host the next application never reached: that host's folder.
    gc = _by_name(_cli(cluster, untouched, "gc", "--storage", url, "--local-dir", local_dir,
                       "--heartbeat-timeout", HEARTBEAT_TIMEOUT))
    assert all(c["failed"] == [] for c in gc.values()), gc
    assert [d["app_id"] for d in gc["local"]["deleted"]] == [app], gc["local"]
    assert not cluster.host_path(untouched, folder).exists()
    again = _cli(cluster, untouched, "gc", "--storage", url, "--local-dir", local_dir,
                 "--heartbeat-timeout", HEARTBEAT_TIMEOUT)
    assert all(c["deleted"] == [] for c in again["collectors"]), again
    # The completed checkpoint stays for later restores; it owns exactly its own files.
    first = metadata.read_entry("victim", 1)
    assert first is not None and first.state.value == "completed"
    assert _files(storage / "checkpoints" / "merged" / "victim") == \
        sorted(str(Path(p).relative_to("checkpoints/merged/victim")) for p in first.physical)


def test_a_worker_host_lost_mid_job_and_brought_back(cluster: Cluster) -> None:
    flags, _, _ = steward_setup(cluster, "hostloss")
    out = cluster.shared / "hostloss"
    lost = "w3"
    with StewardApp(cluster, "hostloss.py", out, flags) as app:
        app.wait_phase("slow", timeout=300)
        # Every host runs a slow task: then the whole host goes, as in a power cut.
        started = out / "started"
        _wait(lambda: {name.split("-", 2)[2] for name in
                       (p.name for p in started.iterdir())} >=
              {cluster.hostname(w) for w in cluster.workers}, 120, "a task on every host")
        cluster.kill_host(lost)
        killed_at = time.monotonic()
        job = app.wait_phase("restart", timeout=300)
        assert time.monotonic() - killed_at < 60
        cluster.restart_worker(lost)
        app.go("restart", host=cluster.hostname(lost))
        result = app.finish(timeout=300)

    lost_name = cluster.hostname(lost)
    # The job completed on the remaining hosts with every partition's right result.
    slow = job["slow"]
    assert sorted(r["x"] for r in slow) == list(range(24))
    assert all(r["square"] == r["x"] * r["x"] for r in slow)
    on_lost = {int(name.split("-")[0]) for name in job["started"] if name.endswith(lost_name)}
    redone = [r for r in slow if r["x"] in on_lost and r["host"] != lost_name]
    assert redone and all(r["attempt"] >= 1 for r in redone), (job["started"], slow)

    # Back: the restarted host runs the application's tasks again, and its new executor finds
    # the blob and the value its disk kept (no transfer, no build).
    assert result["back"] == lost_name
    rows = [r for rnd in result["rounds"] for r in rnd]
    back = [r for r in rows if r["host"] == lost_name]
    assert back
    assert {r["sha256"] for r in rows + result["first"]} == {result["sha256"]}
    assert all(r["value"] == f"built-on:{r['host']}" for r in rows)
    assert sorted(line.split()[0] for line in result["builds"]) == \
        sorted(cluster.hostname(w) for w in cluster.workers), "no build after the restart"
    assert all(sum(r["delta"].get(k, 0) for k in ("ha", "server", "streamed")) == 0
               for r in back), back
