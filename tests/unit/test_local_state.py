"""Host-local state on a real disk: the LocalState API, verification at first use, LRU eviction
under the byte bound, left-over recovery, processes building one value once, and the blob cache
adopting what an earlier process cached."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any, BinaryIO

import crc32c
import pytest

from spark_steward.blob.cache import BlobCache, BlobSources
from spark_steward.blob.keys import BlobRef
from spark_steward.errors import LocalDiskFull, LocalSpaceFull, LocalStateError
from spark_steward.local.stores import LocalState
from spark_steward.local.fs import OsFs
from spark_steward.local.working_dir import WorkingDir
from tests.unit.test_blob_stores import DATA, assert_names_full_disk, ref_of
from tests.unit.test_blob_stores import small_disk  # noqa: F401 - a fixture


def _state(root: Path, name: str = "models", max_bytes: int = 0) -> LocalState:
    return LocalState(WorkingDir(root, "app-1", max_bytes=max_bytes), name)


# -- the API --------------------------------------------------------------------------------------


def test_put_get_path_ls_drop(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert state.get("ranker") is None and state.path("ranker") is None
    state.put("ranker", b"v1")
    source = tmp_path / "index.bin"
    source.write_bytes(b"index" * 100)
    state.put("lookup/index", str(source))
    assert state.get("ranker") == b"v1"
    path = state.path("lookup/index")
    assert path is not None and Path(path).read_bytes() == b"index" * 100
    assert state.ls() == ["lookup/index", "ranker"]
    state.put("ranker", b"v2")
    assert state.get("ranker") == b"v2"
    assert state.drop("ranker") and not state.drop("ranker")
    assert state.ls() == ["lookup/index"]
    assert _state(tmp_path, "other").ls() == [], "stores do not see each other"


def test_old_names_keys_and_delete_still_work_and_name_their_replacement(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.put("ranker", b"v1")
    with pytest.warns(DeprecationWarning, match=r"use LocalState\.ls\(\)"):
        assert state.keys() == ["ranker"]
    with pytest.warns(DeprecationWarning, match=r"use LocalState\.drop\(\)"):
        assert state.delete("ranker")
    assert state.ls() == []


def test_replacing_a_value_leaves_one_file(tmp_path: Path) -> None:
    state = _state(tmp_path)
    for i in range(5):
        state.put("k", b"x" * i)
    files = [p for p in (tmp_path / "state").rglob("*") if p.is_file()
             and not p.name.startswith(".")]
    assert len(files) == 1 and files[0].read_bytes() == b"xxxx"


def test_bad_values_and_keys_are_named(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with pytest.raises(LocalStateError, match="not a file"):
        state.put("k", str(tmp_path / "missing"))
    with pytest.raises(LocalStateError, match="bytes or a file path, not int"):
        state.put("k", 3)  # type: ignore[arg-type]
    with pytest.raises(LocalStateError, match="non-empty string"):
        state.put("", b"x")
    with pytest.raises(LocalStateError, match="too long"):
        state.put("k" * 300, b"x")
    for key in (".hidden", "a~b", "../up", "a/b"):
        state.put(key, key.encode())
        assert state.get(key) == key.encode()
    assert not (tmp_path.parent / "up").exists()


def test_a_value_larger_than_the_local_disk_names_the_dir_needed_and_free(
        small_disk: Path, tmp_path: Path) -> None:
    work = WorkingDir(small_disk, "app-1")
    state = LocalState(work, "models")
    state.put("ranker", b"v1")
    big = os.urandom(1_500_000)
    with pytest.raises(LocalDiskFull) as from_bytes:
        state.put("ranker", big)
    folder = small_disk / "state" / "models"
    assert_names_full_disk(from_bytes.value, folder, len(big))
    source = tmp_path / "big.bin"
    source.write_bytes(big)
    with pytest.raises(LocalDiskFull) as from_file:
        state.put("ranker", source)
    assert_names_full_disk(from_file.value, folder, len(big))

    assert state.get("ranker") == b"v1", "the previous value stays, whole"
    assert state.ls() == ["ranker"]
    assert work.recover() == 0, "no left-over to recover"
    record = work.record("state/models/ranker")
    assert record is not None
    with_bytes = sorted(p.relative_to(small_disk).as_posix() for p in small_disk.rglob("*")
                        if p.is_file() and p.stat().st_size > 0)
    assert with_bytes == ["manifest/state%2Fmodels%2Franker.rec", record.file], \
        "only v1 and its record hold bytes: no temp file, no announcement"


def test_a_corrupted_value_is_never_returned(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.put("k", b"0123456789")
    path = Path(state.path("k") or "")
    raw = bytearray(path.read_bytes())
    raw[3] ^= 0xFF
    path.write_bytes(bytes(raw))
    fresh = _state(tmp_path)  # another process: verifies at first use
    assert fresh.path("k") is None
    assert fresh.get("k") is None and fresh.ls() == []


def test_get_verifies_the_bytes_it_returns(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.put("k", b"0123456789")
    path = Path(state.path("k") or "")
    with open(path, "r+b") as f:  # same size, same mtime granularity: only the crc can tell
        f.seek(2)
        f.write(b"X")
    assert state.get("k") is None


def test_get_or_create_builds_once_and_returns_the_form_it_built(tmp_path: Path) -> None:
    state = _state(tmp_path)
    built: list[str] = []

    def build() -> bytes:
        built.append("b")
        return b"expensive"

    assert state.get_or_create("k", build) == b"expensive"
    assert _state(tmp_path).get_or_create("k", build) == b"expensive"
    assert built == ["b"]
    source = tmp_path / "model.onnx"
    source.write_bytes(b"m" * 1000)
    first = state.get_or_create("model", lambda: source)
    again = _state(tmp_path).get_or_create("model", lambda: 1 / 0)
    assert first == again and isinstance(first, str) and first != str(source)
    assert Path(first).read_bytes() == b"m" * 1000


def _build_in_child(root: str, log: str, start: Any) -> None:
    def build() -> bytes:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return b"v" * 100_000

    state = _state(Path(root))
    start.wait(30)
    assert state.get_or_create("shared", build) == b"v" * 100_000


def test_processes_racing_for_one_value_build_it_once(tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    racers = [ctx.Process(target=_build_in_child, args=(str(tmp_path / "w"), str(log), start))
              for _ in range(5)]
    for racer in racers:
        racer.start()
    start.set()
    for racer in racers:
        racer.join(60)
    assert [r.exitcode for r in racers] == [0] * 5
    assert len(log.read_text().split()) == 1


# -- the byte bound -------------------------------------------------------------------------------


def test_the_least_recently_used_unheld_entry_is_evicted(tmp_path: Path) -> None:
    state = _state(tmp_path, max_bytes=250)
    state.put("a", b"a" * 100)
    state.put("b", b"b" * 100)
    os.utime(state.work.use_lock_path("state/models/a"), (1, 1))  # a: used long ago
    os.utime(state.work.use_lock_path("state/models/b"), (2, 2))
    state.put("c", b"c" * 100)
    assert state.ls() == ["b", "c"]
    held = state.work.hold("state/models/b")  # a task elsewhere uses b
    try:
        os.utime(state.work.use_lock_path("state/models/c"), (3, 3))
        state.put("d", b"d" * 100)
        assert state.ls() == ["b", "d"], "c went although b was older"
        with pytest.raises(LocalSpaceFull, match=r"max-bytes=250\).*no task uses"):
            state.put("e", b"e" * 200)
        assert state.ls() == ["b", "d"], "a failed put evicts nothing"
    finally:
        held.release()
    assert state.work.usage() == (2, 200)


def test_a_blob_that_does_not_fit_is_streamed_for_the_task(tmp_path: Path) -> None:
    work = WorkingDir(tmp_path, "app-1", max_bytes=len(DATA) - 1)
    served: list[int] = []

    def server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        served.append(1)
        out.write(DATA)
        return crc32c.crc32c(DATA), len(DATA)

    cache = BlobCache(work, BlobSources(fetch_from_server=server))
    path = cache.get(ref_of(DATA), 7)
    assert path.read_bytes() == DATA and cache.stats["streamed"] == 1
    assert "streams" in path.parts and work.usage() == (0, 0)
    cache.release_task(7)
    assert not path.exists(), "the task's copy goes with the task"


# -- recovery -------------------------------------------------------------------------------------


def test_recovery_removes_what_dead_writers_left_and_keeps_complete_values(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.put("kept", b"complete")
    folder = tmp_path / "state" / "models"
    (folder / ".torn.tmp-123456789abc").write_bytes(b"half")
    (folder / "orphan~deadbeef").write_bytes(b"renamed, never recorded")
    (tmp_path / "manifest" / ".x.rec.tmp-123456789abc").write_bytes(b"{")
    work = WorkingDir(tmp_path, "app-1")
    assert work.recover() == 3
    assert _state(tmp_path).get("kept") == b"complete"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == \
        [Path(state.path("kept") or "").name]


def test_a_blob_cached_by_an_earlier_process_is_adopted_without_transfer(tmp_path: Path) -> None:
    calls: list[int] = []

    def server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        calls.append(1)
        out.write(DATA)
        return crc32c.crc32c(DATA), len(DATA)

    ref = ref_of(DATA)
    BlobCache(WorkingDir(tmp_path, "app-1"), BlobSources(fetch_from_server=server)).get(ref, 1)
    later = BlobCache(WorkingDir(tmp_path, "app-1"), BlobSources(fetch_from_server=server))
    assert later.get(ref, 2).read_bytes() == DATA
    assert calls == [1] and later.stats["verified"] == 1
    # Corrupted while nobody ran: the next process fetches it again.
    path = later.path(ref.scope, ref.key)
    raw = bytearray(path.read_bytes())
    raw[0] ^= 1
    path.write_bytes(bytes(raw))
    third = BlobCache(WorkingDir(tmp_path, "app-1"), BlobSources(fetch_from_server=server))
    assert third.get(ref, 3).read_bytes() == DATA and calls == [1, 1]


def test_the_task_api_stays_a_function_once_its_modules_are_loaded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_steward.local
    import spark_steward.local.stores  # noqa: F401
    import spark_steward.local.executor  # noqa: F401
    from spark_steward.errors import NotInTask
    from spark_steward.kernel import executor

    monkeypatch.setattr(executor, "_state", executor._ProcessState())  # no context installed

    with pytest.raises(NotInTask, match="not active in this task"):
        spark_steward.local.state("models")


def test_a_corrupt_value_found_outside_the_write_lock_is_checked_again_under_it(
        tmp_path: Path) -> None:
    """path() finds a bad copy while another process replaces the value: the re-check under
    the write lock finds the new value and keeps it, instead of removing it with the bad one."""
    state = _state(tmp_path)
    state.put("k", b"old value")
    bad = Path(state.path("k") or "")
    bad.write_bytes(b"old valuX")

    class PutWhileChecking(OsFs):
        fired = False

        def crc_of(self, path: Path) -> tuple[int, int]:
            result = super().crc_of(path)
            if not self.fired:
                self.fired = True
                state.put("k", b"new value")  # another process, between record and check
            return result

    reader = LocalState(WorkingDir(tmp_path, "app-1", fs=PutWhileChecking()), "models")
    path = reader.path("k")
    assert path is not None and Path(path).read_bytes() == b"new value"
    assert state.get("k") == b"new value"


def test_writing_is_reentrant_in_a_thread_and_exclusive_across_threads(tmp_path: Path) -> None:
    import threading

    work = WorkingDir(tmp_path, "app-1")
    entered = threading.Event()

    def other_thread() -> None:
        with work.writing("state/s/k"):
            entered.set()

    with work.writing("state/s/k"):
        with work.writing("state/s/k"):  # nested: must not wait for itself
            pass
        thread = threading.Thread(target=other_thread, daemon=True)
        thread.start()
        assert not entered.wait(0.3), "another thread waits while this one holds it"
    assert entered.wait(5)
    thread.join(5)
