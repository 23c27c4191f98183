"""The multi-host harness (``harness.py``) for tests: one session cluster of three worker hosts
with S3, shared by every test of this folder that asks for ``cluster``.

Every test here is marked ``cluster`` (tests/conftest.py). Where the harness cannot run (not root, no ``ip netns``,
no Java...) the fixture skips with the one-line reason from :func:`harness.unavailable`.
"""

from __future__ import annotations

import atexit
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.cluster.harness import Cluster, HarnessError, unavailable
from tests.support.class_cache import conf_dir, ensure_archive, java_options

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A started cluster: driver, master, w1..w3 (1 core, 1 GiB each) and s3 (moto)."""
    reason = unavailable()
    if reason:
        pytest.skip(f"cluster harness unavailable: {reason}")
    # Drivers and executors map the test JVMs' class archive: an empty SPARK_CONF_DIR on
    # every host puts on their class path what the archive was dumped with.
    archive = ensure_archive()
    c = Cluster(workers=3, s3=True, spark_conf_dir=conf_dir() if archive else None)
    atexit.register(c.close)  # the harness registers one too; both are idempotent
    try:
        c.start()
    except HarnessError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield c
    finally:
        c.close()


# -- spark-steward applications on the cluster (tests/cluster/test_capabilities.py,
# test_crashes.py) ------------------------------------------------------------------------------

from typing import Any  # noqa: E402 - appended helpers

SCRIPTS = HERE / "scripts"


def steward_setup(cluster: Cluster, name: str, conf: dict[str, str] | None = None, *,
                  shared_storage: bool = True) -> tuple[list[str], Path, str]:
    """``(flags, storage, local_dir)`` for a spark-steward application of test ``name``: the
    ``spark-steward conf`` flags of the ``file://`` storage dir ``<shared>/<name>/storage`` (as
    NFS would be; applications of one ``name`` share it; ``shared_storage=False`` leaves the
    key out, so the embedded default applies) and the working dir ``/tmp/steward-<name>`` on
    every host (its private /tmp), heartbeats every second, quick-starting JVMs, plus ``conf``.
    """
    import subprocess
    import sys

    storage = cluster.shared / name / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    local_dir = f"/tmp/steward-{name}"
    where = ["--storage", storage.as_uri()] if shared_storage else []
    flags = subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", *where,
                            "--local-dir", local_dir], check=True,
                           capture_output=True, text=True).stdout.split()
    # The hosts get none of the run's SPARK_* variables (harness._env), so not the test JVMs'
    # options (tests/support/class_cache.py): they go on the command line.
    for key, value in {"spark.steward.heartbeat.interval": "1s",
                       "spark.driver.extraJavaOptions": java_options(),
                       "spark.executor.extraJavaOptions": java_options(),
                       **(conf or {})}.items():
        flags += ["--conf", f"{key}={value}"]
    return flags, storage, local_dir


class StewardApp:
    """A spark-submit of ``scripts/<script> OUT_DIR *args`` running in the background on the
    driver host. The job and the test meet in OUT_DIR (scripts/xhost.py): the job writes
    ``<phase>.json``, and waits in a pause until the test writes ``<phase>.go``. Its output goes
    to ``OUT_DIR/spark-submit.log``. Leaving the ``with`` block SIGKILLs whatever still runs."""

    def __init__(self, cluster: Cluster, script: str, out: Path, flags: list[str],
                 *args: str) -> None:
        import subprocess

        self.script = script
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self._log = open(out / "spark-submit.log", "w")
        self.proc = cluster.submit_background(SCRIPTS / script, str(out), *args, conf=flags,
                                              stdout=self._log, stderr=subprocess.STDOUT)

    def __enter__(self) -> "StewardApp":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self._log.close()

    def tail(self, chars: int = 6000) -> str:
        text = (self.out / "spark-submit.log").read_text(errors="replace")
        return text[-chars:]

    def wait_phase(self, name: str, timeout: float = 300) -> dict[str, Any]:
        import json

        path = self.out / f"{name}.json"
        deadline = time.monotonic() + timeout
        while True:
            if path.exists():
                return json.loads(path.read_text())  # type: ignore[no-any-return]
            code = self.proc.poll()
            if code is not None and not path.exists():
                raise AssertionError(f"{self.script} exited with {code} before phase {name!r}:"
                                     f"\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.script}: no phase {name!r} within {timeout:.0f}s:"
                                     f"\n{self.tail()}")
            time.sleep(0.1)

    def go(self, name: str, **answer: Any) -> None:
        import json
        import os

        path = self.out / f"{name}.go"
        path.with_suffix(".tmp").write_text(json.dumps(answer))
        os.replace(path.with_suffix(".tmp"), path)

    def finish(self, timeout: float = 240) -> dict[str, Any]:
        """Waits for a clean exit; the job's ``result`` phase."""
        code = self.proc.wait(timeout)
        assert code == 0, f"{self.script} exited with {code}:\n{self.tail()}"
        return self.wait_phase("result", timeout=1)

    def kill(self) -> None:
        """SIGKILL of the whole spark-submit (JVM and Python driver: one process group)."""
        import contextlib
        import os
        import signal

        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def host_files(cluster: Cluster, host: str, folder: str) -> dict[str, Path]:
    """Files below ``folder`` in ``host``'s private /tmp (dot files left out), by relative path,
    as root-namespace paths."""
    root = cluster.host_path(host, folder)
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)}


def pids_on(cluster: Cluster, host: str, pattern: str) -> list[int]:
    """Pids (in ``host``'s PID namespace) of the processes whose command line matches."""
    done = cluster.run(host, ["pgrep", "-f", pattern])
    return sorted(int(p) for p in done.stdout.split())


def sigkill_on(cluster: Cluster, host: str, *pids: int) -> None:
    """SIGKILL of ``pids`` of ``host``'s PID namespace, all in one ``kill``."""
    cluster.run(host, ["kill", "-KILL", *map(str, pids)], check=True)


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    """Polls ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout}s")
        time.sleep(0.1)

