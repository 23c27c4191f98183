"""Real local-cluster[2,1,1024] sessions.

The in-process session is pytest-spark's ``spark_session`` (one for the whole run; options in
pyproject.toml). A recorder service is registered before it starts, so tests see every event
from context start on. Tests that need another conf start their own process with
:func:`run_spark_submit`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pyspark import cloudpickle
from pytest_spark.config import SparkConfigBuilder

import tests

from spark_steward.kernel.events import SparkEvent
from spark_steward.kernel.runtime import RuntimeService
from spark_steward.kernel.services import register_service
from spark_steward.kernel.shim import jar_path
from tests.conftest import TEST_ROOT
from tests.support.faulty_files import faulty_jar

SCRIPTS = Path(__file__).parent / "scripts"
STORAGE_DIR = Path(TEST_ROOT) / "storage"
LOCAL_DIR = Path(TEST_ROOT) / "local"
JAR = str(jar_path())


class EventRecorder(RuntimeService):
    """Keeps every event the runtime dispatches, for assertions."""

    name = "test-event-recorder"
    instances: list["EventRecorder"] = []

    def __init__(self) -> None:
        self.events: list[SparkEvent] = []
        self._lock = threading.Lock()
        EventRecorder.instances.append(self)

    def start(self, runtime: Any) -> None:
        runtime.dispatcher.subscribe(self._on_event, self.name)

    def _on_event(self, event: SparkEvent) -> None:
        with self._lock:
            self.events.append(event)

    def snapshot(self) -> list[SparkEvent]:
        with self._lock:
            return list(self.events)

    def wait_until(self, predicate: Callable[[list[SparkEvent]], bool], timeout: float = 30
                   ) -> list[SparkEvent]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.snapshot()
            if predicate(events):
                return events
            time.sleep(0.05)
        raise AssertionError(f"condition not met within {timeout}s; {len(self.snapshot())} events")


register_service(EventRecorder.name, EventRecorder)
# Executors cannot import the tests package: ship test functions by value.
cloudpickle.register_pickle_by_value(tests)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # After pytest-spark read spark_options from pyproject.toml: add the computed values.
    conf = SparkConfigBuilder.get()
    conf.set("spark.jars", f"{JAR},{faulty_jar()}")  # the second only acts where configured
    conf.set("spark.steward.storage.dir", STORAGE_DIR.as_uri())
    conf.set("spark.steward.local.dir", str(LOCAL_DIR))


@pytest.fixture(scope="session")
def spark(spark_session: Any) -> Any:
    return spark_session


@pytest.fixture(scope="session")
def runtime(spark: Any) -> Any:
    import spark_steward

    return spark_steward.runtime(spark)


@pytest.fixture(scope="session")
def recorder(runtime: Any) -> EventRecorder:
    return runtime.service(EventRecorder)


@pytest.fixture(autouse=True)
def _reset_job_state(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "spark" in request.fixturenames:
        sc = request.getfixturevalue("spark").sparkContext
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


def steward_conf(storage: Path, *extra: str) -> list[str]:
    """``--conf`` flags from ``spark-steward conf``, as a user would paste them."""
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--storage",
                          storage.as_uri(), "--local-dir", str(LOCAL_DIR)],
                         check=True, capture_output=True, text=True).stdout.split()
    for item in extra:
        out += ["--conf", item]
    return out


def spark_submit_path() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


#: Two executor JVMs on this host: what an application a test starts runs on by default.
CLUSTER = "local-cluster[2,1,1024]"
#: One executor JVM: for a test that needs an executor, not two (each costs ~3.3 CPU-s to start).
ONE_EXECUTOR = "local-cluster[1,1,1024]"
#: No executor JVM at all: for a test whose behaviour is the driver's alone (a start refused).
NO_EXECUTOR = "local[2]"


def run_spark_submit(script: Path, flags: list[str], *args: str, timeout: float = 240,
                     env: dict[str, str] | None = None, prefix: list[str] | tuple[str, ...] = (),
                     spark_submit: str | None = None, master: str = CLUSTER
                     ) -> subprocess.CompletedProcess[str]:
    """spark-submit of ``script`` on ``master`` (local-cluster with two executors unless told);
    ``prefix`` runs it under a wrapper command (``unshare ...``, say); ``spark_submit`` is
    another Spark's (tests/compat)."""
    cmd = [*prefix, spark_submit or spark_submit_path(), "--master", master,
           "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
           "--conf", "spark.executor.cores=1", *flags, str(script), *args]
    full_env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


class BackgroundJob:
    """A spark-submit run in a thread, for scripts that write a JSON file and keep running
    (until killed): :meth:`wait_for_output` returns what they wrote."""

    def __init__(self, script: Path, flags: list[str], out: Path, *args: str,
                 timeout: float = 400, master: str = CLUSTER) -> None:
        self.out = out
        self.result: list[subprocess.CompletedProcess[str]] = []
        self.thread = threading.Thread(target=lambda: self.result.append(
            run_spark_submit(script, flags, str(out), *args, timeout=timeout, master=master)))
        self.thread.start()

    def wait_for_output(self, timeout: float = 180) -> dict[str, Any]:
        import json

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            try:
                return json.loads(self.out.read_text())  # type: ignore[no-any-return]
            except (FileNotFoundError, ValueError):  # not there yet, or half written
                time.sleep(0.2)
        raise AssertionError(f"{self.out.name} never appeared: {self.result!r:.3000}")


def executor_pids(sc: Any) -> list[int]:
    """The executor JVMs of ``sc``'s application on this host."""
    app = sc.applicationId
    out = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app}"],
                         capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


def wait_for_executors(sc: Any, exclude: int, timeout: float = 90.0) -> None:
    """Waits until two executors other than the killed ``exclude`` are up and registered."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = executor_pids(sc)
        if len(pids) == 2 and exclude not in pids \
                and sc._jsc.sc().getExecutorMemoryStatus().size() == 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"no replacement executor within {timeout}s: {executor_pids(sc)}")
