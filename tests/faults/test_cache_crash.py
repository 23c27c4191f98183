"""A driver SIGKILLed while it materializes a cached table leaves a pending entry and partial
Parquet files; the next application's attach removes all of it, and that application (an
unmodified script whose ``df.cache()`` goes through spark-steward) leaves nothing either.
``spark-steward gc`` does the same without Spark (tests/unit/test_cli_cache.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.spark.conftest import ONE_EXECUTOR, SCRIPTS, BackgroundJob, run_spark_submit, steward_conf
from tests.spark.test_submit_cache import ROWS, TRANSPARENT, expected_job, write_input

SCRIPT = Path(__file__).parent / "scripts" / "cache_crash.py"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) \
        if root.exists() else []


def test_a_driver_killed_during_materialization_leaves_nothing_after_the_next_attach(
        tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    # One executor: it writes the table's files and outlives the driver for a while.
    run = BackgroundJob(SCRIPT, steward_conf(storage), tmp_path / "job.json",
                        master=ONE_EXECUTOR)
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

    killed = [f for f in _files(tables) if f.startswith("entries/")]

    # The next application on this storage: an unmodified script with transparent caching.
    out, source = tmp_path / "next.json", write_input(tmp_path / "in")
    result = run_spark_submit(SCRIPTS / "cache_job.py", steward_conf(storage, TRANSPARENT),
                              str(out), str(source), master=ONE_EXECUTOR)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job = json.loads(out.read_text())
    assert {k: job[k] for k in ("rows", "total", "top", "high")} == expected_job()
    assert job["udf_calls"] == ROWS, "its own table was materialized once for four actions"
    assert killed and _files(tables) == [], "the attach removed the dead driver's table and " \
        "the stop removed its own"
