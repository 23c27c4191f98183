"""At ``spark.stop()`` the executors remove the application's host-local folder on their hosts;
an executor that ends while the application runs does not (local-cluster[2,1,1024] through
spark-submit; both executors share this host and its folder).

The driver service's own removal of the folder on its host is switched off in these runs
(``--driver-removal-off``), so a folder gone after ``spark.stop()`` was removed by the
executors; the driver's log says which executor reported what.

Two cases run in applications other files start: an application that ends in order is
test_platform_conf's command-line run (test_executors_remove_their_hosts_folder_at_stop there:
the same job, mode and flags, a platform's plugin beside), and spark-steward switched off is
test_submit's disabled run (test_disabled_leaves_executor_hosts_alone there: a folder made by
hand outlives ``spark.stop()``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf

JOB = SCRIPTS / "app_end_job.py"
KEYS = [f"p{i}" for i in range(8)]


def run(tmp_path: Path, mode: str) -> tuple[dict[str, Any], str]:
    flags = steward_conf(tmp_path / "storage", f"spark.steward.local.dir={tmp_path / 'local'}")
    out = tmp_path / "out.json"
    result = run_spark_submit(JOB, flags, str(out), mode, "--driver-removal-off")
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return json.loads(out.read_text()), log


def end_summary(log: str, app_id: str) -> str:
    lines = [line for line in log.splitlines()
             if f"spark-steward: application {app_id} ended; host-local folders" in line]
    assert len(lines) == 1, "no (or more than one) application-end summary in the driver's log"
    return lines[0]


def reported(summary: str) -> dict[str, str]:
    """executor id -> what it reported about its host's folder."""
    return dict(re.findall(r"executor (\d+) on [^:]+: ([a-z]+)", summary))


def test_an_executor_stopped_mid_application_keeps_the_folder(tmp_path: Path) -> None:
    """killExecutor: the executor stops in order (SIGTERM from its worker, shutdown hooks) and
    asks the driver, which answers that the application runs."""
    job, log = run(tmp_path, "kill")
    assert job["kill_acknowledged"]
    assert "spark-steward: executor 1 ends while the application runs" in log
    assert job["after_kill"] == job["before"], "the killed executor touched the folder"
    # The application keeps working on the remaining executor, with every value still there.
    assert job["read_on"] == ["0"]
    assert job["read_after_kill"] == [KEYS] * 4
    assert job["after_stop"] is None
    assert reported(end_summary(log, job["app_id"])) == {"0": "removed"}


def test_an_executor_killed_outright_keeps_the_folder_and_is_not_waited_for(tmp_path: Path
                                                                            ) -> None:
    """SIGKILL: no word from the executor; standalone starts a replacement on the host."""
    job, log = run(tmp_path, "sigkill")
    assert job["after_kill"] == job["before"]
    assert job["read_after_kill"] == [KEYS] * 4
    assert "2" in job["read_on"]
    assert job["after_stop"] is None
    outcomes = reported(end_summary(log, job["app_id"]))
    assert set(outcomes) == {"0", "2"}, outcomes
    assert "did not ask" not in log and job["stop_seconds"] < 10
