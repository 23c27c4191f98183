"""A driver SIGKILLed while it materializes a cached table leaves a pending entry and partial
Parquet files; ``spark-steward gc`` (and any later attach) removes all of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import BackgroundJob, steward_conf

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).parent / "scripts" / "cache_crash.py"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) \
        if root.exists() else []


def test_a_driver_killed_during_materialization_leaves_nothing_after_gc(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    run = BackgroundJob(SCRIPT, steward_conf(storage), tmp_path / "job.json")
    job = run.wait_for_output()
    tables = storage / "tables"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            "_temporary" in f for f in _files(tables / "data")):
        time.sleep(0.1)   # the pending entry is written before the first task starts
    entries = [json.loads((tables / f).read_text())["body"] for f in _files(tables)
               if f.startswith("entries/")]
    assert [(e["app_id"], e["state"]) for e in entries] == [(job["app_id"], "pending")]
    assert any("_temporary" in f for f in _files(tables / "data")), _files(tables)
    os.kill(job["pid"], signal.SIGKILL)
    run.thread.join(120)
    assert _files(tables), "a crash cleans nothing"
    deadline = time.monotonic() + 60   # executors of the dead driver stop writing first
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{job['app_id']}"],
            capture_output=True).returncode == 0:
        time.sleep(0.2)

    gc = subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                         storage.as_uri(), "--json"], capture_output=True, text=True)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    report = {c["name"]: c for c in json.loads(gc.stdout)["collectors"]}["caches"]
    assert [d["item"] for d in report["deleted"]] and report["failed"] == []
    assert _files(tables) == []
