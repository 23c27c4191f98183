"""An unmodified script using ``sc.setCheckpointDir`` + ``df.checkpoint()`` / ``rdd.checkpoint()``
through spark-submit with the conf flags: same results, and nothing left behind after a normal
stop, nor after a SIGKILL followed by ``spark-steward gc``.

The normal stop and the control (Spark alone leaves its files) are checked in applications
test_submit.py already runs (the plain job with ``--checkpoint-dir``, steward on and off):
test_spark_checkpoints_of_an_unmodified_script_are_gone_after_stop and
test_spark_checkpoints_without_spark_steward_stay there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.spark.conftest import SCRIPTS, BackgroundJob, steward_conf

EXPECTED = {"eager": 3 * sum(range(20000)), "lazy": 10000, "rdd": sum(x * x for x in range(1000)),
            "rdd_checkpointed": True}


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _entries(storage: Path) -> list[str]:
    return _files(storage / "checkpoints") if (storage / "checkpoints").exists() else []


def test_spark_checkpoints_of_a_killed_driver_are_removed_by_gc(tmp_path: Path) -> None:
    storage, out, cpdir = tmp_path / "storage", tmp_path / "out.json", tmp_path / "cp"
    job_run = BackgroundJob(SCRIPTS / "spark_checkpoint_job.py", steward_conf(storage), out,
                            str(cpdir), "--sleep", "300")
    job = job_run.wait_for_output()
    assert {k: job[k] for k in EXPECTED} == EXPECTED
    written = [f for f in _files(cpdir) if "part-" in f]
    assert len(written) >= 3, written
    states = {json.loads((storage / "checkpoints" / e).read_text())["body"]["state"]
              for e in _entries(storage)}
    assert states <= {"pending", "completed"} and states
    # A crash takes the JVM with it: killing the Python process alone lets the JVM drop py4j's
    # references and its ContextCleaner legitimately clean a checkpoint before it exits.
    os.kill(job["jvm_pid"], signal.SIGKILL)
    os.kill(job["pid"], signal.SIGKILL)
    job_run.thread.join(120)
    assert [f for f in _files(cpdir) if "part-" in f] == written   # a crash cleans nothing
    gc = subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                         storage.as_uri(), "--json"], capture_output=True, text=True)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    report = {c["name"]: c for c in json.loads(gc.stdout)["collectors"]}["checkpoints"]
    assert len(report["deleted"]) >= 3 and report["failed"] == [], gc.stdout
    assert _files(cpdir) == [] and list(cpdir.iterdir()) == []
    assert _entries(storage) == []
