"""A driver killed with SIGKILL leaves a record that later runs see as crashed at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from spark_steward.applications import ApplicationRegistry
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.spark.conftest import NO_EXECUTOR, SCRIPTS, BackgroundJob, steward_conf


def test_sigkilled_driver_is_seen_as_crashed(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    out = tmp_path / "out.json"
    # The driver's record and its process are what is judged: no executor JVM needed.
    runner = BackgroundJob(SCRIPTS / "plain_job.py", steward_conf(storage), out, "--sleep",
                           "300", master=NO_EXECUTOR)
    job = runner.wait_for_output()
    registry = ApplicationRegistry(Storage.from_url(storage.as_uri()), heartbeat_timeout=600)
    assert registry.liveness(registry.read(job["app_id"])) is Liveness.LIVE
    os.kill(job["pid"], signal.SIGKILL)
    runner.thread.join(120)
    record = registry.read(job["app_id"])
    assert record is not None and not record.finished
    # Same host, driver process gone: crashed at once, long before the heartbeat goes stale.
    assert registry.liveness(record) is Liveness.CRASHED
    status = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                             storage.as_uri(), "--json"], capture_output=True, text=True,
                            check=True)
    states = {a["app_id"]: a["state"] for a in json.loads(status.stdout)["applications"]}
    assert states == {job["app_id"]: "crashed"}
