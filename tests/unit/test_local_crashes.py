"""The working directory under power cuts: at every create, write, sync, rename and unlink of a
put, an eviction and a recovery, then recovery on what the disk kept. Never a torn value, never
a lost complete one."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from spark_steward.local.stores import LocalState
from spark_steward.local.working_dir import WorkingDir
from tests.unit.crash_fs import CrashFs, PowerCut

ROOT = Path("/work/app-1")
OLD = b"old value " * 300
NEW = b"new value!" * 500


def _state(fs: CrashFs, max_bytes: int = 0) -> tuple[WorkingDir, LocalState]:
    work = WorkingDir(ROOT, "app-1", fs=fs, max_bytes=max_bytes)
    return work, LocalState(work, "models")


def _recovered(fs: CrashFs, keep_names: bool, max_bytes: int = 0) -> tuple[CrashFs, LocalState]:
    disk = fs.after_power_cut(keep_unsynced_names=keep_names)
    work, state = _state(disk, max_bytes)
    work.recover()
    return disk, state


def _no_left_overs(disk: CrashFs) -> None:
    """After recovery every data file is named by a complete record, and nothing is pending."""
    work = WorkingDir(ROOT, "app-1", fs=disk)
    named = {r.file for r in work.records()}
    data = [n for n in disk.files_under(ROOT / "state") if not Path(n).name.startswith(".")]
    assert sorted(str(ROOT / f) for f in named) == data
    assert not [n for n in disk.files_under(ROOT) if ".tmp-" in n or n.endswith(".writing")]


def _sweep(run: Callable[[CrashFs], object], prepare: Callable[[CrashFs], object]) -> int:
    """Runs ``run`` after ``prepare`` with the power cut at step 1, 2, ... until it completes;
    each cut disk goes to ``_CUTS``. Returns how many steps ``run`` has."""
    step = 1
    while True:
        fs = CrashFs()
        prepare(fs)
        fs.crash_at = fs.steps + step
        try:
            run(fs)
        except PowerCut:
            _CUTS.append((fs, step))
            step += 1
            continue
        return step - 1


_CUTS: list[tuple[CrashFs, int]] = []


@pytest.fixture(autouse=True)
def _fresh_cuts() -> None:
    _CUTS.clear()


@pytest.mark.parametrize("keep_names", [False, True], ids=["names-revert", "names-kept"])
def test_a_put_cut_at_any_step_leaves_the_old_or_the_new_value(keep_names: bool) -> None:
    steps = _sweep(lambda fs: _state(fs)[1].put("ranker", NEW),
                   lambda fs: _state(fs)[1].put("ranker", OLD))
    assert steps >= 8, "announce, temp, sync, rename, dir sync, record, ... all counted"
    seen = set()
    for fs, step in _CUTS:
        disk, state = _recovered(fs, keep_names)
        value = state.get("ranker")
        assert value in (OLD, NEW), f"cut at step {step} ({fs.trace[-1]}): {value!r:.40}"
        seen.add(value)
        _no_left_overs(disk)
        state.put("ranker", b"after")  # the entry is writable again
        assert state.get("ranker") == b"after"
    assert seen == {OLD, NEW}, "cuts before and after the record's rename were both tried"


@pytest.mark.parametrize("keep_names", [False, True], ids=["names-revert", "names-kept"])
def test_a_first_put_cut_at_any_step_leaves_nothing_or_the_value(keep_names: bool) -> None:
    _sweep(lambda fs: _state(fs)[1].put("index", NEW), lambda fs: None)
    for fs, step in _CUTS:
        disk, state = _recovered(fs, keep_names)
        assert state.get("index") in (None, NEW), f"cut at step {step}"
        path = state.path("index")
        assert path is None or (path == str(ROOT / _only_file(disk))
                                and disk.read_bytes(Path(path)) == NEW)
        _no_left_overs(disk)


def _only_file(disk: CrashFs) -> str:
    work = WorkingDir(ROOT, "app-1", fs=disk)
    return [r.file for r in work.records()][0]


@pytest.mark.parametrize("keep_names", [False, True], ids=["names-revert", "names-kept"])
def test_an_eviction_cut_at_any_step_never_tears_either_value(keep_names: bool) -> None:
    bound = len(OLD) + len(NEW) + 100

    def prepare(fs: CrashFs) -> None:
        state = _state(fs, bound)[1]
        state.put("a", OLD)
        state.put("b", OLD)  # now "a" is the least recently used

    _sweep(lambda fs: _state(fs, bound)[1].put("c", NEW), prepare)
    assert _CUTS
    for fs, step in _CUTS:
        disk, state = _recovered(fs, keep_names, bound)
        assert state.get("a") in (None, OLD), f"cut at step {step}: evicted or intact"
        assert state.get("b") == OLD, "b was not the victim"
        assert state.get("c") in (None, NEW)
        _no_left_overs(disk)
        work = WorkingDir(ROOT, "app-1", fs=disk)
        assert work.usage()[1] <= bound


@pytest.mark.parametrize("keep_names", [False, True], ids=["names-revert", "names-kept"])
def test_a_recovery_cut_at_any_step_is_finished_by_the_next_one(keep_names: bool) -> None:
    # The state a put cut just before its record leaves: announcement, renamed file.
    base = CrashFs()
    state = _state(base)[1]
    state.put("ranker", OLD)
    renamed = next(i for i, t in enumerate(_trace_of_put(), 1) if t.startswith("rename") and
                   "/manifest/" not in t)
    base.crash_at = base.steps + renamed + 1
    with pytest.raises(PowerCut):
        state.put("ranker", NEW)
    crashed = base.after_power_cut(keep_unsynced_names=True)
    step = 1
    while True:
        disk = crashed.after_power_cut(keep_unsynced_names=True)
        disk.crash_at = step
        try:
            WorkingDir(ROOT, "app-1", fs=disk).recover()
        except PowerCut:
            after, state = _recovered(disk, keep_names)
            assert state.get("ranker") == OLD, f"recovery cut at step {step}"
            _no_left_overs(after)
            step += 1
            continue
        break
    assert step > 2, "the recovery had steps to cut"


def _trace_of_put() -> list[str]:
    fs = CrashFs()
    state = _state(fs)[1]
    state.put("ranker", OLD)
    start = fs.steps
    state.put("ranker", NEW)
    return fs.trace[start:]


def test_the_sweep_catches_a_put_that_does_not_sync_its_data() -> None:
    """The crash model is strong enough to see a missing fsync: with data never synced, a put
    cut after its record leaves a torn value that recovery must drop, losing the old one."""
    lost = 0
    step = 1
    while True:
        fs = CrashFs(sync_files=False)
        _state(fs)[1].put("ranker", OLD)
        fs.crash_at = fs.steps + step
        try:
            _state(fs)[1].put("ranker", NEW)
        except PowerCut:
            _, state = _recovered(fs, keep_names=True)
            lost += state.get("ranker") not in (OLD, NEW)
            step += 1
            continue
        break
    assert lost > 0
