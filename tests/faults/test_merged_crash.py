"""A driver SIGKILLed (with its Python workers) in the middle of a file-merged save: the next
application that attaches removes every physical file no entry owns and restores the last
completed checkpoint; ``spark-steward gc`` afterwards finds nothing more. (``gc`` straight after
a crash runs the same failover: tests/unit/test_merged_references.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.checkpoint.lifecycle import CheckpointState
from spark_steward.storage import Storage
from tests.spark.conftest import spark_submit_path, steward_conf

SCRIPT = Path(__file__).parent / "scripts" / "merged_crash.py"


def _submit(storage: Path, out: Path, mode: str) -> subprocess.CompletedProcess[str]:
    cmd = [spark_submit_path(), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false", *steward_conf(storage),
           "--conf", "spark.steward.checkpoints.orphan-grace=0s", str(SCRIPT), str(out), mode]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env,
                          start_new_session=True)


def _unowned(storage: Storage) -> list[str]:
    entries, corrupt = CheckpointMetadata(storage).load()
    assert not corrupt
    problems = [f"{e.id} is {e.state.value}" for e in entries
                if e.state is not CheckpointState.COMPLETED]
    owned = {f for e in entries for f in e.physical}
    problems += [f"unowned {f.path}" for f in storage.walk_files(layout.MERGED)
                 if f.path not in owned]
    return problems


def _log(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_driver_killed_during_a_merged_save_leaves_nothing_unowned(tmp_path: Path) -> None:
    root = tmp_path / "storage"
    crash = _submit(root, tmp_path / "crash.jsonl", "crash")
    events = [e["event"] for e in _log(tmp_path / "crash.jsonl")]
    assert events == ["saved", "killing"], crash.stderr[-3000:]
    storage = Storage.from_url(root.as_uri())
    assert any(f.path.startswith(layout.merged_path("m", 2))
               for f in storage.walk_files(layout.MERGED)), "killed before it wrote anything"
    assert _unowned(storage), "the crash left nothing to clean: the test proves nothing"

    attach = _submit(root, tmp_path / "attach.jsonl", "attach")
    log = _log(tmp_path / "attach.jsonl")
    assert attach.returncode == 0, attach.stderr[-3000:]
    assert log == [{"event": "recovered", "idle": True, "outstanding": []},
                   {"event": "restored", "count": 400}]
    assert _unowned(storage) == []
    (entry,) = CheckpointMetadata(storage).load()[0]
    assert entry.id == "m/1" and entry.physical

    gc = subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                         root.as_uri(), "--orphan-grace", "0s", "--json"],
                        capture_output=True, text=True, timeout=120)
    report = json.loads(gc.stdout)
    assert gc.returncode == 0 and report["ok"], gc.stdout + gc.stderr
    assert _unowned(storage) == [] and CheckpointMetadata(storage).load()[0] == [entry]
