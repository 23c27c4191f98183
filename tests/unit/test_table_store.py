"""TableStore and table manifests: durable pending entries, manifest then entry, the discard
order (mark → data → manifest → users → entry) and its retries, the re-materialization race,
failover of dead applications, shared tables released by their last live user, orphans, and
the quick and full checks of the Parquet files against their manifest.

Cleanup runs deterministically with the conftest's :class:`ManualCleaner` on a fake
clock; a few tests run the real :class:`RetryingCleaner`.
"""

from __future__ import annotations

import io
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_steward import records
from spark_steward.checksum import crc32c_of, format_crc
from spark_steward.cleaner import RetryingCleaner
from spark_steward.errors import (CacheError, ManifestError, OutcomeUnknown, StorageError,
                                  TableReplaced, TableStateError)
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.tables.lifecycle import TableEntry, TableState, shared_key
from spark_steward.storage import Storage
from spark_steward.tables import store as layout
from spark_steward.tables.manifest import Manifest, build_manifest, find_problem
from spark_steward.recovery import RecoveryReport
from spark_steward.tables.store import TableCleanup, TableStore
from tests.unit.conftest import FakeClock, Liveness, ManualCleaner, until
from tests.unit.failing_fs import FailingFileSystem

APP = "app-me"
ROOT = "/steward"
HOUR = 3600.0
KEY = "p-app-me-t1"
SHARED = shared_key("5e" * 16)


# -- harness -----------------------------------------------------------------------------------


def make_store(st: Storage, cleaner: ManualCleaner | RetryingCleaner[TableCleanup], clock: FakeClock,
               app: str = APP, is_dead: Callable[[str], bool] = Liveness()) -> TableStore:
    return TableStore(st, app, cast(RetryingCleaner[TableCleanup], cleaner), is_dead=is_dead,
                      clock=clock)


def full(rel: str) -> str:
    return f"{ROOT}/{rel}"


def parquet(rows: int, seed: int = 0) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(seed, seed + rows)),
                             "name": [f"row-{i}" for i in range(rows)]}), buf)
    return buf.getvalue()


def write_parts(st: Storage, folder: str, rows: list[int]) -> list[str]:
    """What Spark writes: part files, a _SUCCESS marker and Hadoop's .crc side files."""
    names = [f"part-{i:05d}-c000.snappy.parquet" for i in range(len(rows))]
    if st.is_local:                       # object stores (and memory://) have no folders
        st.fs.makedirs(st.path(folder), exist_ok=True)
    for i, (name, n) in enumerate(zip(names, rows)):
        st.fs.pipe_file(st.path(f"{folder}/{name}"), parquet(n, seed=100 * i))
        st.fs.pipe_file(st.path(f"{folder}/.{name}.crc"), b"hadoop-crc")
    st.fs.pipe_file(st.path(f"{folder}/_SUCCESS"), b"")
    return names


def materialize(store: TableStore, key: str = KEY, *, shared: bool = False,
                rows: list[int] | None = None) -> tuple[TableEntry, Manifest]:
    entry = store.begin(key, shared=shared, description="Join(orders, users)")
    write_parts(store.storage, store.data_rel(entry), rows or [3, 4])
    manifest = build_manifest(store.storage, store.data_rel(entry), entry.key, entry.attempt,
                              '{"type":"struct"}', threads=2)
    return store.complete(entry, manifest), manifest


def stored_state(st: Storage, key: str) -> str:
    return str(st.read_record(layout.entry_path(key))["state"])


@pytest.fixture
def store(st: Storage, cleaner: ManualCleaner, clock: FakeClock) -> TableStore:
    return make_store(st, cleaner, clock)


def other(st: Storage, clock: FakeClock, app: str, *dead: str) -> TableStore:
    return make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app=app,
                      is_dead=Liveness(*dead))


def run(store: TableStore) -> None:
    cast(ManualCleaner, store.cleaner).run_until_idle()


# -- begin / complete / lookup ---------------------------------------------------------------


def test_begin_records_the_pending_entry_before_any_data(store: TableStore, st: Storage,
                                                         fs: FailingFileSystem,
                                                         clock: FakeClock) -> None:
    entry = store.begin(KEY, shared=False, description="Aggregate\n  [id]\tJoin   x")
    assert (entry.state, entry.app_id, entry.created_at, entry.shared) == \
        (TableState.PENDING, APP, clock.now, False)
    assert entry.description == "Aggregate [id] Join x"
    assert fs.ops("pipe_file") == [("pipe_file", full(layout.entry_path(KEY)))]
    assert stored_state(st, KEY) == "pending"
    assert store.data_rel(entry) == f"tables/data/{KEY}/{entry.attempt}"
    assert not st.exists("tables/data") and not st.exists("tables/manifests")
    assert store.entries() == [entry] and store.lookup(KEY) is None


def test_begin_of_a_shared_table_records_the_user_before_the_entry(
        store: TableStore, fs: FailingFileSystem) -> None:
    store.begin(SHARED, shared=True)
    assert fs.ops("pipe_file") == [("pipe_file", full(layout.user_path(SHARED, APP))),
                                   ("pipe_file", full(layout.entry_path(SHARED)))]
    assert store.users(SHARED) == {APP}


def test_every_begin_is_a_new_attempt(store: TableStore) -> None:
    attempts = {store.begin(KEY, shared=False).attempt for _ in range(20)}
    assert len(attempts) == 20


def test_a_long_description_is_cut(store: TableStore) -> None:
    assert len(store.begin(KEY, shared=False, description="x" * 5000).description) == 200


def test_complete_writes_the_manifest_then_the_ready_entry(store: TableStore, st: Storage,
                                                           fs: FailingFileSystem) -> None:
    entry = store.begin(KEY, shared=False)
    write_parts(st, store.data_rel(entry), [3, 4])
    manifest = build_manifest(st, store.data_rel(entry), KEY, entry.attempt, "{}", threads=2)
    fs.reset_counts()
    ready = store.complete(entry, manifest)
    assert fs.ops("pipe_file") == [("pipe_file", full(layout.manifest_path(KEY))),
                                   ("pipe_file", full(layout.entry_path(KEY)))]
    assert (ready.state, ready.rows, ready.bytes) == (TableState.READY, 7, manifest.bytes)
    assert store.lookup(KEY) == (ready, manifest)
    assert store.usage() == manifest.bytes > 0


def test_complete_refuses_a_manifest_of_another_attempt(store: TableStore) -> None:
    entry = store.begin(KEY, shared=False)
    with pytest.raises(CacheError, match=f"cannot complete cached table {KEY}/{entry.attempt}"):
        store.complete(entry, Manifest(KEY, "other", (), "{}"))


def test_completing_a_discarded_table_is_refused(store: TableStore, fs: FailingFileSystem,
                                                 cleaner: ManualCleaner) -> None:
    entry = store.begin(KEY, shared=False)
    store.discard(entry, "invalidated")
    fs.reset_counts()
    with pytest.raises(TableStateError, match="cannot become ready: it is marked-for-deletion"):
        store.complete(entry, Manifest(KEY, entry.attempt, (), "{}"))
    cleaner.run_until_idle()
    with pytest.raises(TableReplaced, match="discarded or replaced"):
        store.complete(entry, Manifest(KEY, entry.attempt, (), "{}"))
    assert fs.calls["pipe_file"] == 1                        # only the discard's mark


def test_completing_after_another_application_took_the_key_is_refused(
        store: TableStore, st: Storage, clock: FakeClock) -> None:
    mine = store.begin(SHARED, shared=True)
    theirs = other(st, clock, "app-other").begin(SHARED, shared=True)
    with pytest.raises(TableReplaced, match=f"stored: {SHARED}/{theirs.attempt}, pending"):
        store.complete(mine, Manifest(SHARED, mine.attempt, (), "{}"))
    assert st.read_record(layout.entry_path(SHARED))["attempt"] == theirs.attempt
    assert not st.exists(layout.manifest_path(SHARED))


def test_completing_after_recovery_removed_the_entry_is_refused(
        store: TableStore, st: Storage, clock: FakeClock) -> None:
    entry = store.begin(KEY, shared=False)
    st.delete(layout.entry_path(KEY))                       # another application's gc
    with pytest.raises(TableReplaced, match="stored: no entry"):
        store.complete(entry, Manifest(KEY, entry.attempt, (), "{}"))


def test_failed_manifest_write_leaves_the_table_pending(store: TableStore, st: Storage,
                                                        fs: FailingFileSystem) -> None:
    entry = store.begin(KEY, shared=False)
    fs.fail("pipe_file", path="*/manifests/*")
    with pytest.raises(OutcomeUnknown):
        store.complete(entry, Manifest(KEY, entry.attempt, (), "{}"))
    assert stored_state(st, KEY) == "pending" and store.lookup(KEY) is None
    assert store.complete(entry, Manifest(KEY, entry.attempt, (), "{}")).state is \
        TableState.READY


def test_lookup_from_another_application_sees_the_ready_table(store: TableStore, st: Storage,
                                                              clock: FakeClock) -> None:
    ready, manifest = materialize(store, SHARED, shared=True)
    reader = other(st, clock, "app-reader")
    assert reader.lookup(SHARED) == (ready, manifest)
    assert reader.entries() == [ready]


@pytest.mark.parametrize("damage", ["entry bit", "manifest bit", "no manifest",
                                    "manifest of another attempt"])
def test_lookup_treats_a_bad_record_as_absent_and_names_it(
        store: TableStore, st: Storage, fs: FailingFileSystem, damage: str,
        caplog: pytest.LogCaptureFixture) -> None:
    materialize(store)
    target = layout.manifest_path(KEY) if damage != "entry bit" else layout.entry_path(KEY)
    if damage.endswith("bit"):
        raw = bytearray(fs.cat_file(full(target)))
        raw[raw.index(b'"key"') + 1] ^= 0x01                   # one flipped bit
        fs.pipe_file(full(target), bytes(raw))
    elif damage == "no manifest":
        st.delete(target)
    else:
        body = st.read_record(target)
        st.write_record(target, dict(body, attempt="0ld"))
    caplog.set_level(logging.WARNING)
    assert store.lookup(KEY) is None
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "treated as absent" in warning and st.url_of(target) in warning


# -- discard -----------------------------------------------------------------------------------


def test_discard_marks_durably_then_deletes_data_manifest_users_entry(
        store: TableStore, st: Storage, fs: FailingFileSystem, cleaner: ManualCleaner) -> None:
    ready, _ = materialize(store, SHARED, shared=True)
    fs.reset_counts()
    assert store.discard(ready, "invalidated") is True
    assert fs.calls == {}, "discard must return before touching storage"
    assert store.lookup(SHARED) is None, "a table being discarded is never handed out"
    cleaner.run_due()
    assert [(op, path) for op, path in fs.ops("pipe_file", "rm")] == [
        ("pipe_file", full(layout.entry_path(SHARED))),
        ("rm", full(layout.data_path(SHARED, ready.attempt))),
        ("rm", full(layout.manifest_path(SHARED))),
        ("rm", full(f"tables/users/{SHARED}")),
        ("rm", full(layout.entry_path(SHARED)))]
    mark = next(c for c in fs.log if c.op == "pipe_file")
    assert mark.data is not None
    body = records.decode_record(mark.data, "mark")
    assert (body["state"], body["discard_reason"]) == ("marked-for-deletion", "invalidated")
    assert fs.files(ROOT) == [] and store.entries() == [] and cleaner.errors == []


def test_a_second_discard_of_the_same_attempt_is_not_submitted(store: TableStore,
                                                               cleaner: ManualCleaner) -> None:
    ready, _ = materialize(store)
    assert store.discard(ready, "first") is True
    assert store.discard(ready, "second") is False
    assert [e.discard_reason for e in store.entries()] == ["first"]


def test_a_failing_data_delete_is_retried_until_it_succeeds(
        store: TableStore, st: Storage, fs: FailingFileSystem, clock: FakeClock,
        cleaner: ManualCleaner) -> None:
    ready, _ = materialize(store, rows=[1, 2, 3, 4])
    fs.reset_counts()
    fs.fail_partial_rm(after=2, path="*/tables/data/*")
    fs.fail("rm", times=2, path="*/tables/data/*")
    store.discard(ready, "invalidated")
    cleaner.run_due()
    assert [type(e) for _, e in cleaner.errors] == [StorageError]
    assert stored_state(st, KEY) == "marked-for-deletion"
    assert st.exists(layout.manifest_path(KEY)), "manifest deleted before its data was gone"
    clock.advance(0.5)
    assert cleaner.run_due() == 0                            # the fixed 1 s delay holds
    cleaner.run_until_idle()
    assert len(cleaner.errors) == 3
    assert fs.files(ROOT) == [] and fs.calls["pipe_file"] == 1, "marked once"


def test_denied_deletes_are_retried_by_the_real_cleaner_until_allowed(
        st: Storage, fs: FailingFileSystem, clock: FakeClock,
        real_cleaners: Callable[[RetryStrategy], RetryingCleaner[TableCleanup]]) -> None:  # noqa: F811
    cleaner = real_cleaners(RetryStrategy.fixed(0.01))
    store = make_store(st, cleaner, clock)
    ready, _ = materialize(store)
    fs.fail_paths("*/tables/data/*", ops=("rm", "rm_file"))
    store.discard(ready, "invalidated")
    assert until(lambda: fs.failures["rm"] >= 3)
    assert stored_state(st, KEY) == "marked-for-deletion"
    fs.allow()
    assert cleaner.wait_idle(5.0)
    assert fs.files(ROOT) == [] and store.entries() == []
    assert store.close(1.0) == []


def test_close_names_what_is_left_and_a_restart_finishes_it(
        st: Storage, fs: FailingFileSystem, clock: FakeClock,
        real_cleaners: Callable[[RetryStrategy], RetryingCleaner[TableCleanup]]) -> None:  # noqa: F811
    store = make_store(st, real_cleaners(RetryStrategy.no_retry()), clock)
    ready, _ = materialize(store)
    fs.fail_paths("*/tables/data/*", ops=("rm",))
    store.discard(ready, "stopped")
    assert until(lambda: bool(store.cleaner.given_up()))
    assert store.close(1.0) == [ready.id]
    assert stored_state(st, KEY) == "marked-for-deletion"

    fs.allow()
    restarted = other(st, clock, "app-next", APP)
    assert restarted.recover(HOUR) == RecoveryReport(discarding=[KEY])
    run(restarted)
    assert fs.files(ROOT) == []


# -- re-materialization --------------------------------------------------------------------------


def test_rematerializing_while_the_old_attempt_is_deleted_keeps_the_new_one(
        store: TableStore, st: Storage, fs: FailingFileSystem, cleaner: ManualCleaner) -> None:
    old, _ = materialize(store, SHARED, shared=True)
    store.discard(old, "files failed verification")
    new, manifest = materialize(store, SHARED, shared=True)    # before the cleaner ran
    cleaner.run_until_idle()
    assert not st.exists(layout.data_path(SHARED, old.attempt))
    assert store.lookup(SHARED) == (new, manifest)
    assert store.users(SHARED) == {APP}
    assert find_problem(st, store.data_rel(new), manifest, full=True) is None


def test_a_retried_discard_never_removes_a_newer_attempt(st: Storage, fs: FailingFileSystem,
                                                         clock: FakeClock) -> None:
    a = other(st, clock, "app-a")
    old, _ = materialize(a, SHARED, shared=True)
    fs.fail("rm", path=full(layout.entry_path(SHARED)), landed=True)  # reply lost
    a.discard(old, "invalidated")
    cast(ManualCleaner, a.cleaner).run_due()
    assert not st.exists(layout.entry_path(SHARED))
    b = other(st, clock, "app-b")
    new, manifest = materialize(b, SHARED, shared=True)
    clock.advance(1.0)
    run(a)                                                    # app-a retries its discard
    assert b.lookup(SHARED) == (new, manifest)
    assert b.users(SHARED) == {"app-b"}
    assert find_problem(st, b.data_rel(new), manifest, full=True) is None


def test_a_discard_that_finds_another_attempt_still_deletes_its_own_data(
        store: TableStore, st: Storage, fs: FailingFileSystem, clock: FakeClock) -> None:
    old, _ = materialize(store)
    fs.fail("pipe_file", path=full(layout.entry_path(KEY)))  # the mark fails once
    store.discard(old, "invalidated")
    cast(ManualCleaner, store.cleaner).run_due()
    newer = other(st, clock, "app-me").begin(KEY, shared=False)  # same key, another attempt
    run(store)
    assert not st.exists(layout.data_path(KEY, old.attempt))
    assert st.read_record(layout.entry_path(KEY))["attempt"] == newer.attempt
    assert stored_state(st, KEY) == "pending"


# -- shared tables -------------------------------------------------------------------------------


def test_a_shared_table_stays_while_a_live_user_remains(store: TableStore, st: Storage,
                                                        fs: FailingFileSystem,
                                                        clock: FakeClock) -> None:
    ready, manifest = materialize(store, SHARED, shared=True)
    reader = other(st, clock, "app-reader")
    found = reader.lookup(SHARED)
    assert found == (ready, manifest)
    reader.add_user(SHARED)
    assert store.users(SHARED) == {APP, "app-reader"}
    assert store.release(ready, "application stopped") is False
    run(store)
    assert store.users(SHARED) == {"app-reader"}
    assert store.entries() == [] and store.usage() == 0       # no longer this one's to count
    assert reader.lookup(SHARED) == (ready, manifest)
    assert find_problem(st, reader.data_rel(ready), manifest, full=True) is None

    assert reader.release(ready, "application stopped") is True
    run(reader)
    assert fs.files(full("tables")) == [] and reader.lookup(SHARED) is None


def test_release_counts_only_live_users(store: TableStore, st: Storage, clock: FakeClock,
                                        fs: FailingFileSystem) -> None:
    ready, _ = materialize(store, SHARED, shared=True)
    other(st, clock, "app-crashed").add_user(SHARED)
    store.is_dead = Liveness("app-crashed")
    assert store.release(ready, "application stopped") is True
    run(store)
    assert fs.files(full("tables")) == []


def test_releasing_a_private_table_discards_it(store: TableStore, fs: FailingFileSystem) -> None:
    ready, _ = materialize(store)
    assert store.release(ready, "invalidated") is True
    run(store)
    assert fs.files(ROOT) == []


# -- failover ----------------------------------------------------------------------------------


def test_a_crash_between_begin_and_complete_is_cleaned_by_the_next_attach(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    crashed = other(st, clock, "app-crashed")
    entry = crashed.begin(KEY, shared=False)
    write_parts(st, crashed.data_rel(entry), [5])            # died mid-write
    live = other(st, clock, "app-live")
    pending_live = live.begin("p-app-live-t2", shared=False)
    me = make_store(st, cleaner, clock, is_dead=Liveness("app-crashed"))
    report = me.recover(HOUR)
    assert report == RecoveryReport(kept=["p-app-live-t2"], discarding=[KEY])
    cleaner.run_until_idle()
    assert not st.exists(layout.entry_path(KEY)) and not st.exists(f"tables/data/{KEY}")
    assert stored_state(st, "p-app-live-t2") == "pending"
    assert live.lookup(pending_live.key) is None


def test_recover_keeps_ready_tables_of_live_applications_and_shared_ones_in_use(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    dead, live = other(st, clock, "app-dead"), other(st, clock, "app-live")
    materialize(dead, "p-app-dead-t1")
    kept_private, _ = materialize(live, "p-app-live-t1")
    in_use, _ = materialize(dead, SHARED, shared=True)
    live.add_user(SHARED)
    abandoned = shared_key("ab" * 16)
    materialize(dead, abandoned, shared=True)
    me = make_store(st, cleaner, clock, is_dead=Liveness("app-dead"))
    planned = me.recover(HOUR, dry_run=True)
    assert cleaner.outstanding() == []
    assert planned == RecoveryReport(kept=["p-app-live-t1", SHARED],
                                     discarding=["p-app-dead-t1", abandoned])
    assert me.recover(HOUR) == planned
    cleaner.run_until_idle()
    assert sorted(st.list_names("tables/entries")) == sorted(
        [f"{kept_private.key}.json", f"{in_use.key}.json"])
    assert sorted(st.list_names("tables/data")) == sorted([kept_private.key, in_use.key])
    assert st.list_names("tables/users") == [SHARED]


def test_corrupt_entry_is_reported_and_its_key_left_alone(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    dead = other(st, clock, "app-dead")
    entry = dead.begin(KEY, shared=False)
    write_parts(st, dead.data_rel(entry), [1])
    st.write_atomic(layout.entry_path(KEY), b'{"format": 1, "body": {"sta')
    clock.advance(2 * HOUR)
    me = make_store(st, cleaner, clock, is_dead=Liveness("app-dead"))
    report = me.recover(HOUR)
    assert report == RecoveryReport(corrupt=[f"tables/entries/{KEY}.json"])
    cleaner.run_until_idle()
    assert st.exists(dead.data_rel(entry)) and st.exists(layout.entry_path(KEY))


def test_orphans_older_than_the_grace_go_younger_ones_stay(
        store: TableStore, st: Storage, fs: FailingFileSystem, clock: FakeClock,
        cleaner: ManualCleaner) -> None:
    ready, _ = materialize(store)
    stale_attempt = f"tables/data/{KEY}/0ld"                  # of no entry's attempt
    write_parts(st, stale_attempt, [1])
    no_entry = "tables/data/p-app-gone-t9"
    write_parts(st, f"{no_entry}/a1", [1])
    st.write_record(layout.manifest_path("p-app-gone-t9"), {"format": "x"})
    st.write_record(layout.user_path(SHARED, "app-gone"), {"app_id": "app-gone"})
    st.write_atomic(f"tables/entries/.{KEY}.json.tmp-{'0' * 32}", b"torn")
    clock.advance(HOUR - 1)
    young = "tables/data/p-app-young-t1"
    write_parts(st, f"{young}/a1", [1])
    assert store.recover(HOUR).orphans == []
    clock.advance(1.0)
    report = store.recover(HOUR)
    assert sorted(report.orphans) == sorted([
        stale_attempt, no_entry, f"tables/entries/.{KEY}.json.tmp-{'0' * 32}",
        layout.manifest_path("p-app-gone-t9"), f"tables/users/{SHARED}"])
    assert report.kept == [KEY]
    cleaner.run_until_idle()
    assert st.list_names("tables/data") == sorted([KEY, "p-app-young-t1"])
    assert st.list_names(f"tables/data/{KEY}") == [ready.attempt]
    assert st.list_names("tables/entries") == [f"{KEY}.json"]
    assert st.list_names("tables/manifests") == [f"{KEY}.json"]
    assert st.list_names("tables/users") == []


def test_the_current_attempt_of_a_pending_table_is_never_an_orphan(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    writer = other(st, clock, "app-live")
    entry = writer.begin(KEY, shared=False)
    write_parts(st, writer.data_rel(entry), [1])
    clock.advance(30 * 24 * HOUR)
    me = make_store(st, cleaner, clock)
    assert me.recover(HOUR) == RecoveryReport(kept=[KEY])


# -- manifests ---------------------------------------------------------------------------------


@pytest.fixture
def folder(local_storage: Storage) -> str:
    names = write_parts(local_storage, "tables/data/k/a1", [3, 0, 5])
    assert len(names) == 3
    return "tables/data/k/a1"


def built(st: Storage, folder: str) -> Manifest:
    return build_manifest(st, folder, "p-x-t1", "a1", '{"fields":[]}', threads=3)


def path_of(st: Storage, folder: str, index: int) -> Path:
    return Path(st.path(f"{folder}/part-{index:05d}-c000.snappy.parquet"))


def test_manifest_records_every_data_file_and_skips_spark_side_files(local_storage: Storage,
                                                                     folder: str) -> None:
    (Path(local_storage.path(folder)) / "_temporary").mkdir()
    (Path(local_storage.path(folder)) / "_temporary" / "x").write_bytes(b"junk")
    manifest = built(local_storage, folder)
    assert [f.name for f in manifest.files] == [
        f"part-{i:05d}-c000.snappy.parquet" for i in range(3)]
    assert [f.rows for f in manifest.files] == [3, 0, 5] and manifest.rows == 8
    for i, f in enumerate(manifest.files):
        data = path_of(local_storage, folder, i).read_bytes()
        assert (f.size, f.crc32c) == (len(data), format_crc(crc32c_of(data)))
        assert f.modified == os.stat(path_of(local_storage, folder, i)).st_mtime
    assert manifest.bytes == sum(f.size for f in manifest.files)
    assert Manifest.from_dict(manifest.to_dict()) == manifest


def test_a_fresh_manifest_passes_both_checks(local_storage: Storage, folder: str) -> None:
    manifest = built(local_storage, folder)
    assert find_problem(local_storage, folder, manifest, full=False) is None
    assert find_problem(local_storage, folder, manifest, full=True) is None


def test_an_empty_folder_gives_an_empty_manifest(local_storage: Storage) -> None:
    manifest = build_manifest(local_storage, "tables/data/k/none", "p-x-t1", "a1", "{}", 2)
    assert manifest.files == () and manifest.rows == 0
    assert find_problem(local_storage, "tables/data/k/none", manifest, full=True) is None


def test_a_file_that_is_not_parquet_is_named(local_storage: Storage, folder: str) -> None:
    local_storage.write_atomic(f"{folder}/part-00009.parquet", b"not parquet at all")
    with pytest.raises(ManifestError, match="part-00009.parquet is not readable Parquet"):
        built(local_storage, folder)


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-10])


def _rewrite_same_size(p: Path) -> None:
    data = p.read_bytes()
    stat = p.stat()
    p.write_bytes(data[::-1])
    os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))


@pytest.mark.parametrize("damage,expected", [
    (lambda p: p.unlink(), "part-00001-c000.snappy.parquet is missing"),
    (_truncate,
     r"part-00001-c000.snappy.parquet is \d+ bytes, the manifest says \d+ \(truncated"),
    (_rewrite_same_size, "part-00001-c000.snappy.parquet was rewritten after it was "
                         "materialized"),
    (lambda p: p.with_name("part-00007.parquet").write_bytes(parquet(1)),
     "part-00007.parquet is not in the manifest of p-x-t1/a1"),
])
def test_the_quick_check_names_the_damaged_file(local_storage: Storage, folder: str,
                                                damage: Callable[[Path], Any],
                                                expected: str) -> None:
    manifest = built(local_storage, folder)
    damage(path_of(local_storage, folder, 1))
    for thorough in (False, True):
        problem = find_problem(local_storage, folder, manifest, full=thorough)
        assert problem is not None
        assert len(problem.splitlines()) == 1
        assert re.search(expected, problem), problem


def test_one_byte_changed_in_place_is_caught_only_by_the_full_check(local_storage: Storage,
                                                                    folder: str) -> None:
    manifest = built(local_storage, folder)
    target = path_of(local_storage, folder, 2)
    stat = target.stat()
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    target.write_bytes(bytes(raw))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert find_problem(local_storage, folder, manifest, full=False) is None
    problem = find_problem(local_storage, folder, manifest, full=True)
    assert problem is not None and "part-00002-c000.snappy.parquet fails verification" in problem


def test_the_quick_check_is_one_listing_and_reads_no_file(
        st: Storage, fs: FailingFileSystem, monkeypatch: pytest.MonkeyPatch) -> None:
    write_parts(st, "tables/data/k/a1", [2, 2, 2, 2])
    manifest = build_manifest(st, "tables/data/k/a1", "p-x-t1", "a1", "{}", threads=4)
    opened: list[str] = []
    real_open = Storage.open_read

    def open_read(self: Storage, rel: str) -> Any:
        opened.append(rel)
        return real_open(self, rel)

    monkeypatch.setattr(Storage, "open_read", open_read)
    fs.reset_counts()
    assert find_problem(st, "tables/data/k/a1", manifest, full=False) is None
    assert fs.calls["find"] == 1 and fs.calls["cat_file"] == 0 and opened == []
    assert find_problem(st, "tables/data/k/a1", manifest, full=True) is None
    assert len(opened) == 4


def test_the_quick_check_sees_a_change_on_storage_with_listing_caches(
        st: Storage, fs: FailingFileSystem) -> None:
    write_parts(st, "tables/data/k/a1", [2])
    manifest = build_manifest(st, "tables/data/k/a1", "p-x-t1", "a1", "{}", threads=1)
    st.delete("tables/data/k/a1/part-00000-c000.snappy.parquet")
    assert "is missing" in str(find_problem(st, "tables/data/k/a1", manifest, full=False))


def test_manifest_totals_go_into_the_entry_on_local_storage(local_storage: Storage,
                                                            clock: FakeClock) -> None:
    cleaner = ManualCleaner(RetryStrategy.fixed(1.0), clock)
    store = make_store(local_storage, cleaner, clock)
    ready, manifest = materialize(store, rows=[10, 20])
    assert (ready.rows, ready.bytes) == (30, manifest.bytes)
    assert find_problem(local_storage, store.data_rel(ready), manifest, full=True) is None
    store.discard(ready, "invalidated")
    cleaner.run_until_idle()
    assert not any(local_storage.walk_files("tables"))
    assert local_storage.list_names("tables/data") == []
