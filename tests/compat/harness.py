"""Each pyspark line of the compatibility tier installed once per machine outside the checkout,
and one spark-submit of the smoke job on a line.

A line's release goes to ``<cache>/pyspark-<version>`` (``~/.cache/spark-steward/compat`` unless
``SPARK_STEWARD_COMPAT_CACHE`` says otherwise) with ``pip install --no-deps --target``: pyspark
carries its own py4j (``pyspark/python/lib``), which spark-submit puts first on the path of the
driver and of every Python worker. A marker file written last says the install is complete; a
folder without it is a half-finished install and is done again. Two runs on one machine take
turns through a file lock per release. The installed pyspark serves its own line.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyspark

from tests.compat.lines import LINES, OLDER
from tests.conftest import _remove_new_executor_dirs
from tests.spark.conftest import CLUSTER, run_spark_submit, steward_conf

CACHE_ENV = "SPARK_STEWARD_COMPAT_CACHE"
MARKER = ".spark-steward-complete"
#: Few partitions: the smoke job's data is small, and 200 shuffle partitions cost seconds a job.
SMALL_JOBS = ("spark.sql.shuffle.partitions=4", "spark.default.parallelism=4")

REPO = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "spark-steward" / "compat")


@dataclass(frozen=True)
class PySparkLine:
    """One installed pyspark release: ``root`` is the folder holding its ``pyspark`` package."""

    line: str
    version: str
    root: Path
    installed: bool = False  # the pyspark of this interpreter's site-packages

    @property
    def home(self) -> Path:
        return self.root / "pyspark"

    @property
    def spark_submit(self) -> Path:
        return self.home / "bin" / "spark-submit"

    def env(self) -> dict[str, str]:
        """What a spark-submit on this line adds to the environment: its Spark, its pyspark
        first on the path, this checkout's spark-steward, loopback only."""
        path = [str(REPO / "python")] if self.installed else [str(self.root), str(REPO / "python")]
        return {"SPARK_HOME": str(self.home), "PYTHONPATH": os.pathsep.join(path),
                "SPARK_LOCAL_IP": "127.0.0.1"}


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install(line: str, cache: Path | None = None) -> PySparkLine:
    """The pyspark release of ``line``, installed into the cache unless it is there complete."""
    version = {**LINES, **OLDER}[line]
    if pyspark.__version__ == version:
        return PySparkLine(line, version, Path(pyspark.__file__).parent.parent, installed=True)
    cache = cache or cache_dir()
    target = cache / f"pyspark-{version}"
    with _file_lock(cache / f"pyspark-{version}.lock"):
        marker = target / MARKER
        if marker.is_file() and marker.read_text().strip() == version:
            return PySparkLine(line, version, target)
        shutil.rmtree(target, ignore_errors=True)  # a half-finished install
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-compile", "--target", str(target), f"pyspark=={version}"],
            capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pip could not install pyspark=={version} into {target}:\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        found = PySparkLine(line, version, target)
        if not found.spark_submit.is_file():
            raise RuntimeError(f"pyspark=={version} in {target} has no {found.spark_submit}")
        marker.write_text(version + "\n")
        return found


def submit(spark_line: PySparkLine, storage: Path, script: Path, *args: str,
           timeout: float = 300, master: str = CLUSTER) -> subprocess.CompletedProcess[str]:
    """``script`` through the line's spark-submit on ``master`` (local-cluster[2,1,1024] unless
    told), with the flags of
    ``spark-steward conf``, as a user passes them (the driver adds the plugin and the shim jar
    itself, so the tier checks that on each line too). Executor dirs it left in the line's
    Spark home are removed afterwards."""
    work_dir = spark_line.home / "work"
    before = frozenset(os.listdir(work_dir)) if work_dir.is_dir() else frozenset()
    flags = steward_conf(storage, *SMALL_JOBS)
    try:
        return run_spark_submit(script, flags, *args, timeout=timeout, env=spark_line.env(),
                                spark_submit=str(spark_line.spark_submit), master=master)
    finally:
        _remove_new_executor_dirs(str(work_dir), before)


def status(storage: Path) -> dict[str, Any]:
    """``spark-steward status --json`` of ``storage``, by application id."""
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                          storage.as_uri(), "--json"], capture_output=True, text=True, check=True)
    return {app["app_id"]: app for app in json.loads(out.stdout)["applications"]}
