"""Shared test set-up: keep the user's own Spark and spark-steward config out of every test."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Before any JVM starts: a developer's SPARK_CONF_DIR must not leak into the tests (see QUICK_JVM).
_WORK = tempfile.mkdtemp(prefix="spark-steward-tests-")
atexit.register(shutil.rmtree, _WORK, True)  # storage and local dirs of this run
os.environ["SPARK_WORKER_DIR"] = os.path.join(_WORK, "worker")


def _spark_work_dir() -> str | None:
    """local-cluster ignores SPARK_WORKER_DIR and puts executor dirs in <SPARK_HOME>/work."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return os.path.join(os.environ.get("SPARK_HOME") or os.path.dirname(spec.origin), "work")


def _running_command_lines() -> str:
    lines = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines.append(f.read().replace(b"\0", b" ").decode("utf-8", "replace"))
        except OSError:
            continue
    return "\n".join(lines)


def _remove_new_executor_dirs(work: str | None, before: frozenset[str]) -> None:
    """Executor dirs of applications started during this run; those whose executors still run
    (another test run on this machine) are left alone."""
    if work is None or not os.path.isdir(work):
        return
    running = _running_command_lines()
    for name in set(os.listdir(work)) - before:
        if name.startswith("app-") and name not in running:
            shutil.rmtree(os.path.join(work, name), ignore_errors=True)


_SPARK_WORK = _spark_work_dir()
atexit.register(_remove_new_executor_dirs, _SPARK_WORK, frozenset(
    os.listdir(_SPARK_WORK) if _SPARK_WORK and os.path.isdir(_SPARK_WORK) else ()))
#: Every test JVM starts with the C1 compiler alone and one GC thread: short-lived drivers and
#: executors take about half the CPU to start on 2 cores (the suite starts ~100 applications).
#: A spark-defaults.conf of the run's own (also replacing a developer's SPARK_CONF_DIR) carries
#: it to every spark-submit, pyspark gateway and executor; a test that sets its own options or
#: SPARK_CONF_DIR replaces it.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_CONF_DIR = os.path.join(_WORK, "spark-conf")
os.makedirs(_CONF_DIR)
with open(os.path.join(_CONF_DIR, "spark-defaults.conf"), "w") as _defaults:
    _defaults.write(f"spark.driver.extraJavaOptions {QUICK_JVM}\n"
                    f"spark.executor.extraJavaOptions {QUICK_JVM}\n")
os.environ["SPARK_CONF_DIR"] = _CONF_DIR
os.environ.pop("SPARK_REMOTE", None)
os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
TEST_ROOT = _WORK


# -- a real S3 API: moto's standalone server on loopback ------------------------------------------

import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from typing import Iterator  # noqa: E402

import pytest  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server started for this test run (stopped at the end)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def s3_bucket(moto_endpoint: str) -> str:
    """A fresh bucket; returns its name."""
    import boto3

    name = f"bucket-{time.monotonic_ns()}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=name)
    return name
