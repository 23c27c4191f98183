"""`spark-steward status` shows each application's cleanup backlog from its record: pending
deletions and the oldest one's age, retries, and what was given up with its last error."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from spark_steward.applications import ApplicationRegistry, CleanupBacklog, GivenUp
from spark_steward.cli import main
from spark_steward.storage import Storage

ERROR = "PermissionError: [Errno 13] Permission denied: 'checkpoints/s/3/data'"


@pytest.fixture
def storage_dir(tmp_path: Path) -> Path:
    registry = ApplicationRegistry(Storage.from_url(str(tmp_path)), heartbeat_timeout=120.0)
    busy = CleanupBacklog(pending=3, oldest_pending_at=time.time() - 540, retries=41,
                          given_up=(GivenUp("checkpoint pagerank/3", ERROR),
                                    GivenUp("tables/abc", "OSError: busy")))
    registry.write(replace(registry.new_record("app-busy", "busy"), cleanup=busy))
    registry.finish(replace(registry.new_record("app-clean", "clean"),
                            cleanup=CleanupBacklog()))
    registry.write(registry.new_record("app-old", "written by an older version"))
    return tmp_path


def test_status_table_lists_backlog_under_the_application(
        capsys: pytest.CaptureFixture[str], storage_dir: Path) -> None:
    assert main(["status", "--storage", str(storage_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("app-busy"))
    assert lines[at + 1] == ("  cleanup: 3 deletions pending (oldest asked 9min ago), "
                             "41 retries, 2 given up")
    assert lines[at + 2] == f"    given up: checkpoint pagerank/3: {ERROR}"
    assert lines[at + 3] == "    given up: tables/abc: OSError: busy"
    # Nothing owed, or a record without the field: no extra line.
    for app in ("app-clean", "app-old"):
        i = next(i for i, line in enumerate(lines) if line.startswith(app))
        assert i + 1 == len(lines) or not lines[i + 1].startswith(" ")


def test_status_json_carries_the_backlog(capsys: pytest.CaptureFixture[str],
                                         storage_dir: Path) -> None:
    assert main(["status", "--storage", str(storage_dir), "--json"]) == 0
    apps = {a["app_id"]: a for a in json.loads(capsys.readouterr().out)["applications"]}
    busy = apps["app-busy"]["cleanup"]
    assert busy["pending"] == 3 and busy["retries"] == 41
    assert busy["oldest_pending_at"] == pytest.approx(time.time() - 540, abs=60)
    assert busy["given_up"] == [{"what": "checkpoint pagerank/3", "error": ERROR},
                                {"what": "tables/abc", "error": "OSError: busy"}]
    assert busy["given_up_total"] == 2
    assert apps["app-clean"]["cleanup"] == {"pending": 0, "oldest_pending_at": None,
                                            "retries": 0, "given_up": [], "given_up_total": 0}
    assert apps["app-old"]["cleanup"] is None
