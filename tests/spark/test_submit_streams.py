"""A streaming query's location after its driver was SIGKILLed (issue 24): the failed deletes it
recorded and the temp files it left are cleaned by ``spark-steward gc``; the query restarts from
the location in a new application, whose attach removes the record of a location that is gone
(issue 33); ``spark-steward streams drop`` then removes it all.

The restart needs an executor to restore the state on, not two (local-cluster[1,1,1024])."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from spark_steward.storage import Storage
from spark_steward.streams.registry import StreamRegistry
from tests.spark.conftest import (ONE_EXECUTOR, SCRIPTS, BackgroundJob, run_spark_submit,
                                  steward_conf)
from tests.spark.test_streams import RETAIN
from tests.support.faulty_files import CLASS as FAULTY, DIR_KEY, deletes_asked, faulty_jar


def _cli(storage: Path, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "spark_steward.cli", *args, "--storage",
                           storage.as_uri(), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _intent_targets(location: Path) -> set[str]:
    """The files the recorded delete intents of ``location`` name."""
    return {str(location / json.loads(p.read_text())["path"])
            for p in (location / "_steward" / "deletes").glob("*.json")}


def _wait_for_exit(app_id: str, timeout: float = 90) -> None:
    """Until no executor JVM of ``app_id`` runs: they outlive a killed driver for a while and
    record the deletes they ask for meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"],
                               capture_output=True, text=True).stdout.split()
        if not found:
            return
        time.sleep(0.5)
    raise AssertionError(f"executors of {app_id} still run after {timeout}s")


def test_a_killed_drivers_location_is_cleaned_by_gc_restarted_and_dropped(tmp_path: Path) -> None:
    storage, location, faults = tmp_path / "storage", tmp_path / "ckpt", tmp_path / "faults"
    faults.mkdir()
    (faults / "fail-deletes").write_text("1.0")  # every delete Spark asks for fails
    # The driver retries recorded deletes every sweep interval while the query runs; a machine
    # slow enough to need more than the default minute to reach batch 10 would settle some
    # before the crash. Here only gc may settle them.
    flags = steward_conf(storage, *(f"{k}={v}" for k, v in RETAIN.items()),
                         "spark.sql.shuffle.partitions=4",
                         "spark.steward.streams.sweep-interval=1h",
                         f"spark.steward.streams.delegate-class={FAULTY}",
                         f"{DIR_KEY}={faults}")
    flags += ["--jars", str(faulty_jar())]
    first = BackgroundJob(SCRIPTS / "stream_job.py", flags, tmp_path / "first.json",
                          str(location), "10", "--sleep", "300")
    job = first.wait_for_output()
    # A crash: the JVM and the Python driver, no shutdown hook runs.
    os.kill(job["jvm"], signal.SIGKILL)
    os.kill(job["pid"], signal.SIGKILL)
    first.thread.join(120)
    _wait_for_exit(job["app_id"])
    asked = set(deletes_asked(faults))
    assert asked and all(os.path.exists(p) for p in asked)  # nothing deleted before the crash
    recorded = _intent_targets(location)
    assert recorded and recorded <= asked
    # A delete in flight at the kill (asked, its intent not yet written) cannot be recorded:
    # at most one per deleting thread (the driver's log purge, each executor's maintenance).
    assert len(asked - recorded) <= 3, sorted(asked - recorded)
    temp = location / "offsets" / f".11.{uuid.uuid4()}.tmp"  # a write the kill cut short
    temp.write_text("half")
    (faults / "fail-deletes").unlink()  # the storage recovers

    [stream] = _cli(storage, "streams", "ls")["streams"]
    assert stream["query_id"] == job["query_id"] and stream["state"] == "stopped"
    assert stream["application"] == "crashed"
    report = {c["name"]: c for c in _cli(storage, "gc")["collectors"]}["streams"]
    assert report["failed"] == [] and len(report["deleted"]) == 1
    assert [p for p in recorded if os.path.exists(p)] == []
    assert not temp.exists()
    assert not list((location / "_steward" / "deletes").iterdir())

    # Another query's location, deleted by hand an hour after its run ended: only its record
    # is left, which the next attach removes (its grace, 10 minutes, passed).
    records = StreamRegistry(Storage.from_url(storage.as_uri()))
    counts = records.read(job["query_id"])
    assert counts is not None
    ghost_id, now = str(uuid.uuid4()), time.time()
    records.write(replace(counts, query_id=ghost_id, name="deleted",
                          location=f"file:{tmp_path / 'deleted-ckpt'}", started=now - 7200,
                          heartbeat=now - 3700, stopped=now - 3600))
    assert {s["name"] for s in _cli(storage, "streams", "ls")["streams"]} == {"counts", "deleted"}

    # The query goes on from its location in a new application, with its state.
    result = run_spark_submit(SCRIPTS / "stream_job.py",
                              steward_conf(storage, "spark.sql.shuffle.partitions=4"),
                              str(tmp_path / "second.json"), str(location), str(job["batch"] + 3),
                              master=ONE_EXECUTOR)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["query_id"] == job["query_id"] and second["run_id"] != job["run_id"]
    assert second["total"] > job["total"]  # counts continued from the restored state
    [stream] = _cli(storage, "streams", "ls")["streams"]  # the deleted location's record went
    assert stream["app_id"] == second["app_id"] and stream["state"] == "stopped"
    assert records.read(ghost_id) is None

    drop = subprocess.run([sys.executable, "-m", "spark_steward.cli", "streams", "drop", "counts",
                           "--storage", storage.as_uri(), "--drop-grace", "0s"],
                          capture_output=True, text=True)
    assert drop.returncode == 0, drop.stdout + drop.stderr
    assert not location.exists()
    assert _cli(storage, "streams", "ls")["streams"] == []
