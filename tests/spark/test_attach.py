"""Explicit attach: with the plugin, events from before attach are delivered; without it, the
shim is loaded from the installed jar and events flow from attach on.

The without-plugin application goes on to the failed attach (after its attach, a detach and an
attach whose capability fails): one process for both tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_steward.errors import SetupError
from spark_steward.kernel.jvm import SparkJvm
from spark_steward.kernel.runtime import DriverRuntime

from tests.spark.conftest import SCRIPTS


def _run(tmp_path: Path, mode: str) -> dict[str, Any]:
    out = tmp_path / "out.json"
    env = dict(os.environ, SPARK_STEWARD_AUTOLOAD="0", PYSPARK_PYTHON=sys.executable)
    env["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.steward.storage.dir={(tmp_path / 'storage').as_uri()} pyspark-shell")
    result = subprocess.run([sys.executable, str(SCRIPTS / "late_attach.py"), str(out), mode],
                            capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    report["log"] = result.stdout + result.stderr
    return report


def test_events_before_attach_are_delivered_on_attach(tmp_path: Path) -> None:
    result = _run(tmp_path, "with-plugin")
    assert result["from_plugin"] is True
    assert result["groups"] == ["before-attach", "after-attach"]
    assert result["task_ends"] == 4 + 3


@pytest.fixture(scope="module")
def without_plugin(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory.mktemp("without-plugin"), "without-plugin")


def test_attach_without_plugin_loads_the_shim_from_the_jar(without_plugin: dict[str, Any]
                                                           ) -> None:
    result = without_plugin
    assert result["from_plugin"] is False
    assert result["enabled"] is True
    assert result["groups"] == ["after-attach"]
    assert result["task_ends"] == 3


def test_a_failed_attach_leaves_spark_as_it_was(without_plugin: dict[str, Any]) -> None:
    # Every patch is installed by an earlier attach; the failing one had started the blob
    # service (and its addFile hook) before a later capability failed: addFile and
    # SparkFiles.get must be Spark's own again, not a stopped blob service's.
    result = without_plugin["failed_attach"]
    assert result["error"] == "boom: this capability cannot start"
    assert result["enabled"] is False
    assert result["content"] == "hello from addFile"
    assert "spark-steward" not in result["driver_path"]


def test_a_full_buffer_drops_and_counts_never_silently(tmp_path: Path) -> None:
    # Capacity 10 and nobody draining before attach: the first 10 events are kept, the rest of
    # the early job is dropped and counted, and events flow normally again after attach.
    result = _run(tmp_path, "tiny-buffer")
    assert result["dropped"] > 0
    assert "event buffer was full" in result["log"] and "buffer-capacity" in result["log"]
    seqs = result["seqs"]
    assert seqs == list(range(1, len(seqs) + 1)), "accepted events are numbered without gaps"
    assert result["gaps"] == 0
    assert "after-attach" in result["groups"]


def test_spark_without_plugin_api_is_refused_clearly(spark: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SparkJvm, "has_plugin_api", lambda self: False)
    with pytest.raises(SetupError, match="no plugin API.*needs Spark 3.5, 4.0–4.3"):
        DriverRuntime(spark.sparkContext, explicit=True)
