"""A ``shared=True`` cached table reused by a second application through spark-submit until its
input changes (a killed driver's tables and transparent ``df.cache()`` in an unmodified script:
tests/faults/test_cache_crash.py).

The first application materializes the table on two executors; the later ones, which find it
or not, have one (local-cluster[1,1,1024])."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.spark.conftest import CLUSTER, ONE_EXECUTOR, SCRIPTS, run_spark_submit, steward_conf

TRANSPARENT = "spark.steward.cache.transparent=true"
ROWS = 5000


def write_input(folder: Path, shift: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"g": [i % 100 for i in range(ROWS)], "v": [i + shift for i in range(ROWS)]})
    pq.write_table(table, folder / "part-0.parquet")
    return folder


def expected_job() -> dict[str, object]:
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
         extra: tuple[str, ...] = (), master: str = CLUSTER) -> dict:
    result = run_spark_submit(SCRIPTS / script, steward_conf(storage, *extra), str(out),
                              str(source), master=master)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_shared_cache_is_reused_by_another_application_until_its_input_changes(
        tmp_path: Path) -> None:
    storage, source = tmp_path / "storage", write_input(tmp_path / "in")
    first = _run("shared_cache_job.py", storage, tmp_path / "a.json", source)
    assert first["udf_calls"] == ROWS and first["key"].startswith("s-")
    second = _run("shared_cache_job.py", storage, tmp_path / "b.json", source,
                  master=ONE_EXECUTOR)
    assert second["udf_calls"] == 0, "the second application computed nothing"
    assert second["key"] == first["key"] and second["rows"] == first["rows"]

    time.sleep(0.01)
    write_input(source, shift=1)   # same path and size, new content and modification time
    third = _run("shared_cache_job.py", storage, tmp_path / "c.json", source,
                 master=ONE_EXECUTOR)
    assert third["udf_calls"] == ROWS and third["key"] != first["key"]
    assert third["rows"] != first["rows"]
    entries = {f.split("/")[1][:-len(".json")] for f in _table_files(storage)
               if f.startswith("entries/")}
    assert entries == {first["key"], third["key"]}, "kept for shared-retention after stop"
