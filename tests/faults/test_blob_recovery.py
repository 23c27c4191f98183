"""Blobs and host-local state of a killed driver: untouched while it lives, taken over and
removed by the next application that attaches to the same storage (HA copies) and runs on the
same host (its working dir). A cleanly stopped application leaves nothing on the host."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.spark.conftest import (LOCAL_DIR, ONE_EXECUTOR, SCRIPTS, BackgroundJob,
                                  run_spark_submit, steward_conf)


def test_dead_drivers_blobs_are_removed_and_live_ones_never_touched(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    holder_out = tmp_path / "holder.json"
    # One executor: the host's blob cache and working dir are what is checked.
    runner = BackgroundJob(SCRIPTS / "blob_holder.py", steward_conf(storage), holder_out,
                           master=ONE_EXECUTOR)
    holder = runner.wait_for_output()
    ha_blobs = storage / "apps" / holder["app_id"] / "blobs"
    local = LOCAL_DIR / holder["app_id"]
    assert any(ha_blobs.rglob(holder["key"])) and Path(holder["cached"]).exists()
    assert Path(holder["state"]).read_bytes() == b"held" * 1000

    # A second application while the holder lives: nothing of the holder's is touched, and
    # after its clean stop nothing of its own is left in the working dir.
    first = run_spark_submit(SCRIPTS / "blob_holder.py", steward_conf(storage),
                             str(tmp_path / "a.json"), "--stop", master=ONE_EXECUTOR)
    assert first.returncode == 0, first.stderr[-2000:]
    stopped = json.loads((tmp_path / "a.json").read_text())
    assert stopped["state"].startswith(str(LOCAL_DIR / stopped["app_id"]))
    assert not (LOCAL_DIR / stopped["app_id"]).exists(), "a clean stop leaves nothing"
    assert any(ha_blobs.rglob(holder["key"])) and Path(holder["cached"]).exists()
    assert Path(holder["state"]).read_bytes() == b"held" * 1000

    os.kill(holder["pid"], signal.SIGKILL)
    runner.thread.join(120)
    # The next application on this host and storage takes the dead holder's blobs over.
    second = run_spark_submit(SCRIPTS / "plain_job.py", steward_conf(storage),
                              str(tmp_path / "b.json"), master=ONE_EXECUTOR)
    assert second.returncode == 0, second.stderr[-2000:]
    assert not ha_blobs.exists()
    assert not local.exists(), "the dead holder's blob cache and local state are gone"
