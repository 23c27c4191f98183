"""spark-steward next to the platform's own plugin and jars (issue 22, point 2).

A platform sets ``spark.plugins`` and ``spark.jars`` in its spark-defaults.conf, a job passes a
``--properties-file`` or ``--jars``: the flags of ``spark-steward conf`` must add to those,
never replace them. A stand-in platform plugin (tests/spark/platform_plugin, compiled here with
javac) marks each JVM it loads in; spark-steward's own plugin shows on the driver (the runtime
attached with its plugin, not late) and on the executors (each reports its host's folder at
the application's end, with the driver's own removal off so only they can).

The command-line run has two executors and carries test_app_end_cleanup's case of an application
that ends in order (test_executors_remove_their_hosts_folder_at_stop here: the same job, mode
and flags, the platform's plugin beside); the other three show the plugins on one executor
(local-cluster[1,1,1024]): where the platform's settings come from is the driver's business.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_steward.kernel import shim_build
from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf
from tests.spark.test_app_end_cleanup import KEYS, end_summary, reported

PLATFORM_SRC = Path(__file__).parent / "platform_plugin" / "src"
PLATFORM_CLASS = "platform.stand.in.PlatformPlugin"
JOB = SCRIPTS / "app_end_job.py"


@pytest.fixture(scope="module")
def platform_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shim_build.compile_shim(PLATFORM_SRC, tmp_path_factory.mktemp("platform") / "p.jar")


def steward_flags(tmp_path: Path) -> list[str]:
    """What `spark-steward conf` prints, as a user pastes it, with this test's local dir."""
    return steward_conf(tmp_path / "storage", f"spark.steward.local.dir={tmp_path / 'local'}")


def properties(path: Path, pairs: dict[str, str]) -> Path:
    path.write_text("".join(f"{k} {v}\n" for k, v in pairs.items()))
    return path


def run_and_check(tmp_path: Path, flags: list[str], env: dict[str, str] | None = None,
                  executors: int = 1) -> tuple[dict[str, Any], str]:
    out = tmp_path / "out.json"
    result = run_spark_submit(JOB, flags, str(out), "end", "--driver-removal-off", env=env,
                              master=f"local-cluster[{executors},1,1024]")
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    job = json.loads(out.read_text())
    ids = [str(i) for i in range(executors)]
    # The platform's plugin loaded on the driver and on every executor.
    marks = sorted(os.listdir(tmp_path / "marks"))
    assert marks == ["driver", *(f"executor-{i}" for i in ids)], marks
    # spark-steward's: attached with its plugin's events (no "attached without its Spark plugin")
    # and every executor's plugin reported its host's folder at the end.
    assert "without its Spark plugin" not in log
    assert job["after_stop"] is None, "the folder outlived spark.stop()"
    summary = [line for line in log.splitlines()
               if f"application {job['app_id']} ended; host-local folders" in line]
    assert len(summary) == 1, log[-4000:]
    assert set(re.findall(r"executor (\d+) on", summary[0])) == set(ids), summary
    return job, log


def platform_pairs(tmp_path: Path, jar: Path) -> dict[str, str]:
    (tmp_path / "marks").mkdir()
    return {"spark.plugins": PLATFORM_CLASS, "spark.jars": str(jar),
            "spark.platform.marker.dir": str(tmp_path / "marks")}


def test_both_plugins_load_with_the_platform_in_spark_defaults(tmp_path: Path,
                                                               platform_jar: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    properties(conf_dir / "spark-defaults.conf", platform_pairs(tmp_path, platform_jar))
    run_and_check(tmp_path, steward_flags(tmp_path), env={"SPARK_CONF_DIR": str(conf_dir)})


def test_both_plugins_load_with_the_platform_in_a_properties_file(tmp_path: Path,
                                                                  platform_jar: Path) -> None:
    props = properties(tmp_path / "job.properties", platform_pairs(tmp_path, platform_jar))
    run_and_check(tmp_path, ["--properties-file", str(props), *steward_flags(tmp_path)])


@pytest.fixture(scope="module")
def command_line(tmp_path_factory: pytest.TempPathFactory, platform_jar: Path
                 ) -> tuple[dict[str, Any], str]:
    """The platform's jar and plugin on the command line, two executors: the job's report and
    the driver's log."""
    tmp_path = tmp_path_factory.mktemp("command-line")
    pairs = platform_pairs(tmp_path, platform_jar)
    flags = ["--jars", pairs["spark.jars"], "--conf", f"spark.plugins={pairs['spark.plugins']}",
             "--conf", f"spark.platform.marker.dir={pairs['spark.platform.marker.dir']}"]
    return run_and_check(tmp_path, [*flags, *steward_flags(tmp_path)], executors=2)


def test_both_plugins_load_with_jars_and_plugins_on_the_command_line(
        command_line: tuple[dict[str, Any], str]) -> None:
    job, _ = command_line  # run_and_check asserted the plugins on the driver and both executors
    assert job["mode"] == "end"


def test_executors_remove_their_hosts_folder_at_stop(command_line: tuple[dict[str, Any], str]
                                                     ) -> None:
    """(From test_app_end_cleanup.) At ``spark.stop()`` the executors remove the application's
    host-local folder, the driver's own removal being off."""
    job, log = command_line
    assert job["put_on"] == ["0", "1"]
    assert f"state/app-end/{KEYS[0]}" in " ".join(job["before"])
    assert job["after_stop"] is None, "the folder outlived spark.stop()"
    # Both executors asked and reported; one removed it, the other found it gone (or both
    # removed parts of it at once).
    outcomes = reported(end_summary(log, job["app_id"]))
    assert set(outcomes) == {"0", "1"}, outcomes
    assert set(outcomes.values()) <= {"removed", "absent"} and "removed" in outcomes.values()
    assert job["stop_seconds"] < 10, "spark.stop() waited for an executor to its bound"


def test_properties_lines_merge_the_same_way(tmp_path: Path, platform_jar: Path) -> None:
    """`spark-steward conf --format properties` appended to the platform's spark-defaults.conf
    (what an admin does) keeps the platform's plugin."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    defaults = properties(conf_dir / "spark-defaults.conf", platform_pairs(tmp_path, platform_jar))
    lines = subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--format",
                            "properties", "--storage", (tmp_path / "storage").as_uri(),
                            "--local-dir", str(tmp_path / "local")],
                           check=True, capture_output=True, text=True).stdout
    defaults.write_text(defaults.read_text() + lines)
    run_and_check(tmp_path, [], env={"SPARK_CONF_DIR": str(conf_dir)})
