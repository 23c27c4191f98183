"""Every capability on each supported pyspark line: one real spark-submit of the line's Spark
(local-cluster[2,1,1024], the flags of ``spark-steward conf``) runs tests/compat/smoke_job.py,
and each test checks one capability in its report.

Plain ``pytest`` runs the 3.5 line and the older 3.4; ``SPARK_STEWARD_COMPAT_LINES=3.5,4.0,4.1,4.2``
(or ``python -m tests.compat.run --lines 3.5,4.0``) picks others. A line's pyspark is installed
once per machine outside the checkout (tests/compat/harness.py). An older line (3.4) runs a
plain job instead: one warning, no attach, the job's own results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import PySparkLine, install, status, submit
from tests.compat.lines import LINES, OLDER, requested_lines
from tests.spark.conftest import NO_EXECUTOR, SCRIPTS

pytestmark = pytest.mark.spark

ROWS = 1200  # the smoke job's cached table: rows through its counting UDF per computation
SMOKE_JOB = Path(__file__).with_name("smoke_job.py")
SUPPORTED = [line for line in requested_lines() if line in LINES]
OLDER_ASKED = [line for line in requested_lines() if line in OLDER] or [
    pytest.param(None, marks=pytest.mark.skip(reason="no older line asked for "
                                                     "(python -m tests.compat.run --lines 3.4)"))]


@dataclass(frozen=True)
class SmokeRun:
    line: PySparkLine
    report: dict[str, Any]
    work: Path
    storage: Path

    def section(self, name: str) -> dict[str, Any]:
        found = self.report[name]
        assert "error" not in found, f"{name} on pyspark {self.line.version}: " \
                                     f"{found['error']}\n{found.get('trace', '')}"
        return found  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=SUPPORTED)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    line = install(request.param)
    root = tmp_path_factory.mktemp(f"compat-{line.version}")
    work, storage, out = root / "work", root / "storage", root / "report.json"
    work.mkdir()
    done = submit(line, storage, SMOKE_JOB, str(out), str(work))
    assert done.returncode == 0 and out.is_file(), \
        f"spark-submit on pyspark {line.version} exited {done.returncode}:\n" \
        f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return SmokeRun(line, json.loads(out.read_text()), work, storage)


def test_the_job_ran_on_the_line_with_spark_steward_attached(run: SmokeRun) -> None:
    report = run.report
    assert report["spark_version"] == run.line.version == report["pyspark_version"]
    assert Path(report["pyspark_file"]).is_relative_to(run.line.root), report["pyspark_file"]
    assert run.section("attach") == {"enabled": True, "plugin": True,
                                     "seconds": report["attach"]["seconds"]}


def test_blobs_reach_tasks_and_sparkfiles_is_served_by_them(run: SmokeRun) -> None:
    found = run.section("blobs")
    assert found["udf_rows"] == ["lookup-table"], "a UDF reads a blob in a fresh Python worker"
    assert found["blob_rows"] == [[i, 8000, "lookup-table"] for i in range(4)]
    assert found["file_contents"] == [["hello\n", "1,2\n"]]
    assert found["file_paths_in_local_dir"] is True
    assert found["driver_file"] == "hello\n"
    assert found["listed"] >= 4  # two puts, the file and the archive


def test_checkpoints_save_restore_merged_and_cleaned_up(run: SmokeRun) -> None:
    found = run.section("checkpoints")
    first, second = found["ids"]
    assert second > first
    assert found["restored"] == [5000, sum(3 * i for i in range(0, 10000, 2))]
    assert found["cleaner_idle"] is True
    assert found["states"] == [[second, "completed"]], "retained=1: the first was subsumed"
    merged = found["merged_files"]
    assert 0 < len(merged) < 4, f"4 partitions merged into fewer physical files: {merged}"
    assert all(name.startswith(f"{second:010d}/") for name in merged), \
        f"the subsumed checkpoint's physical files are deleted: {merged}"
    assert found["spark_checkpoint"] == [10000, sum(x * x for x in range(100)), True]
    left = [p for p in (run.work / "spark-checkpoints").rglob("*") if p.is_file()]
    assert left == [], "Spark's own checkpoint files are gone after the run"


def test_cached_table_invalidate_recompute_fallback_and_close(run: SmokeRun) -> None:
    found = run.section("cached_tables")
    assert found["type"] == "CachedTable"
    assert found["first"] == [30, 30, ROWS], "materialized once, then read"
    assert found["after_invalidate"] == [30, 2 * ROWS], "computed again, once"
    assert found["after_damage"] == [True, 3 * ROWS], "a missing file: recomputed, same rows"
    assert found["shared"] == [ROWS, "s-"], "a shared table is shared on this line"
    assert found["closed"] >= 2 and found["folder_after_close"] is False


def test_local_state_round_trips_and_refuses_a_corrupted_value(run: SmokeRun) -> None:
    found = run.section("local_state")
    assert found["rows"] == [[i, True, None] for i in range(4)]


def test_streaming_locations_are_recorded_swept_and_dropped(run: SmokeRun) -> None:
    found = run.section("streams")
    package = "V40" if run.line.version.startswith(("3.", "4.0")) else ""
    assert found["manager"] == f"io.sparksteward.shim.streams.StreamCheckpointFiles{package}"
    assert found["running"] == [[True, "running"]]
    assert found["cleaner_idle"] is True and found["stopped"] == ["stopped"]
    assert found["temp_swept"] is True and found["offsets_kept"] >= 2
    assert found["packed"] == [True, True]
    assert found["restarted_from_packs"] == [True, True, True]  # state restored from packs
    assert found["dropped_files"] > 0 and found["location_after_drop"] is False


def test_application_record_running_then_finished(run: SmokeRun) -> None:
    assert run.section("records")["running"] == ["live", "compat-smoke", True]
    record = status(run.storage)[run.report["app_id"]]
    assert record["state"] == "finished" and record["finished_at"] is not None


def test_the_local_folder_is_removed_at_app_end(run: SmokeRun) -> None:
    assert run.report["local_folder_before_stop"] is True
    assert run.report["local_folder_after_stop"] is False
    assert not Path(run.report["local_folder"]).exists()


# -- an older line ------------------------------------------------------------------------------

@pytest.mark.parametrize("older", OLDER_ASKED)
def test_an_older_spark_runs_as_plain_spark_after_one_warning(
        older: str, tmp_path: Path) -> None:
    line = install(older)
    storage, out = tmp_path / "storage", tmp_path / "out.json"
    # No executor JVM: what is checked is the driver stepping aside, and the job's results.
    done = submit(line, storage, SCRIPTS / "plain_job.py", str(out), master=NO_EXECUTOR)
    assert done.returncode == 0, done.stderr[-6000:]
    job = json.loads(out.read_text())
    assert job["total"] == sum(x * x for x in range(100)) and job["udf"] == list(range(1, 11))
    # spark-submit hands the driver's Python stderr on through its own stdout.
    output = done.stdout + done.stderr
    warning = f"spark-steward supports Spark 3.5, 4.0–4.3; this is Spark {line.version}"
    assert output.count(warning) == 1 and "Traceback" not in output, output[-6000:]
    assert not (storage / "applications").exists(), "nothing attached: no application record"
