"""A packed streaming checkpoint location (FLIP-306, issue 24) across real failures: an
executor SIGKILLed while the driver packs (its state reloads from packed deltas on a new
executor), then the driver SIGKILLed mid-run; the query restarts from the packed location in a
new application and its result is exactly that of the input, as an unpacked run's is.
``spark-steward streams unpack`` then restores the plain layout, which Spark without
spark-steward runs on.

Only the first application needs two executors (one is killed, the query goes on); the restart
reads the packs on one (local-cluster[1,1,1024]), and plain Spark's run on the unpacked
location, a check of the layout Spark reads, on none (local[2])."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spark_steward.streams.lifecycle.packs import PACK_NAME
from spark_steward.storage import Storage
from spark_steward.streams.packs import Packs
from tests.spark.conftest import (NO_EXECUTOR, ONE_EXECUTOR, SCRIPTS, BackgroundJob,
                                  run_spark_submit, steward_conf)
from tests.spark.test_streams import RETAIN

FILES, ROWS = 30, 40
PACKING = ("spark.steward.streams.pack.enabled=true", "spark.steward.streams.pack.grace=3s",
           "spark.sql.shuffle.partitions=4", *(f"{k}={v}" for k, v in RETAIN.items()))


def _inputs(folder: Path, first: int, last: int) -> None:
    folder.mkdir(exist_ok=True)
    for number in range(first, last):
        lines = [json.dumps({"k": row % 5, "v": number * 100 + row}) for row in range(ROWS)]
        tmp = folder / f".{number:04d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(folder / f"{number:04d}.json")


def _expected(files: int) -> list[list[int]]:
    out = []
    for k in range(5):
        values = [n * 100 + r for n in range(files) for r in range(ROWS) if r % 5 == k]
        out.append([k, len(values), sum(values)])
    return out


def _packs(location: Path) -> list[str]:
    folder = location / "_steward" / "packs"
    return [p.name for p in folder.iterdir() if PACK_NAME.fullmatch(p.name)] \
        if folder.exists() else []


def _executor_pids(app_id: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"],
                           capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _cli(storage: Path, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "spark_steward.cli", *args, "--storage",
                           storage.as_uri(), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_packed_location_survives_killed_executors_and_drivers_and_unpacks(
        tmp_path: Path) -> None:
    storage, location, inputs = tmp_path / "storage", tmp_path / "ckpt", tmp_path / "in"
    _inputs(inputs, 0, FILES)
    flags = steward_conf(storage, *PACKING)
    first = BackgroundJob(SCRIPTS / "packed_stream_job.py", flags, tmp_path / "first.json",
                          str(location), str(inputs), str(10 * ROWS), "--sleep", "300")
    job = first.wait_for_output()
    # Files of equal times are taken in any order: the first ten are not always 0-9.
    assert [(k, n) for k, n, _ in job["rows"]] == [(k, 10 * ROWS // 5) for k in range(5)]
    # The query goes on with the remaining files while it packs; an executor dies meanwhile.
    deadline = time.monotonic() + 60
    while not _packs(location) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _packs(location), "nothing was packed"
    executors = _executor_pids(job["app_id"])
    assert executors, "no executor of the first application found"
    os.kill(executors[0], signal.SIGKILL)
    time.sleep(4)
    # The driver, mid-run and likely mid-cycle: its JVM and Python, no shutdown hook runs.
    os.kill(job["jvm"], signal.SIGKILL)
    os.kill(job["pid"], signal.SIGKILL)
    first.thread.join(120)
    loose = [p for p in location.rglob("*") if p.is_file() and p.parent.name.isdigit()
             and p.name.endswith(".delta")]
    assert _packs(location) and loose, "the kill left no packed and loose state to restart from"

    second = run_spark_submit(SCRIPTS / "packed_stream_job.py", steward_conf(storage, *PACKING),
                              str(tmp_path / "second.json"), str(location), str(inputs),
                              str(FILES * ROWS), master=ONE_EXECUTOR)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    result = json.loads((tmp_path / "second.json").read_text())
    assert result["query_id"] == job["query_id"]
    assert result["rows"] == _expected(FILES)  # exactly once: nothing lost, nothing twice
    assert result["state_keys"] == [0, 1, 2, 3, 4]  # the state data source reads packs too

    # Unpack writes back exactly the live files of settled packs that have no loose copy. (How
    # many that is depends on timing: loose copies wait out the grace, so at the application's
    # end the newest packs often still have theirs.) A member of a pack not settled yet whose
    # loose copy is gone is one Spark deleted meanwhile: it must not come back.
    state = Packs(Storage.from_url(location.as_uri()), "ckpt").read()
    live = state.live()
    packed_only = [rel for rel, m in live.items()
                   if m.pack in state.settled and not (location / rel).exists()]
    deleted = [rel for rel, m in live.items()
               if m.pack not in state.settled and not (location / rel).exists()]
    unpacked = _cli(storage, "streams", "unpack", "agg")
    assert unpacked["packs"] == len(state.packs) > 0
    assert unpacked["files"] == len(packed_only), (packed_only, deleted)
    assert all((location / rel).is_file() for rel in packed_only)
    assert not any((location / rel).exists() for rel in deleted), deleted
    assert _packs(location) == []
    # Plain Spark (spark-steward off, its manager not even installed) goes on from there.
    _inputs(inputs, FILES, FILES + 5)
    third = run_spark_submit(SCRIPTS / "packed_stream_job.py",
                             ["--conf", "spark.sql.shuffle.partitions=4",
                              *[a for k, v in RETAIN.items() for a in ("--conf", f"{k}={v}")]],
                             str(tmp_path / "third.json"), str(location), str(inputs),
                             str((FILES + 5) * ROWS), master=NO_EXECUTOR)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert json.loads((tmp_path / "third.json").read_text())["rows"] == _expected(FILES + 5)
