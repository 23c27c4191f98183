"""Explicit attach: with the plugin, events from before attach are delivered; without it, the
shim is loaded from the installed jar and events flow from attach on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import SCRIPTS

pytestmark = pytest.mark.spark


def _run(tmp_path: Path, mode: str) -> dict[str, object]:
    out = tmp_path / "out.json"
    env = dict(os.environ, SPARK_STEWARD_AUTOLOAD="0", PYSPARK_PYTHON=sys.executable)
    env["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.steward.storage.dir={(tmp_path / 'storage').as_uri()} pyspark-shell")
    result = subprocess.run([sys.executable, str(SCRIPTS / "late_attach.py"), str(out), mode],
                            capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_events_before_attach_are_delivered_on_attach(tmp_path: Path) -> None:
    result = _run(tmp_path, "with-plugin")
    assert result["from_plugin"] is True
    assert result["groups"] == ["before-attach", "after-attach"]
    assert result["task_ends"] == 4 + 3


def test_attach_without_plugin_loads_the_shim_from_the_jar(tmp_path: Path) -> None:
    result = _run(tmp_path, "without-plugin")
    assert result["from_plugin"] is False
    assert result["enabled"] is True
    assert result["groups"] == ["after-attach"]
    assert result["task_ends"] == 3
