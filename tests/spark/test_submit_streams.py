"""A streaming query's location after its driver was SIGKILLed (issue 24): the failed deletes it
recorded and the temp files it left are cleaned by ``spark-steward gc``; the query restarts from
the location in a new application; ``spark-steward streams drop`` then removes it all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import SCRIPTS, BackgroundJob, run_spark_submit, steward_conf
from tests.spark.test_streams import RETAIN
from tests.support.faulty_files import CLASS as FAULTY, DIR_KEY, deletes_asked, faulty_jar

pytestmark = pytest.mark.spark


def _cli(storage: Path, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "spark_steward.cli", *args, "--storage",
                           storage.as_uri(), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_killed_drivers_location_is_cleaned_by_gc_restarted_and_dropped(tmp_path: Path) -> None:
    storage, location, faults = tmp_path / "storage", tmp_path / "ckpt", tmp_path / "faults"
    faults.mkdir()
    (faults / "fail-deletes").write_text("1.0")  # every delete Spark asks for fails
    flags = steward_conf(storage, *(f"{k}={v}" for k, v in RETAIN.items()),
                         "spark.sql.shuffle.partitions=4",
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
    asked = set(deletes_asked(faults))
    assert asked and all(os.path.exists(p) for p in asked)  # nothing deleted, all recorded
    assert list((location / "_steward" / "deletes").glob("*.json"))
    temp = location / "offsets" / f".11.{uuid.uuid4()}.tmp"  # a write the kill cut short
    temp.write_text("half")
    (faults / "fail-deletes").unlink()  # the storage recovers

    [stream] = _cli(storage, "streams", "ls")["streams"]
    assert stream["query_id"] == job["query_id"] and stream["state"] == "stopped"
    assert stream["application"] == "crashed"
    report = {c["name"]: c for c in _cli(storage, "gc")["collectors"]}["streams"]
    assert report["failed"] == [] and len(report["deleted"]) == 1
    assert [p for p in asked if os.path.exists(p)] == []
    assert not temp.exists()
    assert not list((location / "_steward" / "deletes").iterdir())

    # The query goes on from its location in a new application, with its state.
    result = run_spark_submit(SCRIPTS / "stream_job.py",
                              steward_conf(storage, "spark.sql.shuffle.partitions=4"),
                              str(tmp_path / "second.json"), str(location), str(job["batch"] + 3))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["query_id"] == job["query_id"] and second["run_id"] != job["run_id"]
    assert second["total"] > job["total"]  # counts continued from the restored state
    [stream] = _cli(storage, "streams", "ls")["streams"]
    assert stream["app_id"] == second["app_id"] and stream["state"] == "stopped"

    drop = subprocess.run([sys.executable, "-m", "spark_steward.cli", "streams", "drop", "counts",
                           "--storage", storage.as_uri(), "--drop-grace", "0s"],
                          capture_output=True, text=True)
    assert drop.returncode == 0, drop.stdout + drop.stderr
    assert not location.exists()
    assert _cli(storage, "streams", "ls")["streams"] == []
