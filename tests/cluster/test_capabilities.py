"""Every capability across real host boundaries: a driver host, three worker hosts with their own
network, host name, PID namespace and private /tmp, and a storage dir shared as NFS would be.

One application (``scripts/capabilities.py``) exercises blobs, transparent files, local state,
cached tables and file-merged checkpoints on all three worker hosts; while it pauses, the
:func:`capabilities` fixture photographs every host's working dir and SIGKILLs one worker host's
executor JVM (the standalone worker starts a new one there). A second application
(``scripts/restore.py``) restores the checkpoint series the first one saved. Each test below
checks one capability from what these two applications reported and left; the first checks the
harness itself (Spark spans the hosts), from where the first application's tasks ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq
import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.cluster.conftest import (SCRIPTS, StewardApp, host_files, pids_on, sigkill_on,
                                    steward_setup)
from tests.cluster.harness import Cluster

NAME = "capabilities"
VICTIM = "w2"  # its executor JVM is SIGKILLed while the application pauses
TRANSFERS = ("ha", "server", "linked", "peers", "streamed")


def _transfers(delta: dict[str, int], kinds: tuple[str, ...] = TRANSFERS) -> int:
    return sum(delta.get(k, 0) for k in kinds)


def _per_host(rows: list[dict[str, Any]], kinds: tuple[str, ...] = TRANSFERS) -> dict[str, int]:
    out: Counter[str] = Counter()
    for r in rows:
        out[r["host"]] += _transfers(r["delta"], kinds)
    return dict(out)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Run:
    """What the capabilities application reported, and what the hosts held during its pause."""

    def __init__(self, cluster: Cluster, storage: Path, local_dir: str,
                 inspect: dict[str, Any], result: dict[str, Any],
                 files: dict[str, dict[str, Path]], snapshot: dict[str, dict[str, Any]],
                 killed: list[int]) -> None:
        self.cluster = cluster
        self.storage = storage
        self.local_dir = local_dir
        self.inspect = inspect
        self.result = result
        self.files = files          # worker host -> rel path in the app folder -> path
        self.snapshot = snapshot    # worker host -> rel path -> facts read during the pause
        self.killed = killed
        self.app_id: str = result["app_id"]
        self.hostnames = {cluster.hostname(w): w for w in cluster.workers}


def _photograph(cluster: Cluster, folder: str) -> tuple[dict[str, dict[str, Path]],
                                                        dict[str, dict[str, Any]]]:
    """Every file of the application's working dir on each worker host, read now (the pause):
    size and sha-256, and for cached-table replicas the hosts named in their ``writer``
    column."""
    files: dict[str, dict[str, Path]] = {}
    snapshot: dict[str, dict[str, Any]] = {}
    for host in cluster.workers:
        files[host] = host_files(cluster, host, folder)
        facts: dict[str, Any] = {}
        for rel, path in files[host].items():
            fact: dict[str, Any] = {"size": path.stat().st_size, "sha256": _sha256(path),
                                    "head": path.read_bytes()[:64]}
            if rel.startswith("table-replicas/") and rel.endswith(".parquet"):
                fact["writers"] = sorted(set(pq.read_table(path, columns=["writer"])
                                             .column("writer").to_pylist()))
            facts[rel] = fact
        snapshot[host] = facts
    return files, snapshot


@pytest.fixture(scope="module")
def capabilities(cluster: Cluster) -> Iterator[Run]:
    assert cluster.alive_workers() == list(cluster.workers)
    # spark.harness.marker: a raw --conf argument reaches the driver (the harness test below).
    flags, storage, local_dir = steward_setup(
        cluster, NAME, {"spark.steward.cache.host-replicas": "true",
                        "spark.harness.marker": "raw-args"})
    out = cluster.shared / NAME / "out"
    with StewardApp(cluster, "capabilities.py", out, flags) as app:
        inspect = app.wait_phase("inspect", timeout=400)
        files, snapshot = _photograph(cluster, f"{local_dir}/{inspect['app_id']}")
        pattern = f"CoarseGrainedExecutorBackend.*{inspect['app_id']}"
        killed = pids_on(cluster, VICTIM, pattern)
        assert len(killed) == 1, f"executor JVMs of the application on {VICTIM}: {killed}"
        sigkill_on(cluster, VICTIM, *killed)
        app.go("inspect", kill=cluster.hostname(VICTIM))
        result = app.finish(timeout=300)
    yield Run(cluster, storage, local_dir, inspect, result, files, snapshot, killed)


# -- the harness: Spark spans the hosts --------------------------------------------------------

def test_spark_job_from_the_driver_host_runs_on_every_worker_host(capabilities: Run) -> None:
    """The harness itself (this was test_harness.py's own application, scripts/where.py): the
    driver runs on the driver host, under its name and address, and a job's tasks run on every
    worker host, each in that host's PID namespace and private /tmp, resolving its own name to
    its own address. The first job (blobs through HA) reports where its tasks ran."""
    run, job = capabilities, capabilities.result
    cluster = run.cluster
    driver = job["driver"]
    tasks = job["ha"]["rows"]
    assert driver["hostname"] == "sst-driver"
    assert driver["resolved"] == cluster.address("driver")
    assert job["spark_driver_host"] == cluster.address("driver")
    assert job["marker"] == "raw-args"
    assert {t["host"] for t in tasks} == {f"sst-{w}" for w in cluster.workers}
    test_pidns = os.stat("/proc/self/ns/pid").st_ino
    by_host: dict[str, set[int]] = {}
    for t in tasks:
        by_host.setdefault(t["host"], set()).add(t["pidns"])
        host = t["host"][len("sst-"):]
        assert t["resolved"] == cluster.address(host)
        # The task's /tmp is that host's private dir.
        assert t["tmp"] == cluster.host_path(host, "/tmp").stat().st_ino
    namespaces = [ns for nss in by_host.values() for ns in nss]
    assert all(len(nss) == 1 for nss in by_host.values()), by_host
    assert len(set(namespaces)) == 3
    assert driver["pidns"] not in namespaces and test_pidns not in namespaces
    assert driver["pidns"] != test_pidns
    assert driver["tmp"] not in {t["tmp"] for t in tasks}


# -- blobs ------------------------------------------------------------------------------------

def test_blobs_reach_every_host_once_per_host_through_ha_and_the_blob_server(
        capabilities: Run) -> None:
    run, job = capabilities, capabilities.result
    workers = set(run.hostnames)
    ha, server = job["ha"], job["server"]

    # Through HA (the shared storage dir): right bytes in every task on all three hosts, one
    # transfer per host for 12 tasks.
    assert ha["key"] == ha["sha256"]
    assert {r["host"] for r in ha["rows"]} == workers
    assert {r["sha256"] for r in ha["rows"]} == {ha["sha256"]}
    assert _per_host(ha["rows"]) == {h: 1 for h in workers}, ha["rows"]
    assert _per_host(ha["rows"], ("ha",)) == {h: 1 for h in workers}
    assert ha["served"] == 0, "nothing came from the driver's blob server"
    # New Python workers on every host read it again: from their host's cache, no transfer.
    again = job["again"]["rows"]
    assert {r["host"] for r in again} == workers
    assert {r["sha256"] for r in again} == {ha["sha256"]}
    assert not {(r["host"], r["pid"]) for r in again} & {(r["host"], r["pid"])
                                                          for r in ha["rows"]}, "new workers"
    assert _per_host(again) == {h: 0 for h in workers}, again
    assert {r["host"] for r in again if r["delta"].get("verified")} == workers, again

    # Through the driver's blob server (its HA copy deleted): one download per host, over the
    # network from the driver host, counted by the server itself.
    assert {r["host"] for r in server["rows"]} == workers
    assert {r["sha256"] for r in server["rows"]} == {server["sha256"]} == {server["key"]}
    assert _per_host(server["rows"], ("server",)) == {h: 1 for h in workers}
    assert _per_host(server["rows"]) == {h: 1 for h in workers}
    assert server["served"] == len(workers)
    assert server["bytes"] == len(workers) * server["size"]

    # Each host's cache holds one verified copy of each, in its own private /tmp.
    for host in run.cluster.workers:
        for blob in (ha, server):
            rel = f"blob-cache/{ha['scope']}/{blob['key']}"
            assert run.snapshot[host][rel]["sha256"] == blob["key"], (host, rel)
        assert {r["path"] for r in ha["rows"] if r["host"] == run.cluster.hostname(host)} == \
            {f"{run.local_dir}/{run.app_id}/blob-cache/{ha['scope']}/{ha['key']}"}


def test_add_file_and_add_archive_reach_tasks_on_other_hosts(capabilities: Run) -> None:
    run, files = capabilities, capabilities.result["files"]
    workers = set(run.hostnames)
    # The files were made in the driver host's private /tmp: no worker host can see them.
    for host in run.cluster.workers:
        assert not run.cluster.host_path(host, files["source"]).exists()
    assert run.cluster.host_path("driver", files["source"]).is_dir()
    rows = files["rows"]
    assert {r["host"] for r in rows} == workers
    assert {(r["vocab"], r["table"]) for r in rows} == {("hello from the driver host\n",
                                                         "1,2\n3,4\n")}
    prefix = f"{run.local_dir}/{run.app_id}/files/"
    assert all(r["vocab_path"].startswith(prefix) and r["vocab_path"].endswith("/vocab.txt")
               for r in rows), rows
    assert all(r["table_path"].startswith(prefix) for r in rows), rows
    # The file and the archive: two transfers per host, whatever the number of tasks there.
    assert _per_host(rows) == {h: 2 for h in workers}, rows


# -- executor-local state ---------------------------------------------------------------------

def test_local_state_is_built_once_per_host_into_that_hosts_tmp(capabilities: Run) -> None:
    run, state = capabilities, capabilities.result["state"]
    workers = set(run.hostnames)
    builders = [line.split()[0] for line in state["builds"]]
    assert sorted(builders) == sorted(workers), state["builds"]
    assert {r["host"] for r in state["rows"]} == workers
    assert all(r["built_on"] == r["host"] for r in state["rows"]), "each host its own value"
    # New Python workers on every host get their host's value without building it again.
    again = run.result["again"]
    assert {r["host"] for r in again["rows"]} == workers
    assert all(r["built_on"] == r["host"] for r in again["rows"]), again["rows"]
    assert sorted(again["builds"]) == sorted(state["builds"]), "no build by a new worker"
    for host in run.cluster.workers:
        values = {rel: fact for rel, fact in run.snapshot[host].items()
                  if rel.startswith("state/models/")}
        assert len(values) == 1, values
        [fact] = values.values()
        assert fact["head"].startswith(f"built-on:{run.cluster.hostname(host)}:".encode())
        paths = {r["path"] for r in state["rows"] if r["host"] == run.cluster.hostname(host)}
        assert paths == {f"{run.local_dir}/{run.app_id}/{next(iter(values))}"}


def test_a_replacement_executor_on_the_same_host_adopts_blobs_and_values(
        capabilities: Run) -> None:
    run, restart = capabilities, capabilities.result["restart"]
    victim = run.cluster.hostname(VICTIM)
    assert restart["victim"] == victim
    rows = [r for rnd in restart["rounds"] for r in rnd]
    new = [r for r in rows if r["host"] == victim and r["executor"] not in
           restart["old_executors"]]
    assert new, f"no task on a new executor of {victim}: {rows}"
    assert {r["sha256"] for r in rows} == {run.result["ha"]["sha256"]}
    assert all(r["built_on"] == r["host"] for r in rows)
    # No transfer and no build anywhere: the new executor adopted its host's verified files.
    assert [_transfers(r["delta"]) for r in rows] == [0] * len(rows), rows
    assert all(r["delta"].get("verified", 0) + r["delta"].get("hit", 0) >= 1 for r in new), new
    assert sorted(restart["builds"]) == sorted(run.result["state"]["builds"]), "no rebuild"


# -- cached tables ----------------------------------------------------------------------------

def _table_totals(pairs: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(p["n"] for p in pairs), sum(p["v"] for p in pairs)


def test_a_cached_table_written_on_some_hosts_is_read_on_others(capabilities: Run) -> None:
    run, table, after = capabilities, capabilities.result["table"], \
        capabilities.result["table_after"]
    workers = set(run.hostnames)
    expected = (6000, 3 * sum(range(6000)))
    assert table["count"] == 6000
    assert table["computed"] == 6000, "the plan ran once, to write the table"
    assert table["calls_after_read"] == 6000, "reading it recomputed nothing"
    assert _table_totals(table["pairs"]) == expected
    writers = {p["writer"] for p in table["pairs"]}
    readers = {p["reader"] for p in table["pairs"]}
    assert writers <= workers and len(writers) >= 2, table["pairs"]
    assert readers <= workers and len(readers) >= 2, table["pairs"]
    assert any(p["writer"] != p["reader"] for p in table["pairs"]), table["pairs"]

    # After the executor loss: the same rows, nothing recomputed (Spark's own cache would
    # recompute what the lost executor held).
    assert after["key"] == table["key"]
    assert _table_totals(after["pairs"]) == expected
    assert after["calls"] == 6000

    # Host-local replicas on the reading hosts, including files other hosts wrote.
    replicas = {host: {rel: fact for rel, fact in run.snapshot[host].items()
                       if rel.startswith("table-replicas/")}
                for host in run.cluster.workers}
    data = run.storage / "tables" / "data" / table["key"]
    for host, found in replicas.items():
        if run.cluster.hostname(host) in readers:
            assert any(rel.endswith(".parquet") for rel in found), (host, replicas)
        for rel, fact in found.items():
            assert rel.startswith(f"table-replicas/tables/data/{table['key']}/"), rel
            if rel.endswith(".parquet"):
                source = rel.split(f"/{table['key']}/", 1)[1]
                assert fact["sha256"] == table["files"][source], f"{host}: {rel} is no copy"
    foreign = [(host, rel) for host, found in replicas.items() for rel, fact in found.items()
               if "writers" in fact and fact["writers"] != [run.cluster.hostname(host)]]
    assert foreign, f"no host holds a replica of a file another host wrote: {replicas}"
    # Released at the application's stop.
    assert not (run.storage / "tables" / "entries" / f"{table['key']}.json").exists()
    assert not data.exists()


# -- checkpoints ------------------------------------------------------------------------------

def test_merged_checkpoints_are_one_file_per_writing_host_and_subsumed_ones_go(
        capabilities: Run) -> None:
    run, cps = capabilities, capabilities.result["checkpoints"]
    hostnames = sorted(run.hostnames)
    assert cps["idle"]
    assert [s["id"] for s in cps["saves"]] == [1, 2, 3]
    for save in cps["saves"]:
        assert save["rows"] == 2000 * save["id"]
        folder = f"checkpoints/merged/xhost/{save['id']:010d}"
        # 12 partitions, one writing task per executor core: one physical file per host,
        # named after the host whose executor appended to it.
        assert save["physical"] == [f"{folder}/{h}-0000.arrows" for h in hostnames], save
    merged = run.storage / "checkpoints" / "merged" / "xhost"
    left = sorted(str(p.relative_to(run.storage)) for p in merged.rglob("*") if p.is_file())
    assert left == cps["saves"][-1]["physical"], "subsumed checkpoints' files are gone"
    entries = sorted(p.name for p in (run.storage / "checkpoints" / "entries" / "xhost")
                     .iterdir())
    assert entries == [f"{3:010d}.json"]


def test_a_later_application_restores_the_series_on_every_host(capabilities: Run) -> None:
    run = capabilities
    flags, _, _ = steward_setup(run.cluster, NAME)
    out = run.cluster.shared / NAME / "restore"
    # In the foreground (Cluster.submit; the other applications here run in the background).
    done = run.cluster.submit(SCRIPTS / "restore.py", str(out), "xhost", conf=flags,
                              timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    restored = json.loads((out / "result.json").read_text())
    assert restored["app_id"] != run.app_id
    assert restored["completed"] == [3]
    assert restored["partitions"] == 12
    by_reader = restored["by_reader"]
    n = 6000
    assert sum(r["n"] for r in by_reader) == n
    assert sum(r["ids"] for r in by_reader) == sum(range(n))
    assert sum(r["sq"] for r in by_reader) == sum(i * i for i in range(n))
    assert {i for r in by_reader for i in r["i"]} == {3}
    # Read by executors on several hosts, from files the first application's executors wrote.
    assert len({r["reader"] for r in by_reader}) >= 2, by_reader
    assert {r["reader"] for r in by_reader} <= set(run.hostnames)


def test_the_application_releases_its_storage_at_stop(capabilities: Run) -> None:
    """Its blobs' HA copies go at ``spark.stop()`` and its record says finished, written by a
    driver on the driver host."""
    run = capabilities
    assert not (run.storage / "apps" / run.app_id / "blobs").exists()
    registry = ApplicationRegistry(Storage.from_url(run.storage.as_uri()), heartbeat_timeout=5)
    record = registry.read(run.app_id)
    assert record is not None and record.finished
    assert record.host == run.cluster.hostname("driver")
    assert registry.liveness(record) is Liveness.FINISHED


# -- networks and disks only a real cluster has ------------------------------------------------

@pytest.fixture(scope="module")
def edge(cluster: Cluster) -> dict[str, Any]:
    """``scripts/nat.py``: a driver behind NAT (bridged container networking: a published port,
    a Kubernetes Service): executors reach it at an address that is not its own
    (``spark.driver.host``, here a forwarder on the master host) while it binds
    ``spark.driver.bindAddress``; Spark runs so (the same job with spark-steward off does). Its
    storage dir is a ``file://`` dir in /tmp, which each host has privately."""
    nat = f"198.18.{cluster.prefix[len('sst'):]}.250"
    ports = {"spark.driver.port": "40011", "spark.driver.blockManager.port": "40012",
             "spark.steward.blob.server.port": "40013"}
    cluster.run("master", ["ip", "addr", "add", f"{nat}/24", "dev", "eth0"], check=True)
    forwarder = None
    try:
        forwarder = cluster.popen("master", [sys.executable, str(SCRIPTS / "forward.py"), nat,
                                             cluster.address("driver"), *ports.values()],
                                  stdout=subprocess.PIPE, text=True)
        assert forwarder.stdout is not None
        assert forwarder.stdout.readline().strip() == "listening"
        flags, _, _ = steward_setup(cluster, "nat", {
            **ports, "spark.driver.host": nat,
            "spark.driver.bindAddress": cluster.address("driver"),
            "spark.steward.blob.ha": "false",
            "spark.steward.storage.dir": "file:///tmp/steward-nat/storage"})
        with StewardApp(cluster, "nat.py", cluster.shared / "nat" / "out", flags) as app:
            code = app.proc.wait(300)
            result: dict[str, Any] = app.wait_phase("result", timeout=1)
            if "start_error" in result:
                pytest.fail("the application did not start (spark-steward's attach failed):\n"
                            + result["start_error"], pytrace=False)
            assert code == 0, app.tail()
    finally:
        if forwarder is not None:
            forwarder.kill()
            forwarder.wait(10)
        cluster.run("master", ["ip", "addr", "del", f"{nat}/24", "dev", "eth0"], check=True)
    return result


def test_blobs_reach_executors_when_the_driver_is_behind_nat(cluster: Cluster,
                                                              edge: dict[str, Any]) -> None:
    result = edge
    assert result["spark"] == sum(x * x for x in range(6))
    assert "error" not in result, result["error"]
    assert {r["host"] for r in result["rows"]} == {cluster.hostname(w) for w in cluster.workers}
    assert {(r["sha256"], r["file"]) for r in result["rows"]} == \
        {(result["sha256"], "through the forwarder\n")}


def test_a_storage_dir_the_hosts_do_not_share_never_gives_a_wrong_result(
        cluster: Cluster, edge: dict[str, Any]) -> None:
    """``spark.steward.storage.dir`` set to a ``file://`` dir that is not shared (each host has
    its own ``/tmp``; a local disk mistaken for NFS). The docs require a shared one; whatever
    spark-steward does with this one, a cached table must count its rows (computed uncached if
    need be) and a checkpoint that says it saved must restore."""
    storage = edge["storage"]
    assert storage["url"] == "file:///tmp/steward-nat/storage"
    wrong = []
    if storage["table"] != {"count": 3000, "sum": 2 * sum(range(3000))}:
        wrong.append(f"a cached table returned a wrong result: {storage['table']}")
    checkpoint = storage["checkpoint"]
    if "saved" in checkpoint and checkpoint.get("restored") != 3000:
        wrong.append(f"a checkpoint was saved that cannot be restored: {checkpoint}")
    assert not wrong, "\n".join(wrong)
