"""Executors whose Python lacks spark-steward never break plain jobs (issue 22, point 3; issue
33, item 3: with I/O encryption too).

The executors run this Python with site-packages replaced by a copy (symlinks) that lacks only
spark-steward: pandas and pyarrow are there, so pandas UDFs run too. The driver has
spark-steward on. With ``spark.io.encryption.enabled`` off and on (on, every broadcast a task
references is unpickled eagerly when the worker starts, so the executor context broadcast must
load without the package): RDD functions, Python UDFs, pandas UDFs, user broadcasts and Spark's
own test_broadcast case still work, the driver warns once naming the fix, a task that calls
spark-steward fails with one line saying the executor lacks it, and a driver call that needs it
on executors raises SetupError.

The encrypted run has one executor (local-cluster[1,1,1024]); the plain one two, so the
driver's one warning stands for both executors' reports.
"""

from __future__ import annotations

import json
import site
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import CLUSTER, ONE_EXECUTOR, SCRIPTS, run_spark_submit, steward_conf

JOB = SCRIPTS / "bare_executors_job.py"
NOT_INSTALLED = "spark-steward is not installed in the Python of this executor"


def _is_spark_steward(entry: str) -> bool:
    """spark_steward, its dist-info, _spark_steward_autoload, spark_steward_autoload.pth and
    the editable install's .pth / finder (``__editable__.spark_steward-…``)."""
    return "spark_steward" in entry.lower().replace("-", "_")


@pytest.fixture(scope="module")
def python_without_steward(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A launcher for this Python with every site-packages entry but spark-steward's."""
    root = tmp_path_factory.mktemp("python-without-steward")
    packages = root / "site-packages"
    packages.mkdir()
    for directory in site.getsitepackages():
        for entry in sorted(Path(directory).iterdir()):
            target = packages / entry.name
            if not _is_spark_steward(entry.name) and not target.exists():
                target.symlink_to(entry)
    # -S: no site-packages and no .pth hooks (the editable install's path, our autoload); and
    # no PYTHONPATH entry that holds spark-steward (a checkout run with PYTHONPATH=python/).
    launcher = root / "python"
    launcher.write_text(
        "#!/bin/sh\nkept=\nIFS=:\nfor entry in $PYTHONPATH; do\n"
        '  { [ -e "$entry/spark_steward" ] || [ -e "$entry/_spark_steward_autoload.py" ]; } '
        "&& continue\n"
        '  kept="$kept:$entry"\ndone\n'
        f'PYTHONPATH="{packages}$kept" exec {sys.executable} -S "$@"\n')
    launcher.chmod(0o755)
    return launcher


@pytest.mark.parametrize("encryption", [False, True], ids=["io-plain", "io-encrypted"])
def test_plain_code_runs_where_executors_lack_spark_steward(
        tmp_path: Path, python_without_steward: Path, encryption: bool) -> None:
    bare = python_without_steward
    flags = steward_conf(tmp_path / "storage", f"spark.pyspark.python={bare}",
                         f"spark.pyspark.driver.python={sys.executable}",
                         f"spark.io.encryption.enabled={str(encryption).lower()}")
    out = tmp_path / "out.json"
    result = run_spark_submit(JOB, flags, str(out),
                              master=ONE_EXECUTOR if encryption else CLUSTER)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    job = json.loads(out.read_text())
    # Compared at once: a failure shows every behaviour that broke, not the first.
    expected = {
        "attached": True, "encryption": encryption,
        "executor_python": {"spark_steward": False, "_spark_steward_autoload": False,
                            "pandas": True, "pyarrow": True},
        "squares": sum(x * x for x in range(100)),
        "udf": sum(range(1, 11)),
        "pandas_udf": 2 * sum(range(10)),
        "broadcast": 28,
        "spark_broadcast_test": {"failed_tasks": 0, "driver_value": 5},
    }
    assert {name: job[name] for name in expected} == expected
    warnings = [line for line in log.splitlines()
                if "ran in an executor Python without spark-steward" in line]
    assert len(warnings) == 1 and str(bare) in warnings[0], warnings or log[-4000:]
    error, _, message = job["task_calls_steward"]
    assert error == "error" and NOT_INSTALLED in message, message
    error, kind, message = job["merged_save"]
    assert kind == "SetupError" and "need spark-steward on the executors" in message, message
