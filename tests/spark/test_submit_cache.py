"""Cached tables across applications, through spark-submit: transparent ``df.cache()`` in an
unmodified script, a killed driver's caches removed by the next application's attach, and a
``shared=True`` cache reused by a second application until its input changes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.spark.conftest import SCRIPTS, BackgroundJob, run_spark_submit, steward_conf

pytestmark = pytest.mark.spark

TRANSPARENT = "spark.steward.cache.transparent=true"
ROWS = 5000


def _input(folder: Path, shift: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"g": [i % 100 for i in range(ROWS)], "v": [i + shift for i in range(ROWS)]})
    pq.write_table(table, folder / "part-0.parquet")
    return folder


def _expected_job() -> dict[str, object]:
    totals: dict[int, int] = {}
    tops: dict[int, int] = {}
    for i in range(ROWS):
        s = (i * 7) % 1000
        totals[i % 100] = totals.get(i % 100, 0) + s
        tops[i % 100] = max(tops.get(i % 100, 0), s)
    return {"rows": 100, "total": sum(totals.values()), "top": sorted(tops.values()),
            "high": sum(1 for t in totals.values() if t > 1000)}


def _table_files(storage: Path) -> list[str]:
    root = storage / "tables"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) \
        if root.exists() else []


def _run(script: str, storage: Path, out: Path, source: Path,
         extra: tuple[str, ...] = ()) -> dict:
    result = run_spark_submit(SCRIPTS / script, steward_conf(storage, *extra), str(out),
                              str(source))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


def test_transparent_cache_of_an_unmodified_script_leaves_nothing(tmp_path: Path) -> None:
    storage, source = tmp_path / "storage", _input(tmp_path / "in")
    job = _run("cache_job.py", storage, tmp_path / "out.json", source,
               extra=(TRANSPARENT,))
    assert {k: job[k] for k in ("rows", "total", "top", "high")} == _expected_job()
    assert job["udf_calls"] == ROWS, "materialized once for four actions"
    assert [f for f in _table_files(storage) if "/data/" in f or f.startswith("data/")] == []
    assert _table_files(storage) == []


def test_a_killed_drivers_caches_are_removed_by_the_next_attach(tmp_path: Path) -> None:
    storage, source = tmp_path / "storage", _input(tmp_path / "in")
    run = BackgroundJob(SCRIPTS / "cache_job.py", steward_conf(storage, TRANSPARENT),
                        tmp_path / "killed.json", str(source), "--sleep", "300")
    job = run.wait_for_output()
    assert job["udf_calls"] == ROWS
    left = _table_files(storage)
    assert any(f.endswith(".parquet") for f in left), left
    entries = [json.loads((storage / "tables" / f).read_text())["body"]
               for f in left if f.startswith("entries/")]
    assert [(e["app_id"], e["state"]) for e in entries] == [(job["app_id"], "ready")]
    os.kill(job["pid"], signal.SIGKILL)
    run.thread.join(120)
    assert _table_files(storage) == left, "a crash cleans nothing"

    second = _run("cache_job.py", storage, tmp_path / "next.json", source)
    assert second["rows"] == 100
    deadline = time.monotonic() + 30
    while _table_files(storage) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _table_files(storage) == []


def test_a_shared_cache_is_reused_by_another_application_until_its_input_changes(
        tmp_path: Path) -> None:
    storage, source = tmp_path / "storage", _input(tmp_path / "in")
    first = _run("shared_cache_job.py", storage, tmp_path / "a.json", source)
    assert first["udf_calls"] == ROWS and first["key"].startswith("s-")
    second = _run("shared_cache_job.py", storage, tmp_path / "b.json", source)
    assert second["udf_calls"] == 0, "the second application computed nothing"
    assert second["key"] == first["key"] and second["rows"] == first["rows"]

    time.sleep(0.01)
    _input(source, shift=1)   # same path and size, new content and modification time
    third = _run("shared_cache_job.py", storage, tmp_path / "c.json", source)
    assert third["udf_calls"] == ROWS and third["key"] != first["key"]
    assert third["rows"] != first["rows"]
    entries = {f.split("/")[1][:-len(".json")] for f in _table_files(storage)
               if f.startswith("entries/")}
    assert entries == {first["key"], third["key"]}, "kept for shared-retention after stop"
