"""(b) conf flags alone activate spark-steward for an unmodified script run by spark-submit;
(e) a bad value fails at attach with one line naming key and value; an unknown one warns.

Two applications of the unmodified plain job carry the checks of several files, each a test of
its own here: the one stopped with ``spark.stop()`` (an unknown key in its conf, log4j at WARN
for spark-steward, Spark's own checkpoints, files shipped with addFile and addArchive: from
test_observability, test_submit_checkpoints and test_submit_files) and the one with
spark-steward switched off (Spark's checkpoints as the control, a left-over host-local folder:
from test_submit_checkpoints and test_app_end_cleanup).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.spark.conftest import LOCAL_DIR, NO_EXECUTOR, SCRIPTS, run_spark_submit, steward_conf
from tests.spark.test_observability import SPARK_LINE, log4j_properties, log_flags
from tests.spark.test_submit_checkpoints import EXPECTED, _entries, _files

PLAIN = SCRIPTS / "plain_job.py"
TYPO = "spark.steward.heartbeat.intervall=5s"


def _registry(storage: Path) -> ApplicationRegistry:
    return ApplicationRegistry(Storage.from_url(storage.as_uri()), heartbeat_timeout=120)


@dataclass
class Run:
    """One spark-submit of the plain job: its folders, its process and what it wrote."""

    tmp: Path
    result: subprocess.CompletedProcess[str]

    @property
    def storage(self) -> Path:
        return self.tmp / "storage"

    @property
    def cpdir(self) -> Path:
        return self.tmp / "cp"

    @property
    def log(self) -> str:
        return self.result.stdout + self.result.stderr

    @property
    def job(self) -> dict[str, Any]:
        assert self.result.returncode == 0, self.log[-4000:]
        return json.loads((self.tmp / "out.json").read_text())  # type: ignore[no-any-return]


def _plain(tmp: Path, flags: list[str], *args: str) -> Run:
    result = run_spark_submit(PLAIN, flags, str(tmp / "out.json"), *args)
    return Run(tmp, result)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Conf flags alone, an unknown key among them, log4j at WARN for spark-steward, Spark's own
    checkpoints, files shipped with Spark's API; ``spark.stop()`` at the end."""
    tmp = tmp_path_factory.mktemp("stopped")
    (tmp / "work").mkdir()
    flags = steward_conf(tmp / "storage", TYPO) \
        + log_flags(log4j_properties(tmp / "warn.properties", "warn"))
    return _plain(tmp, flags, "--checkpoint-dir", str(tmp / "cp"), "--files", str(tmp / "work"))


@pytest.fixture(scope="module")
def disabled(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The same flags with ``spark.steward.enabled=false``: Spark's own checkpoints, and a
    host-local folder made by hand once both executors are up."""
    tmp = tmp_path_factory.mktemp("disabled")
    flags = steward_conf(tmp / "storage", f"spark.steward.local.dir={tmp / 'local'}")
    flags = ["spark.steward.enabled=false" if f == "spark.steward.enabled=true" else f
             for f in flags]
    assert "spark.steward.enabled=false" in flags
    return _plain(tmp, flags, "--checkpoint-dir", str(tmp / "cp"), "--left-over",
                  str(tmp / "local"))


def test_script_never_imports_spark_steward() -> None:
    assert "spark_steward" not in PLAIN.read_text()
    assert "spark_steward" not in (SCRIPTS / "spark_checkpoint_job.py").read_text()


@pytest.mark.parametrize("stop", [True, False], ids=["spark.stop", "interpreter-exit"])
def test_conf_flags_alone_attach_and_detach_cleanly(request: pytest.FixtureRequest,
                                                    tmp_path: Path, stop: bool) -> None:
    """Also (the spark.stop run): an unknown key warns with the closest known one and changes
    nothing else."""
    run = request.getfixturevalue("stopped") if stop \
        else _plain(tmp_path, steward_conf(tmp_path / "storage"), "--no-stop")
    job = run.job
    assert job["total"] == sum(x * x for x in range(100))
    assert job["udf"] == list(range(1, 11))
    registry = _registry(run.storage)
    record = registry.read(job["app_id"])
    assert record is not None, f"no application record for {job['app_id']}"
    assert record.app_name == "plain-job" and record.pid == job["pid"]
    assert registry.liveness(record) is Liveness.FINISHED
    warning = ("unknown spark-steward key spark.steward.heartbeat.intervall; did you mean "
               "spark.steward.heartbeat.interval?")
    assert (warning in run.log) == stop


def test_spark_checkpoints_of_an_unmodified_script_are_gone_after_stop(stopped: Run) -> None:
    """(From test_submit_checkpoints.) Spark's own checkpoints, owned by spark-steward, are gone
    after ``spark.stop()``, with the same results."""
    job, cpdir = stopped.job, stopped.cpdir
    assert {k: job[k] for k in EXPECTED} == EXPECTED
    assert cpdir.is_dir() and _files(cpdir) == [], _files(cpdir)
    assert list(cpdir.iterdir()) == []          # Spark's <uuid> folder went too
    assert _entries(stopped.storage) == []


def test_unmodified_add_file_script_runs_through_the_blob_service(stopped: Run) -> None:
    """(From test_submit_files.) addFile / addArchive / SparkFiles with the conf flags alone:
    same results, served by the blob service, and nothing of the application left after
    ``spark.stop()``."""
    job, storage = stopped.job, stopped.storage
    app_id = job["app_id"]
    assert {tuple(r[1:]) for r in job["files"]} == {("hello\n", "1,2\n")}
    # Served from the application's folder by spark-steward, under Spark's own file name.
    for path, _, _ in job["files"]:
        assert path.startswith(str(LOCAL_DIR / app_id / "files")), path
        assert Path(path).name == "vocab.txt"
    # After spark.stop(): nothing of the application locally or in the HA storage.
    assert not (LOCAL_DIR / app_id).exists()
    assert not (storage / "apps" / app_id / "blobs").exists()
    assert sorted(p.name for p in (storage / "apps").iterdir()) in ([], [app_id])


def test_log4j_at_warn_keeps_steward_info_records_out(stopped: Run) -> None:
    """(From test_observability.) spark-steward's INFO records follow log4j's level: at WARN,
    none reaches the driver's log."""
    stderr = stopped.result.stderr
    assert stopped.result.returncode == 0, stderr[-4000:]
    assert "attached to" not in stderr and "detached from" not in stderr
    assert not [line for line in stderr.splitlines()
                if SPARK_LINE.match(line) and " INFO " in line], stderr[-4000:]


def test_disabled_costs_nothing_and_writes_nothing(disabled: Run) -> None:
    assert disabled.result.returncode == 0, disabled.log[-4000:]
    assert not disabled.storage.exists()


def test_spark_checkpoints_without_spark_steward_stay(disabled: Run) -> None:
    """(From test_submit_checkpoints.) The control: Spark alone (spark-steward switched off)
    leaves its checkpoint files behind (what the issue is about)."""
    job = disabled.job
    assert {k: job[k] for k in EXPECTED} == EXPECTED
    assert len([f for f in _files(disabled.cpdir) if "/rdd-" in f and "part-" in f]) >= 3


def test_disabled_leaves_executor_hosts_alone(disabled: Run) -> None:
    """(From test_app_end_cleanup.) The folder (made by hand here) is not removed: neither the
    executors' plugins nor the driver did anything."""
    job = disabled.job
    assert job["total"] == sum(x * x for x in range(100))
    assert job["after_stop"] == ["left-over", "left-over/f"]
    assert "AppEndDriver" not in disabled.log
    assert "removes the application's folder" not in disabled.log


def test_bad_value_fails_at_attach_with_one_line(tmp_path: Path) -> None:
    """Refused by the driver's Python before any job: no executor needed (local[2])."""
    result = run_spark_submit(
        PLAIN, steward_conf(tmp_path / "storage", "spark.steward.heartbeat.interval=often"),
        str(tmp_path / "out.json"), master=NO_EXECUTOR)
    assert result.returncode != 0
    # spark-submit's PythonRunner sends the Python driver's stderr to its own stdout.
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if "ConfigError" in line]
    assert lines, output[-3000:]
    assert lines[-1] == ("spark_steward.errors.ConfigError: spark.steward.heartbeat.interval="
                         "'often' is not valid: expected a duration such as 500ms, 10s, 5min "
                         "or 1h")
    assert not (tmp_path / "out.json").exists()
