"""(b) conf flags alone activate spark-steward for an unmodified script run by spark-submit;
(e) a bad value fails at attach with one line naming key and value; an unknown one warns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf

PLAIN = SCRIPTS / "plain_job.py"


def _registry(storage: Path) -> ApplicationRegistry:
    return ApplicationRegistry(Storage.from_url(storage.as_uri()), heartbeat_timeout=120)


def test_script_never_imports_spark_steward() -> None:
    assert "spark_steward" not in PLAIN.read_text()


@pytest.mark.parametrize("stop", [True, False], ids=["spark.stop", "interpreter-exit"])
def test_conf_flags_alone_attach_and_detach_cleanly(tmp_path: Path, stop: bool) -> None:
    """Also (the spark.stop run): an unknown key warns with the closest known one and changes
    nothing else."""
    storage = tmp_path / "storage"
    out = tmp_path / "out.json"
    args = [str(out)] + ([] if stop else ["--no-stop"])
    typo = ["spark.steward.heartbeat.intervall=5s"] if stop else []
    result = run_spark_submit(PLAIN, steward_conf(storage, *typo), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    job = json.loads(out.read_text())
    assert job["total"] == sum(x * x for x in range(100))
    assert job["udf"] == list(range(1, 11))
    registry = _registry(storage)
    record = registry.read(job["app_id"])
    assert record is not None, f"no application record for {job['app_id']}"
    assert record.app_name == "plain-job" and record.pid == job["pid"]
    assert registry.liveness(record) is Liveness.FINISHED
    warning = ("unknown spark-steward key spark.steward.heartbeat.intervall; did you mean "
               "spark.steward.heartbeat.interval?")
    assert (warning in result.stdout + result.stderr) == stop


def test_disabled_costs_nothing_and_writes_nothing(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    flags = ["spark.steward.enabled=false" if f == "spark.steward.enabled=true" else f
             for f in steward_conf(storage)]
    assert "spark.steward.enabled=false" in flags
    result = run_spark_submit(PLAIN, flags, str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert not storage.exists()


def test_bad_value_fails_at_attach_with_one_line(tmp_path: Path) -> None:
    result = run_spark_submit(
        PLAIN, steward_conf(tmp_path / "storage", "spark.steward.heartbeat.interval=often"),
        str(tmp_path / "out.json"))
    assert result.returncode != 0
    # spark-submit's PythonRunner sends the Python driver's stderr to its own stdout.
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if "ConfigError" in line]
    assert lines, output[-3000:]
    assert lines[-1] == ("spark_steward.errors.ConfigError: spark.steward.heartbeat.interval="
                         "'often' is not valid: expected a duration such as 500ms, 10s, 5min "
                         "or 1h")
    assert not (tmp_path / "out.json").exists()

