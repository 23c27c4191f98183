"""The logical → physical reference relation of file-merged checkpoints (FLIP-306), pure and on
the real CheckpointStore over an injected in-memory storage.

The property: under any sequence of save, complete, abort, subsume, restore-and-reuse in another
application and crash, a physical file some live entry or unfinished save needs is never
deleted, and once every application is gone and ``gc`` ran, no file is left that no entry needs.
Nothing is counted: what is referenced is derived from the stored entries each time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, cast

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import RetryingCleaner
from spark_steward.checkpoint.merging import lifecycle as merging
from spark_steward.checkpoint.lifecycle import (CheckpointEntry, CheckpointKind,
                                                 CheckpointState, pending)
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.checkpoint.merging.lifecycle import Segment
from tests.unit.conftest import FakeClock, ManualCleaner
from tests.unit.failing_fs import FailingFileSystem, failing_storage

SERIES = "ranks"


def seg(partition: int, file: str, offset: int = 0, length: int = 10) -> Segment:
    return Segment(partition, file, offset, length, 1, "00000000", f"{file}@{offset}")


def entry(number: int, state: CheckpointState, physical: tuple[str, ...] = ()) -> CheckpointEntry:
    e = pending(SERIES, number, "app", CheckpointKind.SERIES,
                layout.merged_path(SERIES, number), 0.0, merged=True, reuses=physical)
    return replace(e, state=state)


def f(number: int, name: str = "h-0000.arrows") -> str:
    return f"{layout.merged_path(SERIES, number)}/{name}"


# -- the pure relation -------------------------------------------------------------------------


def test_a_file_is_deletable_only_when_no_live_entry_lists_it_and_no_pending_save_writes_there(
) -> None:
    files = [f(1), f(2), f(3), f(3, "h-0001.arrows"), f(4)]
    entries = [entry(1, CheckpointState.DISCARDING, (f(1),)),
               entry(2, CheckpointState.COMPLETED, (f(2),)),
               entry(3, CheckpointState.DISCARDING, (f(3),)),
               entry(5, CheckpointState.PENDING, (f(3, "h-0001.arrows"),)),
               entry(4, CheckpointState.COMPLETED, ())]
    assert merging.deletable_files(files, entries) == [f(1), f(3), f(4)]
    # a pending save protects everything in its own folder, listed or not
    assert merging.deletable_files([f(5, "x.arrows")], entries) == []


def test_amplification_counts_a_shared_segment_once() -> None:
    live = [seg(0, f(1), 0), seg(1, f(1), 10), seg(0, f(1), 0)]
    amp = merging.amplification({f(1): 40}, live)
    assert (amp.physical_bytes, amp.live_bytes, amp.ratio) == (40, 20, 2.0)
    assert merging.Amplification(0, 0).ratio == 1.0


def test_rewrites_take_the_most_wasteful_files_until_the_bound_holds() -> None:
    mine = [seg(0, f(1), 0, 10), seg(1, f(2), 0, 50), seg(2, f(3), 0, 100)]
    sizes = {f(1): 100, f(2): 100, f(3): 100}  # live shares 10%, 50%, 100%
    assert merging.choose_rewrites(sizes, mine, mine, 2.0) == []  # 300/160 is within
    assert merging.choose_rewrites(sizes, mine, mine, 1.5) == [f(1)]  # → 210/160
    assert merging.choose_rewrites(sizes, mine, mine, 1.2) == [f(1), f(2)]
    assert merging.choose_rewrites(sizes, mine, mine, 0.5) == []  # below 1: disabled
    # a file an older retained checkpoint also uses is not freed by copying: left alone
    older = [seg(5, f(1), 50, 40)]
    assert merging.choose_rewrites(sizes, older + mine, mine, 1.2) == [f(2)]


# -- the store under random histories ---------------------------------------------------------


@dataclass
class Save:
    app: str
    entry: CheckpointEntry
    segments: list[Segment]
    written: list[str] = field(default_factory=list)


class ReferenceMachine(RuleBasedStateMachine):
    """Applications sharing one series in one storage; each may crash at any point."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.storage, self.fs = failing_storage(FailingFileSystem(clock=self.clock))
        self.dead: set[str] = set()
        self.apps = itertools.count(1)
        self.stores: dict[str, tuple[CheckpointStore, ManualCleaner]] = {}
        self.saves: list[Save] = []
        self.app = self._start()

    def _start(self) -> str:
        app = f"app-{next(self.apps)}"
        cleaner = ManualCleaner(RetryStrategy.fixed(1.0, retries=None), self.clock)
        store = CheckpointStore(self.storage, app, cast(RetryingCleaner[CheckpointCleanup], cleaner),
                                is_dead=lambda a: a in self.dead, clock=self.clock)
        store.recover(0.0)
        self.stores[app] = (store, cleaner)
        return app

    def store(self) -> CheckpointStore:
        return self.stores[self.app][0]

    # -- what applications do --------------------------------------------------------------

    @rule(partitions=st.integers(0, 3), reuse=st.booleans(), files=st.integers(1, 2))
    def save(self, partitions: int, reuse: bool, files: int) -> None:
        store = self.store()
        store.refresh(SERIES)
        known: list[Segment] = []
        if reuse and store.completed(SERIES):
            latest = store.completed(SERIES)[-1]
            body = store.metadata.read_artifact(SERIES, latest.number)
            known = [Segment.from_json(s) for s in body["segments"]]
        entry = store.begin(SERIES, merged=True, reuses={s.file for s in known})
        save = Save(self.app, entry, list(known[:partitions]))
        for i in range(files):
            rel = f"{entry.data}/h-{i:04d}.arrows"
            self.storage.write_atomic(rel, b"x" * 20)
            save.written.append(rel)
        for p in range(len(save.segments), partitions + 1):
            save.segments.append(seg(p, save.written[p % files], 0, 5))
        self.saves.append(save)

    @precondition(lambda self: any(s.app == self.app for s in self.saves))
    @rule(retained=st.integers(1, 2), data=st.data())
    def complete(self, retained: int, data: Any) -> None:
        mine = [s for s in self.saves if s.app == self.app]
        save = data.draw(st.sampled_from(mine))
        self.saves.remove(save)
        self.store().complete(save.entry, {"segments": [s.to_json() for s in save.segments]},
                              retained=retained, physical={s.file for s in save.segments})

    @precondition(lambda self: any(s.app == self.app for s in self.saves))
    @rule(data=st.data())
    def abort(self, data: Any) -> None:
        save = data.draw(st.sampled_from([s for s in self.saves if s.app == self.app]))
        self.saves.remove(save)
        self.store().discard(save.entry, "save failed")

    @rule(steps=st.integers(1, 3))
    def clean(self, steps: int) -> None:
        for _ in range(steps):
            self.stores[self.app][1].run_due()
            self.clock.advance(1.0)

    @rule()
    def crash_and_restart_elsewhere(self) -> None:
        """The application dies without a word; another one attaches to the same storage and
        restores from (and reuses the files of) what it left."""
        self.dead.add(self.app)
        self.saves = [s for s in self.saves if s.app != self.app]
        self.app = self._start()

    @rule()
    def gc(self) -> None:
        offline = self._start()
        self.stores[offline][1].run_until_idle()

    # -- the properties ------------------------------------------------------------------------

    def _present(self) -> set[str]:
        return {e.path for e in self.storage.walk_files(layout.MERGED)}

    @invariant()
    def nothing_needed_is_ever_deleted(self) -> None:
        present = self._present()
        stored = self.stores[self.app][0].metadata.series_entries(SERIES)
        needed = merging.referenced_files(stored)
        for save in self.saves:  # unfinished saves of live applications
            needed |= {s.file for s in save.segments} | set(save.written)
        missing = needed - present
        assert not missing, f"deleted while referenced: {sorted(missing)}"

    def teardown(self) -> None:
        # Everyone dies; gc runs; only what completed entries list may remain.
        self.dead.update(self.stores)
        self.saves.clear()
        offline = self._start()
        self.stores[offline][1].run_until_idle()
        stored = self.stores[offline][0].metadata.series_entries(SERIES)
        assert all(e.state is CheckpointState.COMPLETED for e in stored)
        assert self._present() == merging.referenced_files(stored)


TestReferenceRelation = ReferenceMachine.TestCase
TestReferenceRelation.settings = settings(max_examples=60, stateful_step_count=25,
                                          deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
