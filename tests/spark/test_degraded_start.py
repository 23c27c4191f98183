"""A storage dir that fails at start never breaks a job (issue 22, point 3).

With ``spark.steward.enabled=true`` and a storage that cannot be written (an S3 endpoint
nobody listens on, a path under a regular file), the application runs as plain Spark: addFile,
df.cache() and df.checkpoint() are Spark's own, one warning names the reason, and each explicit
spark-steward call raises a StorageError that says so. A malformed spark.steward value still
stops the start with one line, as Spark does for its own keys.

Storage fails on the driver and the executors only learn that spark-steward is off: the
applications have one executor (local-cluster[1,1,1024]). A malformed value is refused before
any job: those have none (local[2]).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import _free_port
from tests.spark.conftest import NO_EXECUTOR, ONE_EXECUTOR, SCRIPTS, run_spark_submit

JOB = SCRIPTS / "degraded_job.py"
WARNING = "spark-steward is off for this application"


def s3_nobody_serves(tmp_path: Path) -> list[str]:
    return ["spark.steward.storage.dir=s3://steward-bucket/app",
            # A port just freed: nobody listens there.
            f"spark.steward.storage.option.endpoint_url=http://127.0.0.1:{_free_port()}",
            "spark.steward.storage.option.key=k", "spark.steward.storage.option.secret=s"]


def path_under_a_file(tmp_path: Path) -> list[str]:
    (tmp_path / "a-file").write_text("not a directory")
    return [f"spark.steward.storage.dir={tmp_path / 'a-file' / 'storage'}"]


@pytest.mark.parametrize("storage", [s3_nobody_serves, path_under_a_file])
def test_storage_failing_at_start_leaves_a_plain_spark_job(tmp_path: Path, storage: object
                                                           ) -> None:
    work = tmp_path / "work"
    work.mkdir()
    flags = ["spark.steward.enabled=true", f"spark.steward.local.dir={tmp_path / 'local'}",
             *storage(tmp_path)]  # type: ignore[operator]
    out = tmp_path / "out.json"
    result = run_spark_submit(JOB, [a for f in flags for a in ("--conf", f)], str(out),
                              str(work), master=ONE_EXECUTOR)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    job = json.loads(out.read_text())
    assert job["read"] == ["hello\n", "hello\n"]
    assert job["cached_sum"] == sum(range(1000)) and job["storage_used"]
    assert job["checkpointed"] == 100 and job["spark_checkpoint_files"], job
    [warning] = [line for line in log.splitlines() if WARNING in line] or [log[-4000:]]
    # In the driver's log4j, in Spark's layout: where the platform collects Spark's own logs.
    assert re.match(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN ", warning), warning
    for name, error in job["errors"].items():
        assert error is not None, name
        kind, message = error
        assert kind in ("StorageError", "OutcomeUnknown"), (name, error)
        assert message.startswith(WARNING) and "failed at start" in message, (name, message)
    assert "Traceback" not in log, log[-4000:]


@pytest.mark.parametrize("side", ["python", "jvm"])
def test_a_malformed_value_stops_the_start_with_one_line(tmp_path: Path, side: str) -> None:
    """Refused alike by the driver's Python (the autoload) and, where that is off, by the JVM
    plugin: the same words, so no value is "on" for one side and refused by the other."""
    flags = ["--conf", "spark.steward.enabled=yes",
             "--conf", f"spark.steward.storage.dir={tmp_path / 'storage'}"]
    env = {}
    if side == "jvm":
        import spark_steward

        flags += ["--conf", "spark.plugins=io.sparksteward.shim.StewardPlugin",
                  "--conf", f"spark.jars={spark_steward.jar_path()}"]
        env["SPARK_STEWARD_AUTOLOAD"] = "0"
    result = run_spark_submit(JOB, flags, str(tmp_path / "out.json"), str(tmp_path), env=env,
                              master=NO_EXECUTOR)
    assert result.returncode != 0
    wanted = "spark.steward.enabled='yes' is not valid: expected true or false"
    log = result.stdout + result.stderr
    assert wanted in log, log[-3000:]
    assert ("IllegalArgumentException" in log) == (side == "jvm"), log[-3000:]
    assert not (tmp_path / "out.json").exists()
