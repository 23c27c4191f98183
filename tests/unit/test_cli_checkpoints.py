"""cli.py ``checkpoints ls`` and the checkpoint part of ``gc`` over a storage dir holding
checkpoints in every state, of live, finished, crashed and unknown applications, Spark's own
checkpoint folders, orphaned data of several ages and a corrupt entry. No Spark: the entries are
written by a :class:`CheckpointStore` (and :class:`CheckpointMetadata` for the marked one), the
data files by hand."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import RetryingCleaner
from spark_steward.checkpoint import lifecycle as machine
from spark_steward.checkpoint.lifecycle import CheckpointKind, spark_series
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.storage import Storage
from tests.unit.conftest import FakeClock, break_delete
from tests.unit.test_cli import _assert_one_error_line, _run

LIVE, DONE, CRASHED, GHOST = "app-live", "app-done", "app-crashed", "app-ghost"
HOUR = 3600.0

CORRUPT_ENTRY = f"{layout.ENTRIES}/broken/0000000001.json"
OLD_ORPHAN = layout.data_path("etl", 99)              # 2 h old: gone with the default grace
MID_ORPHAN = layout.data_path("etl", 98)              # 40 min old: gone with --orphan-grace 30min
YOUNG_ORPHAN = layout.data_path("etl", 97)            # just written: always kept
OLD_ORPHAN_ARTIFACT = layout.artifact_path("model", 77)  # 2 h old
UNSAFE_ORPHAN = layout.data_path("broken", 5)         # old, but its series has a corrupt entry


@dataclass
class World:
    storage: Storage
    root: Path
    sparkcp: Path
    #: series/number -> (state, app, files, bytes, rows) of every readable entry
    entries: dict[str, tuple[str, str, int, int, int | None]]
    artifact_bytes: int  # size of the orphaned artifact

    @property
    def url(self) -> str:
        return self.storage.url

    def files(self) -> dict[str, bytes]:
        """Every file below the storage root and the Spark checkpoint dir, byte for byte."""
        found = {}
        for base in (self.root, self.sparkcp):
            for p in sorted(base.rglob("*")):
                if p.is_file():
                    found[str(p)] = p.read_bytes()
        return found

    def states(self) -> dict[str, str]:
        entries, _ = CheckpointMetadata(self.storage).load()
        return {e.id: e.state.value for e in entries}


def _cleaner() -> RetryingCleaner[CheckpointCleanup]:
    return RetryingCleaner(RetryStrategy.no_retry(), threads=1, name="test-checkpoints")


def _write_files(folder: Path, sizes: list[int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, size in enumerate(sizes):
        (folder / f"part-{i:05d}").write_bytes(bytes([i % 251]) * size)


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (when, when))


def _save(store: CheckpointStore, series: str, sizes: list[int], rows: int, *,
          complete: bool = True) -> Any:
    entry = store.begin(series)
    _write_files(Path(store.storage.path(entry.data)), sizes)
    if not complete:
        return entry
    files = [{"partition": i, "name": f"part-{i:05d}", "rows": rows, "bytes": s,
              "crc32c": "00000000"} for i, s in enumerate(sizes)]
    return store.complete(entry, {"format": "test", "files": files}, rows=rows * len(sizes),
                          bytes_=sum(sizes), files=len(sizes))


def _spark_rdd(store: CheckpointStore, folder: Path, sizes: list[int]) -> Any:
    _write_files(folder, sizes)
    entry = store.begin(spark_series(store.app_id), kind=CheckpointKind.SPARK_RDD,
                        data=folder.as_uri())
    return store.complete(entry)


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    root = tmp_path / "storage"
    storage = Storage.from_url(str(root))
    sparkcp = tmp_path / "sparkcp" / str(uuid.uuid4())
    here = ApplicationRegistry(storage, heartbeat_timeout=120.0)
    clock.now = time.time() - HOUR
    an_hour_ago = ApplicationRegistry(storage, heartbeat_timeout=120.0, this_host="far-away",
                                      clock=clock)
    here.write(here.new_record(LIVE, "streaming"))  # this test process: alive
    here.finish(here.new_record(DONE, "batch"))
    an_hour_ago.write(an_hour_ago.new_record(CRASHED, "silent"))

    stores = {app: CheckpointStore(storage, app, _cleaner(), is_dead=here.is_dead)
              for app in (LIVE, DONE, CRASHED, GHOST)}
    try:
        live, done, crashed, ghost = (stores[a] for a in (LIVE, DONE, CRASHED, GHOST))
        _save(live, "etl", [100, 50], 10)                       # etl/1 completed, live
        _save(live, "etl", [200], 20)                           # etl/2 completed, live
        _save(live, "etl", [30], 3, complete=False)             # etl/3 pending, live: kept
        _save(done, "model", [1000, 24], 7)                     # model/1 completed, finished
        _save(done, "model", [512], 0, complete=False)          # model/2 pending, finished: gc
        marked = _save(live, "model", [64, 64], 5)              # model/3 marked: gc
        CheckpointMetadata(storage).write_entry(
            machine.mark_for_deletion(marked, "subsumed: more than 1 retained", time.time()))
        _save(crashed, "scores", [10], 1, complete=False)      # scores/1 pending, crashed: gc
        _save(ghost, "scores", [5], 1, complete=False)         # scores/2 pending, no record: kept
        _spark_rdd(done, sparkcp / "rdd-3", [40, 40])           # Spark's own, finished: gc
        _spark_rdd(live, sparkcp / "rdd-8", [16])               # Spark's own, live: kept
    finally:
        for store in stores.values():
            store.cleaner.close(5)

    # data and artifacts no entry owns
    for rel, age, sizes in ((OLD_ORPHAN, 2 * HOUR, [300, 3]), (MID_ORPHAN, 40 * 60, [7]),
                            (YOUNG_ORPHAN, 0, [9]), (UNSAFE_ORPHAN, 2 * HOUR, [11])):
        _write_files(Path(storage.path(rel)), sizes)
        _age(Path(storage.path(rel)), age)
    storage.write_record(OLD_ORPHAN_ARTIFACT, {"format": "test", "files": []})
    _age(Path(storage.path(OLD_ORPHAN_ARTIFACT)), 2 * HOUR)
    artifact_bytes = len(storage.read_bytes(OLD_ORPHAN_ARTIFACT))
    # an entry that fails verification
    storage.write_atomic(CORRUPT_ENTRY, b'{"format": 1, "body": {"state": "comp')

    entries = {
        "etl/1": ("completed", LIVE, 2, 150, 20),
        "etl/2": ("completed", LIVE, 1, 200, 20),
        "etl/3": ("pending", LIVE, 1, 30, None),
        "model/1": ("completed", DONE, 2, 1024, 14),
        "model/2": ("pending", DONE, 1, 512, None),
        "model/3": ("marked-for-deletion", LIVE, 2, 128, 10),
        "scores/1": ("pending", CRASHED, 1, 10, None),
        "scores/2": ("pending", GHOST, 1, 5, None),
        f"{spark_series(DONE)}/1": ("completed", DONE, 2, 80, None),
        f"{spark_series(LIVE)}/1": ("completed", LIVE, 1, 16, None),
    }
    yield World(storage, root, sparkcp, entries, artifact_bytes)


LIVENESS = {LIVE: "live", DONE: "finished", CRASHED: "crashed", GHOST: "unknown"}


def _doomed(world: World) -> dict[str, tuple[int, int]]:
    """What gc must delete with the default grace (1h): item -> (files, bytes)."""
    doomed = {key: (files, size) for key, (_, _, files, size, _) in world.entries.items()
              if key in ("model/2", "model/3", "scores/1", f"{spark_series(DONE)}/1")}
    doomed[OLD_ORPHAN] = (2, 303)
    doomed[OLD_ORPHAN_ARTIFACT] = (1, world.artifact_bytes)
    return doomed


def _key(series_id: str) -> tuple[str, int]:
    series, number = series_id.rsplit("/", 1)
    return series, int(number)


# -- checkpoints ls ------------------------------------------------------------------------------


def test_ls_json(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "checkpoints", "ls", "--storage", world.url, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["storage"] == world.url
    assert data["corrupt_entries"] == [CORRUPT_ENTRY]
    listed = {f"{c['series']}/{c['id']}": c for c in data["checkpoints"]}
    assert list(listed) == sorted(world.entries, key=_key)  # by series, then id
    for key, (state, app, files, size, rows) in world.entries.items():
        c = listed[key]
        assert (c["state"], c["app_id"], c["liveness"], c["files"], c["bytes"], c["rows"]) == (
            state, app, LIVENESS[app], files, size, rows), key
        assert c["created_at"] > 0
        assert (c["completed_at"] is None) == (state == "pending"), key
    assert listed["model/3"]["discard_reason"] == "subsumed: more than 1 retained"
    assert listed["etl/1"]["discard_reason"] is None
    assert listed["etl/1"]["kind"] == "series"
    assert listed["etl/1"]["data"] == layout.data_path("etl", 1)
    spark_done = listed[f"{spark_series(DONE)}/1"]
    assert spark_done["kind"] == "spark-rdd"
    assert spark_done["data"] == (world.sparkcp / "rdd-3").as_uri()


def test_ls_text(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "checkpoints", "ls", "--storage", world.url)
    assert code == 0
    assert err.splitlines() == [f"warning: entry {CORRUPT_ENTRY} fails verification (left alone)"]
    lines = out.splitlines()
    assert lines[0].split() == ["SERIES", "ID", "STATE", "ROWS", "SIZE", "APPLICATION"]
    rows = lines[1:-1]
    assert len(rows) == len(world.entries)
    for row, key in zip(rows, sorted(world.entries, key=_key)):
        state, app, _, size, n = world.entries[key]
        series, number = _key(key)
        cells = row.split()
        assert cells[:4] == [series, str(number), state, "-" if n is None else str(n)], row
        assert cells[-2:] == [app, f"({LIVENESS[app]})"], row
    assert "1.0 KiB" in next(r for r in rows if r.split()[:2] == ["model", "1"])
    assert "512 B" in next(r for r in rows if r.split()[:2] == ["model", "2"])
    total = sum(size for _, _, _, size, _ in world.entries.values())
    assert lines[-1] == f"total: 10 checkpoints in 5 series, {total / 1024:.1f} KiB"


def test_ls_one_series(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, _ = _run(capsys, "checkpoints", "ls", "--storage", world.url, "--json",
                        "--series", "model")
    assert code == 0
    data = json.loads(out)
    assert [(c["id"], c["state"]) for c in data["checkpoints"]] == [
        (1, "completed"), (2, "pending"), (3, "marked-for-deletion")]
    code, out, _ = _run(capsys, "checkpoints", "ls", "--storage", world.url, "--series", "scores")
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[:3] for line in lines[1:-1]] == [["scores", "1", "pending"],
                                                         ["scores", "2", "pending"]]
    assert lines[-1] == "total: 2 checkpoints in 1 series, 15 B"
    code, out, _ = _run(capsys, "checkpoints", "ls", "--storage", world.url, "--series", "none")
    assert code == 0 and out == f"no checkpoints in {world.url}\n"


def test_ls_of_an_empty_storage(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                memory_storage: Storage) -> None:
    missing = tmp_path / "not-yet"
    code, out, err = _run(capsys, "checkpoints", "ls", "--storage", str(missing))
    assert (code, out, err) == (0, f"no checkpoints in {missing.as_uri()}\n", "")
    assert not missing.exists()
    code, out, _ = _run(capsys, "checkpoints", "ls", "--storage", memory_storage.url, "--json")
    assert code == 0 and json.loads(out)["checkpoints"] == []


def test_ls_on_memory_storage(capsys: pytest.CaptureFixture[str],
                              memory_storage: Storage) -> None:
    registry = ApplicationRegistry(memory_storage, heartbeat_timeout=120.0)
    registry.finish(registry.new_record(DONE, "batch"))
    store = CheckpointStore(memory_storage, DONE, _cleaner(), is_dead=registry.is_dead)
    try:
        first = store.begin("m")
        memory_storage.write_atomic(f"{first.data}/part-00000", b"x" * 33)
        store.complete(first, {"files": []}, rows=3, bytes_=33, files=1)
        store.begin("m")
    finally:
        store.cleaner.close(5)
    code, out, err = _run(capsys, "checkpoints", "ls", "--storage", memory_storage.url, "--json")
    assert code == 0 and err == ""
    assert [(c["id"], c["state"], c["rows"], c["files"], c["bytes"], c["liveness"])
            for c in json.loads(out)["checkpoints"]] == [
        (1, "completed", 3, 1, 33, "finished"), (2, "pending", None, 0, 0, "finished")]


def test_ls_reports_a_bad_storage_option(
        capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "checkpoints", "ls", "--storage", world.url, "--option", "x")
    _assert_one_error_line(code, out, err, "--option 'x'")


# -- gc ----------------------------------------------------------------------------------------


def _gc(capsys: pytest.CaptureFixture[str], world: World, *extra: str
        ) -> tuple[int, dict[str, Any], str]:
    code, out, err = _run(capsys, "gc", "--storage", world.url, "--json", *extra)
    data = json.loads(out)
    (report,) = [c for c in data["collectors"] if c["name"] == "checkpoints"]
    return code, dict(report, ok=data["ok"], dry_run=data["dry_run"]), err


def _deleted(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {d["item"]: (d["files"], d["bytes"]) for d in report["deleted"]}


def _skipped(report: dict[str, Any]) -> dict[str, str]:
    return {s["item"]: s["reason"] for s in report["skipped"]}


def test_gc_dry_run_lists_and_deletes_nothing(capsys: pytest.CaptureFixture[str],
                                              world: World) -> None:
    before = world.files()
    code, report, err = _gc(capsys, world, "--dry-run")
    assert code == 0 and err == ""
    assert report["dry_run"] is True and report["ok"] is True
    assert _deleted(report) == _doomed(world)
    assert list(_skipped(report)) == [CORRUPT_ENTRY]
    assert report["failed"] == []
    assert world.files() == before

    code, out, _ = _run(capsys, "gc", "--storage", world.url, "--dry-run")
    assert code == 0
    assert "checkpoints: would delete" in out and "would delete model/2: 1 file, 512 B" in out
    assert f"would delete {OLD_ORPHAN}: 2 files, 303 B" in out
    assert f"skipped {CORRUPT_ENTRY}: " in out
    assert "  deleted " not in out
    assert world.files() == before


def test_gc_deletes_exactly_the_dead_and_marked_and_old_orphans(
        capsys: pytest.CaptureFixture[str], world: World) -> None:
    kept_entries = {k: v[0] for k, v in world.entries.items() if k not in _doomed(world)}
    kept_files = {p: b for p, b in world.files().items()
                  if not any(x in p for x in ("/model/0000000002", "/model/0000000003",
                                              "/scores/0000000001", "/rdd-3/",
                                              f"/{spark_series(DONE)}/0000000001",
                                              "/etl/0000000099", "/model/0000000077"))}
    code, report, err = _gc(capsys, world)
    assert code == 0 and err == ""
    assert report["ok"] is True and report["failed"] == []
    assert _deleted(report) == _doomed(world)
    assert world.states() == kept_entries
    assert world.files() == kept_files  # everything else byte for byte
    for series, number in (("model", 2), ("model", 3), ("scores", 1)):
        for rel in (layout.entry_path(series, number), layout.artifact_path(series, number),
                    layout.data_path(series, number)):
            assert not world.storage.exists(rel), rel
    assert not (world.sparkcp / "rdd-3").exists() and (world.sparkcp / "rdd-8").is_dir()
    assert world.storage.exists(YOUNG_ORPHAN) and world.storage.exists(MID_ORPHAN)
    assert world.storage.exists(UNSAFE_ORPHAN), "a series with a corrupt entry is left alone"
    assert world.storage.exists(CORRUPT_ENTRY)
    assert sorted(world.storage.list_names("applications")) == sorted(
        f"{a}.json" for a in (LIVE, DONE, CRASHED))

    # a second run finds nothing more
    code, report, _ = _gc(capsys, world)
    assert code == 0 and report["deleted"] == [] and list(_skipped(report)) == [CORRUPT_ENTRY]
    assert world.files() == kept_files


def test_gc_text_summary(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "gc", "--storage", world.url)
    assert code == 0 and err == ""
    lines = out.splitlines()
    doomed = _doomed(world)
    files = sum(f for f, _ in doomed.values())
    summary = next(line for line in lines if line.startswith("checkpoints: "))
    assert summary.startswith(f"checkpoints: deleted {files} files, ")
    assert summary.endswith(f" of {len(doomed)} items")
    assert "  deleted model/3: 2 files, 128 B" in lines
    assert "would" not in out and "FAILED" not in out


def test_gc_orphan_grace(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, report, _ = _gc(capsys, world, "--orphan-grace", "30min", "--dry-run")
    assert code == 0
    assert _deleted(report) == dict(_doomed(world), **{MID_ORPHAN: (1, 7)})
    code, report, _ = _gc(capsys, world, "--orphan-grace", "3h")
    assert code == 0
    assert OLD_ORPHAN not in _deleted(report) and OLD_ORPHAN_ARTIFACT not in _deleted(report)
    assert world.storage.exists(OLD_ORPHAN) and world.storage.exists(MID_ORPHAN)
    assert "model/2" in _deleted(report)
    code, report, _ = _gc(capsys, world, "--orphan-grace", "30min")
    assert code == 0
    assert set(_deleted(report)) == {OLD_ORPHAN, MID_ORPHAN, OLD_ORPHAN_ARTIFACT}
    assert not world.storage.exists(MID_ORPHAN) and world.storage.exists(YOUNG_ORPHAN)


def test_gc_rejects_a_bad_orphan_grace(capsys: pytest.CaptureFixture[str], world: World) -> None:
    before = world.files()
    code, out, err = _run(capsys, "gc", "--storage", world.url, "--orphan-grace", "soon")
    assert code == 2 and "soon" in err and err.startswith("error: ")
    assert world.files() == before


def test_heartbeat_timeout_keeps_the_crashed_applications_pending_checkpoint(
        capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, report, _ = _gc(capsys, world, "--heartbeat-timeout", "2h", "--dry-run")
    assert code == 0
    assert "scores/1" not in _deleted(report) and "model/2" in _deleted(report)


def test_a_failing_delete_exits_1_and_stays_marked(capsys: pytest.CaptureFixture[str],
                                                   world: World,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    broken = layout.data_path("model", 2)
    allow_delete = break_delete(monkeypatch, broken)
    code, report, _ = _gc(capsys, world)
    assert code == 1 and report["ok"] is False
    assert [f["path"] for f in report["failed"]] == ["model/2"]
    assert "injected" in report["failed"][0]["message"]
    assert set(_deleted(report)) == set(_doomed(world)) - {"model/2"}
    assert world.states()["model/2"] == "marked-for-deletion"  # recorded for the next run
    assert world.storage.exists(broken)

    code, out, _ = _run(capsys, "gc", "--storage", world.url)
    assert code == 1
    assert "FAILED model/2: " in out and "1 delete failed; run gc again to retry" in out

    allow_delete()
    code, report, _ = _gc(capsys, world)
    assert code == 0 and _deleted(report) == {"model/2": (1, 512)}
    assert "model/2" not in world.states() and not world.storage.exists(broken)


# -- file-merged series: du ---------------------------------------------------------------------


def _merged_save(store: CheckpointStore, series: str, reused: list[Any],
                 new: list[tuple[int, int]], file_size: int) -> Any:
    """A merged checkpoint: ``reused`` segments of earlier ones, and ``new`` (offset, length)
    segments in one file of its own folder that is ``file_size`` bytes long."""
    from spark_steward.checkpoint.merging.lifecycle import Segment

    entry = store.begin(series, merged=True, reuses={s.file for s in reused})
    rel = f"{entry.data}/host-0000.arrows"
    store.storage.write_atomic(rel, b"x" * file_size)
    segments = list(reused) + [Segment(len(reused) + i, rel, off, n, 1, "00000000", f"{rel}{off}")
                               for i, (off, n) in enumerate(new)]
    store.complete(entry, {"segments": [s.to_json() for s in segments]},
                   physical={s.file for s in segments})
    return segments


def test_du_shows_physical_against_live_bytes_per_series(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    storage = Storage.from_url(tmp_path.as_uri())
    store = CheckpointStore(storage, "app-x", _cleaner(), is_dead=lambda app: False)
    first = _merged_save(store, "ranks", [], [(0, 40), (40, 60)], 150)  # 50 bytes of waste
    _merged_save(store, "ranks", first[:1], [(0, 30)], 30)              # reuses 40 bytes
    _save(store, "plain", [20], 1)
    try:
        code, out, err = _run(capsys, "checkpoints", "du", "--storage", storage.url, "--json")
        assert code == 0 and err == ""
        series = {s["series"]: s for s in json.loads(out)["series"]}
        assert series["ranks"] == {"series": "ranks", "checkpoints": 2, "merged": True,
                                   "files": 2, "physical_bytes": 180, "live_bytes": 130,
                                   "space_amplification": round(180 / 130, 4)}
        assert series["plain"]["space_amplification"] == 1.0
        assert not series["plain"]["merged"]

        code, out, _ = _run(capsys, "checkpoints", "du", "--storage", storage.url)
        lines = out.splitlines()
        assert lines[0].split() == ["SERIES", "CHECKPOINTS", "MERGED", "FILES", "PHYSICAL",
                                    "LIVE", "AMPLIFICATION"]
        assert lines[2].split()[:4] == ["ranks", "2", "yes", "2"] and lines[2].endswith("1.38")
        code, out, _ = _run(capsys, "checkpoints", "ls", "--storage", storage.url)
        assert out.splitlines()[-1] == ("series ranks: 2 physical files, 180 B for 130 B live, "
                                        "space amplification 1.38")
    finally:
        store.cleaner.close(0)
