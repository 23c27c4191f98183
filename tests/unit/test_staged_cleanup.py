"""Staged cleanup keeps an unreferenced item at least one interval and at most two."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_steward.lifecycle.staged_cleanup import StagedCleanup


def test_item_staged_between_ticks_is_deleted_at_the_second_tick() -> None:
    cleanup: StagedCleanup[str] = StagedCleanup()
    cleanup.stage("blob")
    assert cleanup.tick() == []          # first encounter: only moved to "delete now"
    assert cleanup.is_waiting("blob")
    assert cleanup.tick() == ["blob"]    # second encounter: deleted
    assert not cleanup.is_waiting("blob") and len(cleanup) == 0


def test_reuse_rescues_an_item_in_either_list() -> None:
    cleanup: StagedCleanup[str] = StagedCleanup()
    cleanup.stage("a")
    assert cleanup.rescue("a") is True
    cleanup.stage("b")
    cleanup.tick()
    assert cleanup.rescue("b") is True
    assert cleanup.tick() == [] and cleanup.tick() == []
    assert cleanup.rescue("never-staged") is False


def test_staging_again_does_not_postpone_a_due_item() -> None:
    cleanup: StagedCleanup[str] = StagedCleanup()
    cleanup.stage("a")
    cleanup.tick()
    cleanup.stage("a")                   # still unreferenced: keeps its place
    assert cleanup.tick() == ["a"]


def test_drain_returns_everything_waiting() -> None:
    cleanup: StagedCleanup[int] = StagedCleanup()
    cleanup.stage(1)
    cleanup.tick()
    cleanup.stage(2)
    assert cleanup.drain() == [1, 2]
    assert cleanup.tick() == [] and len(cleanup) == 0


OPS = st.lists(st.tuples(st.sampled_from(["stage", "rescue", "tick"]), st.integers(0, 4)),
               max_size=60)


@given(OPS)
def test_deleted_items_waited_one_to_two_ticks_unrescued(ops: list[tuple[str, int]]) -> None:
    """Model: per key, the tick count at which it last became unreferenced (None if in use)."""
    cleanup: StagedCleanup[int] = StagedCleanup()
    unreferenced_since: dict[int, int | None] = {}
    ticks = 0
    for op, key in ops:
        if op == "stage":
            if unreferenced_since.get(key) is None:
                unreferenced_since[key] = ticks
            cleanup.stage(key)
        elif op == "rescue":
            unreferenced_since[key] = None
            cleanup.rescue(key)
        else:
            ticks += 1
            for deleted in cleanup.tick():
                since = unreferenced_since.get(deleted)
                assert since is not None, f"{deleted} was deleted while in use"
                # Staged before tick number since+1, deleted at tick since+2: one to two intervals.
                assert ticks == since + 2
                unreferenced_since[deleted] = None
            for key_, since in unreferenced_since.items():
                if since is not None and ticks >= since + 2:
                    raise AssertionError(f"{key_} overstayed: unreferenced since tick {since}")
