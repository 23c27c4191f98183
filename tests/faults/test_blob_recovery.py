"""Blobs of a killed driver: untouched while it lives, taken over and removed by the next
application that attaches to the same storage (HA copies) and runs on the same host (local)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.spark.conftest import LOCAL_DIR, SCRIPTS, run_spark_submit, steward_conf

pytestmark = pytest.mark.spark


def test_dead_drivers_blobs_are_removed_and_live_ones_never_touched(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    holder_out = tmp_path / "holder.json"
    result: dict[str, subprocess.CompletedProcess[str]] = {}
    runner = threading.Thread(target=lambda: result.setdefault(
        "r", run_spark_submit(SCRIPTS / "blob_holder.py", steward_conf(storage),
                              str(holder_out), timeout=400)))
    runner.start()
    deadline = time.monotonic() + 180
    while not holder_out.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert holder_out.exists(), "the holder never got going: " + str(result)
    holder = json.loads(holder_out.read_text())
    ha_blobs = storage / "apps" / holder["app_id"] / "blobs"
    local = LOCAL_DIR / holder["app_id"]
    assert any(ha_blobs.rglob(holder["key"])) and Path(holder["cached"]).exists()

    # A second application while the holder lives: nothing of the holder's is touched.
    first = run_spark_submit(SCRIPTS / "plain_job.py", steward_conf(storage),
                             str(tmp_path / "a.json"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert any(ha_blobs.rglob(holder["key"])) and Path(holder["cached"]).exists()

    os.kill(holder["pid"], signal.SIGKILL)
    runner.join(120)
    # The next application on this host and storage takes the dead holder's blobs over.
    second = run_spark_submit(SCRIPTS / "plain_job.py", steward_conf(storage),
                              str(tmp_path / "b.json"))
    assert second.returncode == 0, second.stderr[-2000:]
    assert not ha_blobs.exists()
    assert not local.exists()
