"""A packed streaming checkpoint location (issue 24) across real hosts: the driver on its own
host packs the files its executors on three worker hosts write into the shared dir.

What only separate hosts show: executors on other hosts read state back from the driver's packs
and write tombstones of their own; a whole worker host lost while the driver packs (its state
partitions reload from packs on the other hosts); a drop asked for from a host where the
driver's pid means nothing is refused while the driver's heartbeat is fresh, also after the
driver was SIGKILLed; a new application restarts the query from the packed location with
exactly the result of the input; and once the query stopped, a drop from a worker host leaves
nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from tests.cluster.conftest import StewardApp, sigkill_on, steward_setup, wait_until
from tests.cluster.harness import Cluster
from tests.spark.test_submit_stream_packs import ROWS, _expected, _inputs, _packs

FILES = 36
CONF = {"spark.steward.streams.pack.enabled": "true", "spark.steward.streams.pack.grace": "3s",
        "spark.sql.shuffle.partitions": "6",
        "spark.sql.streaming.minBatchesToRetain": "2",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
        "spark.sql.streaming.stateStore.maintenanceInterval": "300ms"}


def _seen(app: StewardApp) -> int:
    try:
        return int(json.loads((app.out / "progress.json").read_text())["seen"])
    except (FileNotFoundError, ValueError):
        return 0


def _cli(cluster: Cluster, host: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.run(host, [sys.executable, "-m", "spark_steward.cli", *args], timeout=120)


def _cli_json(cluster: Cluster, host: str, *args: str) -> dict[str, Any]:
    done = _cli(cluster, host, *args, "--json")
    assert done.returncode == 0, f"spark-steward {' '.join(args)} on {host}: {done.stderr}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _refused(cluster: Cluster, host: str, url: str) -> str:
    """``spark-steward streams drop agg`` on ``host`` (no grace): its one-line refusal."""
    done = _cli(cluster, host, "streams", "drop", "agg", "--storage", url, "--drop-grace", "0s")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to drop" in lines[0], done.stderr
    return lines[0]


def test_a_packed_query_survives_a_lost_host_and_a_killed_driver_and_drops_cleanly(
        cluster: Cluster) -> None:
    flags, storage, _ = steward_setup(cluster, "streams", CONF)
    url = storage.as_uri()
    out = cluster.shared / "streams"
    location, inputs = out / "ckpt", out / "in"
    _inputs(inputs, 0, 16)
    with StewardApp(cluster, "stream.py", out / "first", flags, str(location), str(inputs),
                    str(FILES * ROWS)) as first:
        running = first.wait_phase("running", timeout=300)
        wait_until(lambda: _seen(first) >= 10 * ROWS and bool(_packs(location)), 300,
                   "ten batches and a pack")
        listed = _cli_json(cluster, "w1", "streams", "ls", "--storage", url)["streams"]
        assert [(s["name"], s["state"]) for s in listed] == [("agg", "running")], listed
        # From a worker host the driver's pid means nothing: its heartbeat holds the location.
        _refused(cluster, "w1", url)

        # A whole worker host goes while the driver packs; the query goes on with the others,
        # which load that host's state partitions from packed and loose files.
        cluster.kill_host("w3")
        _inputs(inputs, 16, 26)
        wait_until(lambda: _seen(first) >= 26 * ROWS, 300, "the batches after the host loss")
        # Then the driver: its Python process and its JVM, SIGKILLed on its host.
        sigkill_on(cluster, "driver", running["pid"], running["jvm"])
        first.proc.wait(60)
    assert _packs(location), "nothing packed to restart from"
    # Its heartbeat is fresh: from another host it may still run, so the drop is refused.
    _refused(cluster, "w2", url)

    cluster.restart_worker("w3")
    _inputs(inputs, 26, FILES)
    with StewardApp(cluster, "stream.py", out / "second", flags, str(location), str(inputs),
                    str(FILES * ROWS), "--hold") as second:
        result = second.wait_phase("result", timeout=400)
        # Exactly once: nothing lost, nothing counted twice, across both applications.
        assert result["query_id"] == running["query_id"]
        assert result["rows"] == _expected(FILES)
        assert result["state_keys"] == [0, 1, 2, 3, 4]  # the state data source reads packs
        assert _packs(location)
        second.go("stop")
        second.finish(timeout=120)

    du = _cli_json(cluster, "w2", "streams", "du", "--storage", url)["streams"]
    [status] = du
    assert status["state"] == "stopped", status
    assert status["files"] > 0 and status["packs"] > 0, status
    assert status["deletes_pending"] == 0 and status["temp_files"] == 0, status
    time.sleep(1.5)
    dropped = _cli_json(cluster, "w2", "streams", "drop", "agg", "--storage", url,
                        "--drop-grace", "1s")
    assert dropped["files"] >= status["files"], (dropped, status)
    assert not location.exists()
    assert _cli_json(cluster, "w1", "streams", "ls", "--storage", url)["streams"] == []
