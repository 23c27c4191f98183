"""CheckpointStore on a filesystem that fails on command: durable pending entries, the discard
order (mark → data → artifact → entry), retries, give-up and restart, failover, orphans,
corrupt entries, number allocation.

Most tests drive cleanup deterministically with :class:`ManualCleaner` (the cleaner's contract
on the real :class:`CleanupSchedule`, without threads) and the fake clock; a few run the real
:class:`RetryingCleaner` with a fast fixed-delay strategy.
"""

from __future__ import annotations

import logging
import posixpath
import time
import uuid
from typing import Any, Callable, cast

import threading

import pytest

from spark_steward import records
from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import EntryKey, RetryingCleaner
from spark_steward.errors import (CheckpointError, CheckpointNotFound, OutcomeUnknown,
                                  StorageError)
from spark_steward.checkpoint.lifecycle import CheckpointEntry, CheckpointKind, CheckpointState
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.recovery import RecoveryReport
from spark_steward.storage import Storage
from tests.unit.conftest import FakeClock, Liveness, ManualCleaner, until
from tests.unit.failing_fs import FailingFileSystem, denied, failing_storage

APP = "app-me"
ROOT = "/steward"
HOUR = 3600.0


# -- harness -----------------------------------------------------------------------------------


def make_store(st: Storage, cleaner: ManualCleaner | RetryingCleaner[CheckpointCleanup], clock: FakeClock,
               app: str = APP, is_dead: Callable[[str], bool] = Liveness(),
               **kwargs: Any) -> CheckpointStore:
    return CheckpointStore(st, app, cast(RetryingCleaner[CheckpointCleanup], cleaner), is_dead=is_dead,
                           clock=clock, **kwargs)


def full(rel: str) -> str:
    return f"{ROOT}/{rel}"


def E(series: str, number: int) -> str:  # noqa: N802 - the three layout paths, short
    return layout.entry_path(series, number)


def A(series: str, number: int) -> str:  # noqa: N802
    return layout.artifact_path(series, number)


def D(series: str, number: int) -> str:  # noqa: N802
    return layout.data_path(series, number)


def write_data(fs: FailingFileSystem, entry: CheckpointEntry, files: int = 3) -> list[str]:
    """What the executors would write for ``entry``."""
    paths = [full(f"{entry.data}/part-{i:05d}") for i in range(files)]
    for path in paths:
        fs.pipe_file(path, b"row\n" * 10)
    return paths


def state_of(st: Storage, series: str, number: int) -> str:
    return str(st.read_record(E(series, number))["state"])


def numbers(st: Storage, folder: str, series: str) -> list[int]:
    return sorted(n for n in (layout.parse_number(x) for x in
                              st.list_names(f"{folder}/{series}")) if n is not None)


def completed(store: CheckpointStore, fs: FailingFileSystem, series: str = "orders",
              files: int = 3, **kwargs: Any) -> CheckpointEntry:
    entry = store.begin(series)
    write_data(fs, entry, files)
    return store.complete(entry, {"format": "test/1", "number": entry.number}, **kwargs)


def opener(fs: FailingFileSystem) -> Callable[[str], tuple[Storage, str]]:
    """``open_url`` for Spark's own checkpoints (absolute URLs) on the same failing fs."""
    def open_url(url: str) -> tuple[Storage, str]:
        parent, name = posixpath.split(url.rstrip("/"))
        return Storage(fs, "/" + parent.split("://", 1)[1], parent), name
    return open_url


@pytest.fixture
def store(st: Storage, cleaner: ManualCleaner, clock: FakeClock) -> CheckpointStore:
    return make_store(st, cleaner, clock)


# -- the failing filesystem does what these tests rely on ------------------------------------


def test_failing_fs_fails_counts_and_recovers(st: Storage, fs: FailingFileSystem) -> None:
    st.write_record("a/b.json", {"x": 1})
    fs.fail("rm", times=2, error=denied)
    for _ in range(2):
        with pytest.raises(StorageError, match="permission denied"):
            st.delete("a")
    assert st.delete("a") is True and fs.files(ROOT) == []
    assert (fs.calls["rm"], fs.failures["rm"]) == (3, 2)


def test_failing_fs_partial_rm_removes_some_files_then_raises(st: Storage,
                                                              fs: FailingFileSystem) -> None:
    for i in range(5):
        fs.pipe_file(full(f"d/f{i}"), b"x")
    fs.fail_partial_rm(after=2)
    with pytest.raises(StorageError):
        st.delete("d")
    assert len(fs.files(full("d"))) == 3
    assert st.delete("d") is True and fs.files(full("d")) == []


def test_failing_fs_landed_failure_takes_effect_then_raises(st: Storage,
                                                            fs: FailingFileSystem) -> None:
    st.write_record("r.json", {"x": 1})
    fs.fail("rm", landed=True)
    with pytest.raises(StorageError):
        st.delete("r.json")
    assert not st.exists("r.json")


def test_failing_fs_path_rules_and_private_store(st: Storage, fs: FailingFileSystem,
                                                 clock: FakeClock) -> None:
    fs.fail_paths("*/locked/*")
    with pytest.raises(OutcomeUnknown):
        st.write_record("locked/x.json", {})
    st.write_record("open/x.json", {})
    fs.allow()
    st.write_record("locked/x.json", {})
    assert st.last_modified("open") == clock.now
    assert FailingFileSystem().files() == []          # nothing shared between instances


# -- begin / complete --------------------------------------------------------------------------


def test_begin_writes_the_pending_entry_before_returning(store: CheckpointStore, st: Storage,
                                                         fs: FailingFileSystem,
                                                         clock: FakeClock) -> None:
    entry = store.begin("orders")
    assert (entry.number, entry.state, entry.app_id, entry.kind, entry.data) == \
        (1, CheckpointState.PENDING, APP, CheckpointKind.SERIES, D("orders", 1))
    assert fs.ops("pipe_file", "mv") == [("pipe_file", full(E("orders", 1)))]
    body = st.read_record(E("orders", 1))
    assert (body["state"], body["app_id"], body["created_at"]) == ("pending", APP, clock.now)
    assert body["data"] == "checkpoints/data/orders/0000000001"
    assert fs.files(full("checkpoints/data")) == [] and fs.files(full("checkpoints/artifacts")) == []
    assert store.entries() == [entry]


def test_begin_numbers_each_series_on_its_own(store: CheckpointStore) -> None:
    assert [store.begin("orders").number for _ in range(3)] == [1, 2, 3]
    assert store.begin("users").number == 1


@pytest.mark.parametrize("name", ["../x", "a/b", "_hidden", "", "orders "])
def test_begin_rejects_bad_series_without_writing(store: CheckpointStore, fs: FailingFileSystem,
                                                  name: str) -> None:
    with pytest.raises(CheckpointError, match="is not valid"):
        store.begin(name)
    assert fs.calls["pipe_file"] == 0


def test_begin_whose_entry_write_failed_registers_nothing(store: CheckpointStore,
                                                          fs: FailingFileSystem) -> None:
    fs.fail("pipe_file")
    with pytest.raises(OutcomeUnknown, match="entries/orders/0000000001.json"):
        store.begin("orders")
    assert store.entries() == [] and fs.files(ROOT) == []
    assert store.begin("orders").number == 1


def test_begin_whose_write_landed_despite_the_error_does_not_reuse_the_number(
        store: CheckpointStore, st: Storage, fs: FailingFileSystem) -> None:
    fs.fail("pipe_file", landed=True)
    with pytest.raises(OutcomeUnknown):
        store.begin("orders")
    assert state_of(st, "orders", 1) == "pending"
    assert store.begin("orders").number == 2


def test_complete_writes_the_artifact_then_the_entry(store: CheckpointStore, st: Storage,
                                                     fs: FailingFileSystem,
                                                     clock: FakeClock) -> None:
    entry = store.begin("orders")
    write_data(fs, entry)
    clock.advance(5.0)
    fs.reset_counts()
    done = store.complete(entry, {"format": "test/1", "files": 3}, rows=30, bytes_=120, files=3)
    assert fs.ops("pipe_file") == [("pipe_file", full(A("orders", 1))),
                                   ("pipe_file", full(E("orders", 1)))]
    body = st.read_record(E("orders", 1))
    assert (body["state"], body["rows"], body["bytes"], body["files"], body["completed_at"]) == \
        ("completed", 30, 120, 3, clock.now)
    assert store.metadata.read_artifact("orders", 1) == {"format": "test/1", "files": 3}
    assert store.latest("orders") == done == store.get_completed("orders", 1)


def test_complete_without_artifact_writes_only_the_entry(store: CheckpointStore,
                                                         fs: FailingFileSystem) -> None:
    entry = store.begin("orders")
    fs.reset_counts()
    store.complete(entry)
    assert fs.ops("pipe_file") == [("pipe_file", full(E("orders", 1)))]


def test_failed_artifact_write_leaves_the_checkpoint_pending(store: CheckpointStore, st: Storage,
                                                             fs: FailingFileSystem) -> None:
    entry = store.begin("orders")
    fs.fail("pipe_file", path="*/artifacts/*")
    with pytest.raises(OutcomeUnknown):
        store.complete(entry, {"format": "test/1"})
    assert state_of(st, "orders", 1) == "pending"
    assert [e.state for e in store.entries()] == [CheckpointState.PENDING]
    with pytest.raises(CheckpointNotFound, match="'orders'"):
        store.latest("orders")
    assert store.complete(entry, {"format": "test/1"}).state is CheckpointState.COMPLETED
    assert state_of(st, "orders", 1) == "completed"


def test_completing_twice_names_the_checkpoint(store: CheckpointStore) -> None:
    entry = store.begin("orders")
    store.complete(entry)
    with pytest.raises(CheckpointError, match="orders/1 cannot complete: it is completed"):
        store.complete(entry)


def test_completing_a_discarded_checkpoint_is_refused(store: CheckpointStore,
                                                      fs: FailingFileSystem) -> None:
    entry = store.begin("orders")
    store.discard(entry, "application stopped")
    fs.reset_counts()
    with pytest.raises(CheckpointError, match="orders/1.*marked-for-deletion"):
        store.complete(entry, {"format": "test/1"})
    assert fs.calls["pipe_file"] == 0


def test_get_completed_of_an_unknown_number_lists_what_is_known(store: CheckpointStore) -> None:
    store.complete(store.begin("orders"))
    store.begin("orders")
    with pytest.raises(CheckpointNotFound, match=r"orders/7 .*known: 1 \(completed\), "
                                                 r"2 \(pending\)"):
        store.get_completed("orders", 7)


# -- subsumption -------------------------------------------------------------------------------


def test_subsume_with_retained_2_discards_the_oldest(store: CheckpointStore, st: Storage,
                                                     fs: FailingFileSystem,
                                                     cleaner: ManualCleaner) -> None:
    for _ in range(2):
        completed(store, fs, retained=2)
    assert cleaner.outstanding() == []
    completed(store, fs, retained=2)
    assert cleaner.outstanding() == [EntryKey("orders", 1)]
    cleaner.run_until_idle()
    assert numbers(st, layout.ENTRIES, "orders") == [2, 3]
    assert numbers(st, layout.ARTIFACTS, "orders") == [2, 3]
    assert numbers(st, layout.DATA, "orders") == [2, 3]
    assert [e.number for e in store.completed("orders")] == [2, 3]
    with pytest.raises(CheckpointNotFound, match="orders/1"):
        store.get_completed("orders", 1)


def test_subsume_returns_what_it_discards_and_leaves_pending_alone(
        store: CheckpointStore, st: Storage, fs: FailingFileSystem,
        cleaner: ManualCleaner) -> None:
    for _ in range(3):
        completed(store, fs)
    store.begin("orders")                                  # 4, pending
    assert [e.number for e in store.subsume("orders", 1)] == [1, 2]
    cleaner.run_until_idle()
    assert numbers(st, layout.ENTRIES, "orders") == [3, 4]
    assert state_of(st, "orders", 4) == "pending"
    assert store.subsume("orders", 1) == []


# -- discard -----------------------------------------------------------------------------------


def test_discard_marks_durably_then_deletes_data_then_artifact_then_entry(
        store: CheckpointStore, st: Storage, fs: FailingFileSystem,
        cleaner: ManualCleaner) -> None:
    entry = completed(store, fs)
    fs.reset_counts()
    assert store.discard(entry, "no longer needed") is True
    assert fs.calls == {}, "discard must return before touching storage"
    cleaner.run_due()
    assert fs.ops("pipe_file", "rm") == [("pipe_file", full(E("orders", 1))),
                                         ("rm", full(D("orders", 1))),
                                         ("rm", full(A("orders", 1))),
                                         ("rm", full(E("orders", 1)))]
    mark = next(c for c in fs.log if c.op == "pipe_file")
    assert mark.data is not None
    body = records.decode_record(mark.data, "mark")
    assert (body["state"], body["discard_reason"]) == ("marked-for-deletion", "no longer needed")
    assert fs.files(ROOT) == []
    assert store.entries() == [] and cleaner.errors == []


def test_discard_of_an_outstanding_checkpoint_is_not_submitted_twice(
        store: CheckpointStore, fs: FailingFileSystem, cleaner: ManualCleaner) -> None:
    entry = completed(store, fs)
    assert store.discard(entry, "first") is True
    assert store.discard(entry, "second") is False
    assert [e.discard_reason for e in store.entries()] == ["first"]
    cleaner.run_until_idle()
    assert fs.files(ROOT) == []


def test_discarding_again_after_it_finished_ends_clean(store: CheckpointStore,
                                                       fs: FailingFileSystem,
                                                       cleaner: ManualCleaner) -> None:
    entry = completed(store, fs)
    store.discard(entry, "first")
    cleaner.run_until_idle()
    assert store.discard(entry, "again") is True
    cleaner.run_until_idle()
    assert fs.files(ROOT) == [] and store.entries() == [] and cleaner.errors == []


def test_partial_data_delete_is_finished_by_the_retry(store: CheckpointStore, st: Storage,
                                                      fs: FailingFileSystem, clock: FakeClock,
                                                      cleaner: ManualCleaner) -> None:
    entry = completed(store, fs, files=5)
    fs.reset_counts()
    fs.fail_partial_rm(after=2, path="*/checkpoints/data/*")
    store.discard(entry, "subsumed")
    cleaner.run_due()
    assert [type(e) for _, e in cleaner.errors] == [StorageError]
    assert len(fs.files(full(D("orders", 1)))) == 3
    assert state_of(st, "orders", 1) == "marked-for-deletion"
    assert st.exists(A("orders", 1)), "artifact deleted before its data was gone"
    clock.advance(0.5)
    assert cleaner.run_due() == 0                          # the fixed 1 s delay holds
    clock.advance(0.5)
    assert cleaner.run_due() == 1
    assert fs.files(ROOT) == []
    assert fs.calls["pipe_file"] == 1, "the durable mark is written once"


def test_failed_mark_deletes_nothing_and_is_retried(store: CheckpointStore, st: Storage,
                                                    fs: FailingFileSystem, clock: FakeClock,
                                                    cleaner: ManualCleaner) -> None:
    entry = completed(store, fs)
    fs.fail("pipe_file", times=2)
    store.discard(entry, "subsumed")
    cleaner.run_due()
    assert state_of(st, "orders", 1) == "completed"
    assert fs.calls["rm"] == 0 and len(fs.files(full(D("orders", 1)))) == 3
    cleaner.run_until_idle()
    assert fs.files(ROOT) == []
    assert len(cleaner.errors) == 2


def test_permission_denied_deletes_are_retried_until_allowed(
        st: Storage, fs: FailingFileSystem, clock: FakeClock,
        real_cleaners: Callable[[RetryStrategy], RetryingCleaner[CheckpointCleanup]]) -> None:
    cleaner = real_cleaners(RetryStrategy.fixed(0.01))
    store = make_store(st, cleaner, clock)
    entry = completed(store, fs)
    fs.fail_paths("*/checkpoints/data/*", ops=("rm", "rm_file"))
    store.discard(entry, "subsumed")
    assert until(lambda: fs.failures["rm"] >= 3)
    assert state_of(st, "orders", 1) == "marked-for-deletion"
    assert st.exists(A("orders", 1)) and len(fs.files(full(D("orders", 1)))) == 3
    fs.allow()
    assert cleaner.wait_idle(5.0)
    assert fs.files(ROOT) == [] and store.entries() == []
    stats = cleaner.stats()
    assert stats["failures"] == fs.failures["rm"] and stats["attempts"] == stats["failures"] + 1
    assert store.close(1.0) == []


def test_exactly_three_denied_deletes_take_four_attempts(
        st: Storage, fs: FailingFileSystem, clock: FakeClock,
        real_cleaners: Callable[[RetryStrategy], RetryingCleaner[CheckpointCleanup]]) -> None:
    cleaner = real_cleaners(RetryStrategy.fixed(0.01))
    store = make_store(st, cleaner, clock)
    entry = completed(store, fs)
    fs.fail("rm", times=3, error=denied, path="*/checkpoints/data/*")
    store.discard(entry, "subsumed")
    assert cleaner.wait_idle(5.0)
    assert cleaner.stats() == {"attempts": 4, "failures": 3, "outstanding": 0, "given_up": 0}
    assert fs.files(ROOT) == []


def test_none_strategy_leaves_the_mark_and_a_restart_finishes_it(
        st: Storage, fs: FailingFileSystem, clock: FakeClock,
        real_cleaners: Callable[[RetryStrategy], RetryingCleaner[CheckpointCleanup]]) -> None:
    cleaner = real_cleaners(RetryStrategy.no_retry())
    store = make_store(st, cleaner, clock)
    entry = completed(store, fs)
    fs.fail_paths("*/checkpoints/data/*", ops=("rm",))
    store.discard(entry, "subsumed")
    assert cleaner.wait_idle(5.0)
    assert list(cleaner.given_up()) == [EntryKey("orders", 1)]
    assert "permission denied" in cleaner.given_up()[EntryKey("orders", 1)]
    assert cleaner.stats()["attempts"] == 1
    assert state_of(st, "orders", 1) == "marked-for-deletion"
    assert st.exists(A("orders", 1)) and len(fs.files(full(D("orders", 1)))) == 3
    assert store.close(1.0) == ["orders/1"]

    # The next application (this one is gone) finishes the discard at attach.
    fs.allow()
    fs.reset_counts()
    after = ManualCleaner(RetryStrategy.no_retry(), clock)
    restarted = make_store(st, after, clock, app="app-next", is_dead=Liveness(APP))
    report = restarted.recover(HOUR)
    assert report == RecoveryReport(kept=[], discarding=["orders/1"], orphans=[], corrupt=[])
    after.run_until_idle()
    assert fs.files(ROOT) == [] and restarted.entries() == []
    assert fs.calls["pipe_file"] == 0, "an entry marked in storage is not marked again"


def test_discard_interrupted_before_the_entry_removal_is_finished_at_restart(
        st: Storage, fs: FailingFileSystem, clock: FakeClock) -> None:
    once = ManualCleaner(RetryStrategy.no_retry(), clock)
    store = make_store(st, once, clock)
    entry = completed(store, fs)
    fs.fail("rm", path=full(E("orders", 1)))
    store.discard(entry, "subsumed")
    once.run_until_idle()
    assert fs.files(ROOT) == [full(E("orders", 1))]      # data and artifact already gone
    assert state_of(st, "orders", 1) == "marked-for-deletion"
    again = ManualCleaner(RetryStrategy.no_retry(), clock)
    restarted = make_store(st, again, clock, app="app-next", is_dead=Liveness(APP))
    assert restarted.recover(HOUR).discarding == ["orders/1"]
    again.run_until_idle()
    assert fs.files(ROOT) == [] and again.errors == []


def test_close_returns_the_ids_left_outstanding(
        st: Storage, fs: FailingFileSystem, clock: FakeClock,
        real_cleaners: Callable[[RetryStrategy], RetryingCleaner[CheckpointCleanup]]) -> None:
    cleaner = real_cleaners(RetryStrategy.fixed(HOUR))
    store = make_store(st, cleaner, clock)
    entry = completed(store, fs)
    fs.pipe_file(full(f"{D('other', 9)}/part-00000"), b"x")
    clock.advance(2 * HOUR)
    fs.fail_paths("*/checkpoints/data/*", ops=("rm",))
    assert store.recover(HOUR).orphans == [D("other", 9)]
    store.discard(entry, "subsumed")
    assert until(lambda: fs.failures["rm"] >= 2)
    started = time.monotonic()
    assert sorted(store.close(0.2)) == [D("other", 9), "orders/1"]
    assert time.monotonic() - started < 3.0
    assert state_of(st, "orders", 1) == "marked-for-deletion"


def test_close_with_nothing_outstanding_returns_nothing(store: CheckpointStore,
                                                        fs: FailingFileSystem,
                                                        cleaner: ManualCleaner) -> None:
    store.discard(completed(store, fs), "subsumed")
    cleaner.run_until_idle()
    assert store.close(0) == []


# -- failover ----------------------------------------------------------------------------------


def test_recover_cleans_dead_pending_and_keeps_live_pending_and_completed(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    dead = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-dead")
    live = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-live")
    write_data(fs, dead.begin("orders"))                   # orders/1: pending, owner dead
    completed(dead, fs)                                    # orders/2: completed, owner dead
    write_data(fs, live.begin("orders"))                   # orders/3: pending, owner alive
    liveness = Liveness("app-dead")
    me = make_store(st, cleaner, clock, is_dead=liveness)
    report = me.recover(HOUR)
    assert report == RecoveryReport(kept=["orders/2", "orders/3"], discarding=["orders/1"],
                                    orphans=[], corrupt=[])
    assert sorted(set(liveness.asked)) == ["app-dead", "app-live"]
    assert [e.id for e in me.entries()] == ["orders/1", "orders/2", "orders/3"]
    cleaner.run_until_idle()
    assert numbers(st, layout.ENTRIES, "orders") == [2, 3]
    assert numbers(st, layout.DATA, "orders") == [2, 3]
    assert numbers(st, layout.ARTIFACTS, "orders") == [2]
    assert state_of(st, "orders", 3) == "pending"
    assert [e.id for e in me.entries()] == ["orders/2", "orders/3"]
    assert me.latest("orders").number == 2                 # restorable by the next run


def test_recover_dry_run_reports_but_touches_nothing(st: Storage, fs: FailingFileSystem,
                                                     clock: FakeClock,
                                                     cleaner: ManualCleaner) -> None:
    dead = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-dead")
    write_data(fs, dead.begin("orders"))
    fs.pipe_file(full(f"{D('orders', 9)}/part-00000"), b"x")
    clock.advance(2 * HOUR)
    before = fs.files(ROOT)
    me = make_store(st, cleaner, clock, is_dead=Liveness("app-dead"))
    report = me.recover(HOUR, dry_run=True)
    assert report.discarding == ["orders/1"] and report.orphans == [D("orders", 9)]
    assert cleaner.outstanding() == []
    assert fs.files(ROOT) == before


def test_recover_cleans_spark_checkpoints_of_dead_applications(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    def spark_checkpoint(app: str, rdd: int) -> None:
        owner = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app=app,
                           open_url=opener(fs))
        url = f"memory://spark-ck/{app}/rdd-{rdd}"
        entry = owner.begin(f"_spark.{app}", kind=CheckpointKind.SPARK_RDD, data=url)
        fs.pipe_file(f"/spark-ck/{app}/rdd-{rdd}/part-00000", b"x")
        owner.complete(entry)
        assert owner.data_exists(entry)

    spark_checkpoint("app-dead", 7)
    spark_checkpoint("app-live", 3)
    me = make_store(st, cleaner, clock, is_dead=Liveness("app-dead"), open_url=opener(fs))
    report = me.recover(HOUR)
    assert report.discarding == ["_spark.app-dead/1"] and report.kept == ["_spark.app-live/1"]
    cleaner.run_until_idle()
    assert fs.files("/spark-ck") == ["/spark-ck/app-live/rdd-3/part-00000"]
    assert st.list_names(layout.ENTRIES) == ["_spark.app-live"]


def test_spark_checkpoint_urls_open_their_own_storage_by_default(
        memory_storage: Storage, clock: FakeClock) -> None:
    cleaner = ManualCleaner(RetryStrategy.fixed(1.0), clock)
    base = f"memory://ck-{uuid.uuid4().hex}"
    other = Storage.from_url(base)
    try:
        other.write_atomic("dir/rdd-7/part-00000", b"x")
        other.write_atomic("dir/rdd-8/part-00000", b"y")
        owner = make_store(memory_storage, cleaner, clock, app="app-dead")
        entry = owner.begin("_spark.app-dead", kind=CheckpointKind.SPARK_RDD,
                            data=f"{base}/dir/rdd-7")
        assert owner.data_exists(entry)
        me = make_store(memory_storage, cleaner, clock, is_dead=Liveness("app-dead"))
        assert me.recover(HOUR).discarding == ["_spark.app-dead/1"]
        cleaner.run_until_idle()
        assert not other.exists("dir/rdd-7") and other.exists("dir/rdd-8/part-00000")
        assert not owner.data_exists(entry)
    finally:
        other.fs.rm(other.root, recursive=True)


def test_orphans_older_than_the_grace_are_removed_younger_kept(
        store: CheckpointStore, st: Storage, fs: FailingFileSystem, clock: FakeClock,
        cleaner: ManualCleaner) -> None:
    fs.pipe_file(full(f"{D('orders', 5)}/part-00000"), b"x")       # written at t0
    st.write_record(A("orders", 5), {"format": "test/1"})
    fs.pipe_file(full(f"{D('orders', 7)}/part-00000"), b"x")       # old file ...
    clock.advance(100.0)
    fs.pipe_file(full(f"{D('orders', 6)}/part-00000"), b"x")       # t0 + 100
    fs.pipe_file(full(f"{D('orders', 7)}/part-00001"), b"x")       # ... and a young one
    clock.advance(50.0)
    report = store.recover(120.0)
    assert report.orphans == [D("orders", 5), A("orders", 5)]
    assert report.discarding == [] and report.kept == []
    cleaner.run_until_idle()
    assert numbers(st, layout.DATA, "orders") == [6, 7]
    assert numbers(st, layout.ARTIFACTS, "orders") == []


def test_orphan_at_exactly_the_grace_is_removed(store: CheckpointStore, fs: FailingFileSystem,
                                                clock: FakeClock) -> None:
    fs.pipe_file(full(f"{D('orders', 1)}/part-00000"), b"x")
    clock.advance(120.0)
    assert store.recover(120.0).orphans == [D("orders", 1)]


def test_data_owned_by_an_entry_is_never_an_orphan(st: Storage, fs: FailingFileSystem,
                                                   clock: FakeClock,
                                                   cleaner: ManualCleaner) -> None:
    live = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-live")
    write_data(fs, live.begin("orders"))
    completed(live, fs)
    clock.advance(30 * 24 * HOUR)
    me = make_store(st, cleaner, clock, is_dead=Liveness())
    report = me.recover(HOUR)
    assert report.orphans == [] and report.kept == ["orders/1", "orders/2"]
    cleaner.run_until_idle()
    assert numbers(st, layout.DATA, "orders") == [1, 2]


@pytest.mark.parametrize("flip", ["app-dead", "{"])
def test_corrupt_entry_is_reported_and_its_series_left_alone(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner,
        flip: str) -> None:
    dead = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-dead")
    write_data(fs, dead.begin("orders"))                   # would be discarded if readable
    path = full(E("orders", 1))
    raw = bytearray(fs.cat_file(path))
    raw[raw.index(flip.encode())] ^= 0x20                  # one flipped bit
    fs.pipe_file(path, bytes(raw))
    fs.pipe_file(full(f"{D('orders', 7)}/part-00000"), b"x")   # looks orphaned
    fs.pipe_file(full(f"{D('other', 3)}/part-00000"), b"x")    # is orphaned
    clock.advance(2 * HOUR)
    me = make_store(st, cleaner, clock, is_dead=Liveness("app-dead"))
    report = me.recover(HOUR)
    assert report.corrupt == ["checkpoints/entries/orders/0000000001.json"]
    assert report.discarding == [] and report.kept == []
    assert report.orphans == [D("other", 3)]
    cleaner.run_until_idle()
    assert fs.cat_file(path) == bytes(raw), "a corrupt entry is never touched"
    assert numbers(st, layout.DATA, "orders") == [1, 7]
    assert numbers(st, layout.DATA, "other") == []
    assert me.begin("orders").number == 8                  # nothing of the series is reused


# -- numbers -----------------------------------------------------------------------------------


def test_numbers_are_not_reused_within_a_store_after_a_discard(store: CheckpointStore,
                                                               fs: FailingFileSystem,
                                                               cleaner: ManualCleaner) -> None:
    completed(store, fs)
    second = completed(store, fs)
    store.discard(second, "test")
    cleaner.run_until_idle()
    assert fs.files(full("checkpoints/entries/orders")) == [full(E("orders", 1))]
    assert store.begin("orders").number == 3


@pytest.mark.parametrize("leftover", ["marked entry", "artifact", "data"])
def test_a_new_store_never_reuses_a_number_still_present(st: Storage, fs: FailingFileSystem,
                                                         clock: FakeClock, cleaner: ManualCleaner,
                                                         leftover: str) -> None:
    first = make_store(st, ManualCleaner(RetryStrategy.no_retry(), clock), clock, app="app-1")
    for _ in range(4):
        completed(first, fs)
    four = first.entries("orders")[-1]
    if leftover == "marked entry":               # discard given up after the data went
        fs.fail("rm", path=full(E("orders", 4)))
    elif leftover == "artifact":
        fs.fail("rm", path=full(A("orders", 4)))
    else:
        fs.fail("rm", path=full(D("orders", 4)))
    first.discard(four, "test")
    cast(ManualCleaner, first.cleaner).run_until_idle()
    assert 4 in (
        numbers(st, layout.ENTRIES, "orders") + numbers(st, layout.ARTIFACTS, "orders") +
        numbers(st, layout.DATA, "orders"))
    second = make_store(st, cleaner, clock, app="app-2")
    assert second.begin("orders").number == 5


def test_refresh_picks_up_checkpoints_another_application_added(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    me = make_store(st, cleaner, clock)
    other = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-2")
    completed(other, fs)
    with pytest.raises(CheckpointNotFound):
        me.latest("orders")
    me.refresh("orders")
    assert me.latest("orders").app_id == "app-2"
    assert me.begin("orders").number == 2


# -- defects found while writing these tests, fixed since -----------------------------------------


def test_a_failing_existence_check_never_lets_the_entry_go_before_the_data(
        store: CheckpointStore, st: Storage, fs: FailingFileSystem,
        cleaner: ManualCleaner) -> None:
    entry = completed(store, fs)
    fs.fail("info", times=1, path=full(D("orders", 1)))   # one stat fails (EIO / EACCES)
    store.discard(entry, "subsumed")
    cleaner.run_until_idle()
    data_left = fs.files(full(D("orders", 1)))
    assert data_left == [] or st.exists(E("orders", 1)), \
        f"entry removed while its data is still there: {data_left}"


def test_a_retried_discard_never_deletes_a_newer_checkpoint_with_the_same_number(
        st: Storage, fs: FailingFileSystem, clock: FakeClock) -> None:
    a_cleaner = ManualCleaner(RetryStrategy.fixed(1.0), clock)
    a = make_store(st, a_cleaner, clock, app="app-a")
    for _ in range(3):
        third = completed(a, fs)
    fs.fail("rm", path=full(E("orders", 3)), landed=True)  # the delete lands, the reply is lost
    a.discard(third, "subsumed")
    a_cleaner.run_due()
    assert not st.exists(E("orders", 3)) and len(a_cleaner.errors) == 1
    b = make_store(st, ManualCleaner(RetryStrategy.fixed(1.0), clock), clock, app="app-b")
    newer = b.begin("orders")
    write_data(fs, newer)
    b.complete(newer, {"format": "test/1"})
    clock.advance(1.0)
    a_cleaner.run_due()                                    # app-a retries its discard
    assert st.exists(E(newer.series, newer.number)), \
        f"app-a's retried discard deleted app-b's checkpoint {newer.id}"
    assert st.read_record(E(newer.series, newer.number))["app_id"] == "app-b"
    assert len(fs.files(full(D(newer.series, newer.number)))) == 3


def test_complete_racing_a_discard_never_leaves_a_completed_checkpoint_without_data(
        store: CheckpointStore, st: Storage, fs: FailingFileSystem,
        cleaner: ManualCleaner) -> None:
    entry = store.begin("orders")
    write_data(fs, entry)
    fired: list[str] = []
    stopper: list[threading.Thread] = []

    def discard_and_clean() -> None:
        store.discard(entry, "its application stopped before it completed")
        cleaner.run_due()

    def stop_meanwhile(path: str) -> None:      # spark.stop() on another thread
        if path == full(A("orders", 1)) and not fired:
            fired.append(path)
            stopper.append(threading.Thread(target=discard_and_clean))
            stopper[0].start()
            stopper[0].join(0.5)                # give it every chance to run in the gap

    fs.on("pipe_file", stop_meanwhile)
    try:
        store.complete(entry, {"format": "test/1"})
    except CheckpointError:
        pass                                    # refusing to complete is a fine outcome
    assert fired
    stopper[0].join(10)
    cleaner.run_until_idle()
    has_data = bool(fs.files(full(D("orders", 1))))
    if st.exists(E("orders", 1)):
        assert state_of(st, "orders", 1) != "completed" or has_data
    assert [e.id for e in store.completed("orders")] == ([] if not has_data else ["orders/1"])


def test_refresh_follows_another_applications_subsume_mark_and_removal(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner) -> None:
    reader = make_store(st, cleaner, clock, app="app-reader")
    writer_cleaner = ManualCleaner(RetryStrategy.fixed(1.0), clock)
    writer = make_store(st, writer_cleaner, clock, app="app-writer")
    first = completed(writer, fs)
    reader.refresh("orders")
    assert reader.latest("orders").number == 1
    second = completed(writer, fs)
    writer.subsume("orders", 1)                  # marks 1 in memory; the cleaner marks durably
    reader.refresh("orders")
    assert reader.latest("orders").number == second.number
    writer_cleaner.run_until_idle()              # 1 is gone from storage
    reader.refresh("orders")
    assert [e.number for e in reader.entries("orders")] == [second.number]
    assert first.key not in {e.key for e in reader.entries()}


def test_latest_warns_when_the_newest_entry_is_missing_and_returns_the_newest_readable(
        st: Storage, fs: FailingFileSystem, clock: FakeClock, cleaner: ManualCleaner,
        caplog: pytest.LogCaptureFixture) -> None:
    writer = make_store(st, cleaner, clock, app="app-writer")
    first = completed(writer, fs)
    completed(writer, fs)
    reader = make_store(st, cleaner, clock, app="app-reader")
    caplog.set_level(logging.WARNING, logger="spark_steward")
    reader.refresh("orders")
    assert reader.latest("orders").number == 2 and caplog.records == []

    st.delete(E("orders", 2))  # its data and artifact stay
    reader.refresh("orders")
    assert reader.latest("orders") == first
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    # Under the spark_steward logger, which the driver forwards to log4j (kernel/logs.py).
    assert warnings[0].name == "spark_steward.checkpoint.store"
    message = warnings[0].getMessage()
    assert "orders/2" in message and full(E("orders", 2)) in message, message
    assert "returning orders/1" in message, message

    st.delete(E("orders", 1))
    caplog.clear()
    reader.refresh("orders")
    with pytest.raises(CheckpointNotFound):
        reader.latest("orders")
    [warning] = caplog.records
    assert "orders/2, orders/1" in warning.getMessage()
    assert "no readable checkpoint is left" in warning.getMessage()


def test_files_the_executors_wrote_must_be_visible_before_a_checkpoint_completes(
        store: CheckpointStore, fs: FailingFileSystem) -> None:
    entry = store.begin("orders")
    write_data(fs, entry, files=2)
    wrote = {f"{entry.data}/part-{i:05d}": 40 for i in range(2)}
    store.require_visible(entry, wrote)                       # all there, all whole: no error
    store.require_visible(entry, {f"{entry.data}/part-00000": 10})   # at least that many bytes
    # What a host-local storage dir does: files written on other hosts' disks never show here.
    with pytest.raises(CheckpointError, match=r"orders#1: 2 of 4 file\(s\) the executors wrote "
                                              r"are not visible.*part-00002.*every host shares"):
        store.require_visible(entry, {**wrote, f"{entry.data}/part-00002": 1,
                                      f"{entry.data}/part-00003": 1})
    with pytest.raises(CheckpointError, match="1 of 1"):
        store.require_visible(entry, {f"{entry.data}/part-00001": 41})   # shorter than written
