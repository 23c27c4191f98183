"""Crashes across real host boundaries: a driver SIGKILLed in the middle of a checkpoint save,
and a worker host losing every process in the middle of a job.

The driver runs on its own host, so only the application record's heartbeat tells the other
hosts (and this test process) that it died; on the driver's host its vanished pid does. What it
left is removed as the README promises: the next application's attach (checkpoints, tables, the
driver host's folder; it takes the HA blobs over and deletes them by its end), that
application's executors (their hosts' folders), and ``spark-steward gc --local-dir`` run on a
host it never reached (that host's folder); a ``gc --dry-run`` from a worker host shows what gc
would delete, once the heartbeat is old enough.

The worker-host loss runs without ``spark.steward.storage.dir``, so the same application also
shows what the embedded default storage dir does on a multi-host cluster.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.cluster.conftest import (StewardApp, host_files, sigkill_on, steward_setup,
                                    wait_until)
from tests.cluster.harness import Cluster

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
        wait_until(lambda: bool(_files(second)), 120, "a physical file of checkpoint 2")
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
    wait_until(lambda: registry.liveness(record) is Liveness.CRASHED, 30, "crashed by heartbeat")

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

    # gc from a worker host, once the heartbeat is older than its timeout: it would delete
    # the blobs, the pending checkpoint and the table.
    planned = _by_name(_cli(cluster, "w1", "gc", "--storage", url, "--dry-run",
                            "--heartbeat-timeout", HEARTBEAT_TIMEOUT))
    assert [d["app_id"] for d in planned["blobs"]["deleted"]] == [app], planned
    assert "victim" in json.dumps(planned["checkpoints"]["deleted"]), planned
    assert ready["table"] in json.dumps(planned["caches"]["deleted"]), planned
    assert _files(blobs) and _files(second), "a dry run deletes nothing"

    # The next application, on two of the three worker hosts.
    later_flags, _, _ = steward_setup(cluster, "crash", {
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
    # The completed checkpoint stays for later restores; it owns exactly its own files.
    first = metadata.read_entry("victim", 1)
    assert first is not None and first.state.value == "completed"
    assert _files(storage / "checkpoints" / "merged" / "victim") == \
        sorted(str(Path(p).relative_to("checkpoints/merged/victim")) for p in first.physical)


class HostLoss:
    """What ``scripts/hostloss.py`` reported: ``job`` at its pause after the slow job (the host
    was SIGKILLed in its middle), ``result`` at its end."""

    def __init__(self, cluster: Cluster, job: dict[str, Any], result: dict[str, Any],
                 lost: str) -> None:
        self.cluster = cluster
        self.job = job
        self.result = result
        self.lost = lost


@pytest.fixture(scope="module")
def hostloss(cluster: Cluster) -> HostLoss:
    # No spark.steward.storage.dir: the embedded default (see the last test).
    flags, _, _ = steward_setup(cluster, "hostloss", shared_storage=False)
    assert not any("storage.dir" in f for f in flags)
    out = cluster.shared / "hostloss"
    lost = "w3"
    with StewardApp(cluster, "hostloss.py", out, flags) as app:
        app.wait_phase("slow", timeout=300)
        # Every host runs a slow task: then the whole host goes, as in a power cut.
        started = out / "started"
        wait_until(lambda: {name.split("-", 2)[2] for name in
                       (p.name for p in started.iterdir())} >=
              {cluster.hostname(w) for w in cluster.workers}, 120, "a task on every host")
        cluster.kill_host(lost)
        job = app.wait_phase("restart", timeout=300)
        cluster.restart_worker(lost)
        app.go("restart", host=cluster.hostname(lost))
        result = app.finish(timeout=300)
    return HostLoss(cluster, job, result, lost)


def test_a_worker_host_lost_mid_job_and_brought_back(hostloss: HostLoss) -> None:
    cluster, job, result = hostloss.cluster, hostloss.job, hostloss.result
    lost_name = cluster.hostname(hostloss.lost)
    # The job completed on the remaining hosts with every partition's right result.
    slow = job["slow"]
    assert sorted(r["x"] for r in slow) == list(range(24))
    assert all(r["square"] == r["x"] * r["x"] for r in slow)
    on_lost = {int(name.split("-")[0]) for name in job["started"] if name.endswith(lost_name)}
    redone = [r for r in slow if r["x"] in on_lost and r["host"] != lost_name]
    assert redone and all(r["attempt"] >= 1 for r in redone), (job["started"], slow)
    assert job["slow_seconds"] < 60, "the loss was noticed at once, not after a timeout"

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
    # Without a shared storage dir blobs came from the driver's blob server.
    first = result["first"]
    assert {r["host"] for r in first} == {cluster.hostname(w) for w in cluster.workers}
    assert sum(r["delta"].get("server", 0) for r in first) == len(cluster.workers)


def test_without_a_shared_storage_dir_nothing_is_silently_wrong(hostloss: HostLoss) -> None:
    """The hostloss application ran without ``spark.steward.storage.dir``: the embedded default
    is a directory in the driver host's temp dir, which executors on other hosts do not have
    (the README lists it as single-host). Whatever spark-steward does then, a cached table must
    count its rows (computed uncached if need be), a checkpoint that says it saved must
    restore, and executors must not strand data on their hosts' disks where nothing cleans
    it."""
    cluster, storage = hostloss.cluster, hostloss.result["storage"]
    assert storage["url"].startswith("file:///tmp/spark-steward-")  # <tmp>/spark-steward-<uid>
    assert storage["table"] == {"count": 3000, "sum": 2 * sum(range(3000))}, \
        f"a cached table returned a wrong result: {storage['table']}"
    checkpoint = storage["checkpoint"]
    assert "saved" not in checkpoint or checkpoint.get("restored") == 3000, \
        f"a checkpoint was saved that cannot be restored: {checkpoint}"
    default_storage = Storage.from_url(storage["url"]).root  # the same path on every host
    stranded = {w: sorted(host_files(cluster, w, default_storage))
                for w in cluster.workers}
    assert stranded == {w: [] for w in cluster.workers}, \
        f"executors wrote into their own hosts' copy of the default storage dir: {stranded}"
