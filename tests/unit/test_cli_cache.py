"""cli.py ``cache ls``, ``cache du`` and the cached-table part of ``gc`` over a storage dir
holding tables in every state, private and shared, of live, finished, crashed and unknown
applications, orphans of several ages and a corrupt entry. No Spark: entries are written by
:class:`TableStore`, the Parquet files by pyarrow."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.cleaner import RetryingCleaner
from spark_steward.tables import lifecycle as machine
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.tables.lifecycle import TableState, shared_key
from spark_steward.storage import Storage
from spark_steward.tables import store as layout
from spark_steward.tables.manifest import build_manifest
from spark_steward.tables.store import TableCleanup, TableStore
from tests.unit.conftest import FakeClock, break_delete
from tests.unit.test_cli import _run
from tests.unit.test_cli_checkpoints import _age
from tests.unit.test_table_store import write_parts

LIVE, DONE, CRASHED, GHOST = "app-live", "app-done", "app-crashed", "app-ghost"
HOUR = 3600.0
LIVENESS = {LIVE: "live", DONE: "finished", CRASHED: "crashed", GHOST: "unknown"}

LIVE_READY, LIVE_PENDING, MARKED = "p-app-live-t1", "p-app-live-t2", "p-app-live-t3"
DONE_READY, CRASHED_PENDING, GHOST_READY = "p-app-done-t1", "p-app-crashed-t1", "p-app-ghost-t1"
IN_USE, ABANDONED = shared_key("11" * 16), shared_key("22" * 16)
BROKEN = "p-app-broken-t1"

OLD_ATTEMPT = f"tables/data/{LIVE_READY}/0ld"             # 2 h old: gone with the default grace
MID_ORPHAN = "tables/data/p-app-gone-t6"                  # 40 min old: gone with 30min
YOUNG_ORPHAN = "tables/data/p-app-gone-t7"                # just written: always kept
OLD_MANIFEST = "tables/manifests/p-app-gone-t8.json"      # 2 h old
OLD_USERS = f"tables/users/{shared_key('33' * 16)}"       # 2 h old
BROKEN_DATA = f"tables/data/{BROKEN}"                     # old, but its entry is corrupt


@dataclass
class World:
    storage: Storage
    root: Path
    #: key -> (state, owner, shared, users, rows) of every readable entry
    tables: dict[str, tuple[str, str, bool, list[str], int]]
    attempts: dict[str, str]

    @property
    def url(self) -> str:
        return self.storage.url

    def usage(self, rel: str) -> tuple[int, int]:
        path = Path(self.storage.path(rel))
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else \
            [path] if path.is_file() else []
        return len(files), sum(p.stat().st_size for p in files)

    def data(self, key: str) -> str:
        return layout.data_path(key, self.attempts[key])

    def files(self) -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()}

    def entry(self, key: str) -> Any:
        store = TableStore(self.storage, "app-test", _cleaner(), is_dead=lambda a: False)
        try:
            return store.read_entry(key)
        finally:
            store.cleaner.close(0)

    def states(self) -> dict[str, str]:
        store = TableStore(self.storage, "app-test", _cleaner(), is_dead=lambda a: False)
        try:
            return {e.key: e.state.value for e in store.load()[0]}
        finally:
            store.cleaner.close(0)


def _cleaner() -> RetryingCleaner[TableCleanup]:
    return RetryingCleaner(RetryStrategy.no_retry(), threads=1, name="test-caches")


def _table(store: TableStore, key: str, rows: list[int], *, shared: bool = False,
           ready: bool = True) -> Any:
    entry = store.begin(key, shared=shared, description=f"plan of {key}")
    write_parts(store.storage, store.data_rel(entry), rows)
    if not ready:
        return entry
    manifest = build_manifest(store.storage, store.data_rel(entry), key, entry.attempt, "{}", 2)
    return store.complete(entry, manifest)


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    root = tmp_path / "storage"
    storage = Storage.from_url(str(root))
    here = ApplicationRegistry(storage, heartbeat_timeout=120.0)
    clock.now = time.time() - HOUR
    an_hour_ago = ApplicationRegistry(storage, heartbeat_timeout=120.0, this_host="far-away",
                                      clock=clock)
    here.write(here.new_record(LIVE, "notebook"))             # this test process: alive
    here.finish(here.new_record(DONE, "batch"))
    an_hour_ago.write(an_hour_ago.new_record(CRASHED, "silent"))
    stores = {app: TableStore(storage, app, _cleaner(), is_dead=here.is_dead)
              for app in (LIVE, DONE, CRASHED, GHOST)}
    try:
        live, done, crashed, ghost = (stores[a] for a in (LIVE, DONE, CRASHED, GHOST))
        made = [_table(live, LIVE_READY, [3, 4]), _table(live, LIVE_PENDING, [2], ready=False),
                _table(done, DONE_READY, [5]), _table(crashed, CRASHED_PENDING, [1], ready=False),
                _table(ghost, GHOST_READY, [6]), _table(done, IN_USE, [7, 1], shared=True),
                _table(done, ABANDONED, [9], shared=True), _table(live, MARKED, [2, 2])]
        live.add_user(IN_USE)
        crashed.add_user(ABANDONED)
        storage.write_record(layout.entry_path(MARKED), machine.transition(
            made[-1], TableState.MARKED_FOR_DELETION, reason="invalidated").to_dict())
    finally:
        for store in stores.values():
            store.cleaner.close(5)

    for rel, age in ((OLD_ATTEMPT, 2 * HOUR), (MID_ORPHAN, 40 * 60), (YOUNG_ORPHAN, 0),
                     (f"{BROKEN_DATA}/a1", 2 * HOUR)):
        write_parts(storage, rel, [1])
        _age(Path(storage.path(rel)), age)
    _age(Path(storage.path(MID_ORPHAN)), 40 * 60)
    _age(Path(storage.path(BROKEN_DATA)), 2 * HOUR)
    storage.write_record(OLD_MANIFEST, {"format": "x"})
    storage.write_record(f"{OLD_USERS}/{DONE}", {"app_id": DONE})
    for rel in (OLD_MANIFEST, OLD_USERS):
        _age(Path(storage.path(rel)), 2 * HOUR)
    storage.write_atomic(layout.entry_path(BROKEN), b'{"format": 1, "body": {"state": "re')

    tables = {
        LIVE_READY: ("ready", LIVE, False, [], 7),
        LIVE_PENDING: ("pending", LIVE, False, [], 0),
        MARKED: ("marked-for-deletion", LIVE, False, [], 4),
        DONE_READY: ("ready", DONE, False, [], 5),
        CRASHED_PENDING: ("pending", CRASHED, False, [], 0),
        GHOST_READY: ("ready", GHOST, False, [], 6),
        IN_USE: ("ready", DONE, True, [DONE, LIVE], 8),
        ABANDONED: ("ready", DONE, True, [CRASHED, DONE], 9),
    }
    yield World(storage, root, tables, {e.key: e.attempt for e in made})


def _doomed(world: World) -> dict[str, tuple[int, int]]:
    """What gc must delete with the default grace (1h): item -> (files, bytes)."""
    doomed = {key: world.usage(world.data(key))
              for key in (DONE_READY, CRASHED_PENDING, ABANDONED, MARKED)}
    for rel in (OLD_ATTEMPT, OLD_MANIFEST, OLD_USERS):
        doomed[rel] = world.usage(rel)
    return doomed


# -- cache ls ----------------------------------------------------------------------------------


def test_ls_json(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "cache", "ls", "--storage", world.url, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["storage"] == world.url
    assert data["corrupt_entries"] == [f"tables/entries/{BROKEN}.json"]
    listed = {t["key"]: t for t in data["tables"]}
    assert list(listed) == sorted(world.tables)
    for key, (state, app, shared, users, rows) in world.tables.items():
        t = listed[key]
        assert (t["state"], t["app_id"], t["liveness"], t["shared"], t["rows"]) == (
            state, app, LIVENESS[app], shared, rows), key
        assert [(u["app_id"], u["liveness"]) for u in t["users"]] == [
            (u, LIVENESS[u]) for u in users], key
        assert (t["files"], t["bytes"]) == world.usage(world.data(key)), key
        assert t["attempt"] == world.attempts[key] and t["description"] == f"plan of {key}"
        assert 0 < t["created_at"] <= time.time()
    assert listed[MARKED]["discard_reason"] == "invalidated"
    assert listed[LIVE_READY]["discard_reason"] is None


def test_ls_text(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "cache", "ls", "--storage", world.url)
    assert code == 0
    assert err.splitlines() == [
        f"warning: entry tables/entries/{BROKEN}.json fails verification (left alone)"]
    lines = out.splitlines()
    assert lines[0].split() == ["KEY", "STATE", "SHARED", "ROWS", "FILES", "SIZE", "CREATED",
                                "APPLICATION", "USERS", "DESCRIPTION"]
    rows = lines[1:-1]
    assert [r.split()[0] for r in rows] == sorted(world.tables)
    for row in rows:
        key = row.split()[0]
        state, app, shared, users, n = world.tables[key]
        cells = row.split()
        assert cells[1:4] == [state, "yes" if shared else "no", str(n)], row
        assert f"{app} ({LIVENESS[app]})" in row and row.endswith(f"plan of {key}"), row
        assert f"  {','.join(users) or '-'}  " in row, row
    total = sum(world.usage(world.data(k))[1] for k in world.tables)
    assert lines[-1] == f"total: 8 tables, {total / 1024:.1f} KiB"


def test_ls_of_an_empty_storage(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                memory_storage: Storage) -> None:
    missing = tmp_path / "not-yet"
    assert _run(capsys, "cache", "ls", "--storage", str(missing)) == (
        0, f"no cached tables in {missing.as_uri()}\n", "")
    assert not missing.exists()
    code, out, _ = _run(capsys, "cache", "ls", "--storage", memory_storage.url, "--json")
    assert code == 0 and json.loads(out)["tables"] == []


# -- cache du ----------------------------------------------------------------------------------


def test_du_json(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "cache", "du", "--storage", world.url, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    size = {k: world.usage(world.data(k))[1] for k in world.tables}
    by_state: dict[str, list[int]] = {s.value: [0, 0] for s in TableState}
    by_app: dict[str, list[int]] = {}
    for key, (state, app, *_rest) in world.tables.items():
        by_state[state][0] += 1
        by_state[state][1] += size[key]
        by_app.setdefault(app, [0, 0])
        by_app[app][0] += 1
        by_app[app][1] += size[key]
    assert data["states"] == {s: {"tables": n, "bytes": b} for s, (n, b) in by_state.items()}
    assert data["applications"] == [
        {"app_id": app, "liveness": LIVENESS[app], "tables": n, "bytes": b}
        for app, (n, b) in sorted(by_app.items())]
    orphans = [world.usage(rel) for rel in (OLD_ATTEMPT, MID_ORPHAN, YOUNG_ORPHAN,
                                            OLD_MANIFEST, OLD_USERS)]
    assert data["totals"] == {
        "tables": 8, "bytes": sum(size.values()),
        "live_bytes": sum(b for _, b in [by_app[LIVE]]),
        "dead_bytes": by_app[DONE][1] + by_app[CRASHED][1],
        "unknown_bytes": by_app[GHOST][1],
        "orphan_files": sum(f for f, _ in orphans), "orphan_bytes": sum(b for _, b in orphans)}
    assert data["corrupt_entries"] == [f"tables/entries/{BROKEN}.json"]


def test_du_text(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, _ = _run(capsys, "cache", "du", "--storage", world.url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["STATE", "TABLES", "SIZE"]
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["pending", "2"], ["ready", "5"], ["marked-for-deletion", "1"]]
    assert any(line.split()[:3] == [DONE, "finished", "3"] for line in lines)
    orphans = [world.usage(rel) for rel in (OLD_ATTEMPT, MID_ORPHAN, YOUNG_ORPHAN,
                                            OLD_MANIFEST, OLD_USERS)]
    files, size = sum(f for f, _ in orphans), sum(b for _, b in orphans)
    assert files == 3 * 3 + 2
    assert lines[-1].startswith("total: 8 tables, ")
    assert lines[-1].endswith(f"orphaned: {files} files, {size / 1024:.1f} KiB")


# -- gc ----------------------------------------------------------------------------------------


def _gc(capsys: pytest.CaptureFixture[str], world: World, *extra: str
        ) -> tuple[int, dict[str, Any]]:
    if "--shared-retention" not in extra:  # staged retention has its own test
        extra = (*extra, "--shared-retention", "0")
    code, out, _ = _run(capsys, "gc", "--storage", world.url, "--json", *extra)
    data = json.loads(out)
    assert [c["name"] for c in data["collectors"]][-2:] == ["caches", "streams"]
    (report,) = [c for c in data["collectors"] if c["name"] == "caches"]
    return code, dict(report, ok=data["ok"], dry_run=data["dry_run"])


def _deleted(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {d["item"]: (d["files"], d["bytes"]) for d in report["deleted"]}


def test_gc_dry_run_lists_and_deletes_nothing(capsys: pytest.CaptureFixture[str],
                                              world: World) -> None:
    before = world.files()
    code, report = _gc(capsys, world, "--dry-run")
    assert code == 0 and report["dry_run"] is True and report["failed"] == []
    assert _deleted(report) == _doomed(world)
    assert [s["item"] for s in report["skipped"]] == [f"tables/entries/{BROKEN}.json"]
    assert world.files() == before
    code, out, _ = _run(capsys, "gc", "--storage", world.url, "--dry-run",
                        "--shared-retention", "0")
    assert code == 0 and "caches: would delete" in out
    assert f"would delete {DONE_READY}: " in out and "  deleted " not in out
    assert world.files() == before


def test_gc_deletes_exactly_what_recovery_would(capsys: pytest.CaptureFixture[str],
                                                world: World) -> None:
    gone = [world.storage.path(rel) for rel in
            [*(world.data(k) for k in (DONE_READY, CRASHED_PENDING, ABANDONED, MARKED)),
             *(layout.entry_path(k) for k in (DONE_READY, CRASHED_PENDING, ABANDONED, MARKED)),
             *(layout.manifest_path(k) for k in (DONE_READY, ABANDONED, MARKED)),
             f"tables/users/{ABANDONED}", OLD_ATTEMPT, OLD_MANIFEST, OLD_USERS]]
    kept = {p: b for p, b in world.files().items() if not any(p.startswith(g) for g in gone)}
    doomed = _doomed(world)
    code, report = _gc(capsys, world)
    assert code == 0 and report["ok"] is True and report["failed"] == []
    assert _deleted(report) == doomed
    assert world.files() == kept                          # everything else byte for byte
    assert world.states() == {k: v[0] for k, v in world.tables.items()
                              if k in (LIVE_READY, LIVE_PENDING, GHOST_READY, IN_USE)}
    assert world.storage.exists(YOUNG_ORPHAN) and world.storage.exists(MID_ORPHAN)
    assert world.storage.exists(BROKEN_DATA), "a key with a corrupt entry is left alone"
    assert sorted(world.storage.list_names(f"tables/users/{IN_USE}")) == [DONE, LIVE]

    code, report = _gc(capsys, world)
    assert code == 0 and report["deleted"] == [] and world.files() == kept


def test_gc_keeps_an_abandoned_shared_table_for_its_retention(
        capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, report = _gc(capsys, world, "--shared-retention", "1h")
    assert code == 0 and ABANDONED not in _deleted(report)
    stamped = world.entry(ABANDONED)
    assert stamped.state is TableState.READY and stamped.released_at is not None
    code, report = _gc(capsys, world, "--shared-retention", "1h")
    assert code == 0 and ABANDONED not in _deleted(report), "the stamp is kept, not renewed"
    assert world.entry(ABANDONED).released_at == stamped.released_at
    time.sleep(1.1)
    code, report = _gc(capsys, world, "--shared-retention", "1s")
    assert code == 0 and ABANDONED in _deleted(report)
    assert world.entry(ABANDONED) is None


def test_gc_orphan_grace(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, report = _gc(capsys, world, "--orphan-grace", "30min", "--dry-run")
    assert code == 0
    assert _deleted(report) == dict(_doomed(world), **{MID_ORPHAN: world.usage(MID_ORPHAN)})
    code, report = _gc(capsys, world, "--orphan-grace", "3h")
    assert code == 0 and not {OLD_ATTEMPT, OLD_MANIFEST, OLD_USERS} & set(_deleted(report))
    assert world.storage.exists(OLD_ATTEMPT) and DONE_READY in _deleted(report)


def test_a_failing_delete_exits_1_and_stays_marked(capsys: pytest.CaptureFixture[str],
                                                   world: World,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    broken = world.data(DONE_READY)
    doomed = _doomed(world)
    allow_delete = break_delete(monkeypatch, broken)
    code, report = _gc(capsys, world)
    assert code == 1 and report["ok"] is False
    assert [f["path"] for f in report["failed"]] == [DONE_READY]
    assert "injected" in report["failed"][0]["message"]
    assert _deleted(report) == {k: v for k, v in doomed.items() if k != DONE_READY}
    assert world.states()[DONE_READY] == "marked-for-deletion"
    assert world.storage.exists(broken)

    allow_delete()
    code, report = _gc(capsys, world)
    assert code == 0 and list(_deleted(report)) == [DONE_READY]
    assert DONE_READY not in world.states() and not world.storage.exists(broken)
