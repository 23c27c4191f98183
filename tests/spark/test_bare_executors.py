"""Executors whose Python lacks spark-steward never break plain jobs (issue 22, point 3).

The executors run ``python -S`` (no site-packages, so no spark-steward and no autoload) while
the driver has spark-steward on: plain RDD functions, Python UDFs and broadcasts still work,
the driver warns once naming the fix, a task that calls spark-steward fails with one line
saying the executor lacks it, and a driver call that needs it on executors raises SetupError.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf

pytestmark = pytest.mark.spark

JOB = SCRIPTS / "bare_executors_job.py"
NOT_INSTALLED = "spark-steward is not installed in the Python of this executor"


def test_plain_code_runs_where_executors_lack_spark_steward(tmp_path: Path) -> None:
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    flags = steward_conf(tmp_path / "storage", f"spark.pyspark.python={bare}",
                         f"spark.pyspark.driver.python={sys.executable}")
    out = tmp_path / "out.json"
    result = run_spark_submit(JOB, flags, str(out))
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    job = json.loads(out.read_text())
    assert job["attached"] is True
    assert job["squares"] == sum(x * x for x in range(100))
    assert job["udf"] == sum(range(1, 11)) and job["broadcast"] == 28
    warnings = [line for line in log.splitlines()
                if "ran in an executor Python without spark-steward" in line]
    assert len(warnings) == 1 and str(bare) in warnings[0], warnings or log[-4000:]
    kind, message = job["task_calls_steward"]
    assert NOT_INSTALLED in message, message
    kind, message = job["merged_save"]
    assert kind == "SetupError" and "need spark-steward on the executors" in message, message
