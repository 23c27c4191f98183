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
# Every test JVM starts with the options of tests/support/class_cache.py: quick start and, once
# dumped, a class-data-sharing archive; a developer's SPARK_CONF_DIR is replaced by an empty one.
from tests.support.class_cache import QUICK_JVM, ensure_archive, install  # noqa: E402,F401

install(os.environ)
os.environ.pop("SPARK_REMOTE", None)
os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
TEST_ROOT = _WORK


# -- pytest -n N: files whole, the cluster folder as one, longest first ---------------------------

import pytest  # noqa: E402


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.support.schedule import make_scheduler

    return make_scheduler(config, log)


#: What a module calls to start an application of its own (tests/spark/conftest.py).
_STARTS_APPLICATIONS = ("run_spark_submit", "BackgroundJob", "spark_submit_path",
                        "ConnectServer")
_CLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers by what a test needs: ``cluster`` for the multi-host folder, ``spark`` for a test
    that uses the shared session or whose module starts applications (``-m "not spark"`` runs
    the tier that starts no JVM of Spark's)."""
    for item in items:
        if str(item.path).startswith(_CLUSTER + os.sep):
            item.add_marker(pytest.mark.cluster)
        names = getattr(getattr(item, "module", None), "__dict__", {})
        if "spark" in getattr(item, "fixturenames", ()) or any(n in names
                                                               for n in _STARTS_APPLICATIONS):
            item.add_marker(pytest.mark.spark)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Dumps the test JVMs' class archive before the first application of a run that has any
    (once per machine; see tests/support/class_cache.py)."""
    if any(item.get_closest_marker("spark") for item in session.items):
        ensure_archive()
        install(os.environ)


# -- a real S3 API: moto's standalone server on loopback ------------------------------------------

import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from typing import Iterator  # noqa: E402


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
