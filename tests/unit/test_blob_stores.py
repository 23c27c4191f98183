"""Blob stores and the executor cache without Spark: temp-then-rename, verification,
corruption repair, source order, cross-process single download and lock-guarded deletion."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import crc32c
import pytest

from spark_steward.blob.cache import BlobCache, BlobSources
from spark_steward.blob.depot import BlobDepot
from spark_steward.blob.keys import BlobKind, BlobRef
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore, digest_bytes
from spark_steward.errors import BlobNotFound, ChecksumMismatch, LocalDiskFull
from spark_steward.local.space import free_bytes
from spark_steward.storage import Storage
from tests.support.mounts import tmpfs

DATA = os.urandom(300_000)


def ref_of(data: bytes, scope: str = "_app", name: str = "") -> BlobRef:
    d = digest_bytes(data)
    return BlobRef(d.key, scope, BlobKind.PERMANENT, d.size, d.crc32c, name)


def test_upload_and_open_read_round_trip(storage: Storage, tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(DATA)
    storage.upload("a/b/blob", str(source))
    with storage.open_read("a/b/blob") as f:
        assert f.read() == DATA
    assert storage.list_names("a/b") == ["blob"], "no temp file left beside it"


def test_put_file_digest_matches_content(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    source = tmp_path / "src.bin"
    source.write_bytes(DATA)
    digest = store.put_file("_app", source)
    assert digest.key.digest == hashlib.sha256(DATA).hexdigest()
    assert digest.crc32c == crc32c.crc32c(DATA) and digest.size == len(DATA)
    assert store.path("_app", digest.key).read_bytes() == DATA
    assert [p.name for p in (tmp_path / "blobs" / "_app").iterdir()] == [digest.key.digest]


def test_install_rejects_wrong_bytes_and_leaves_nothing(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    ref = ref_of(DATA)

    def wrong(tmp: Path) -> None:
        tmp.write_bytes(DATA[:-1] + b"x")

    with pytest.raises(ChecksumMismatch, match=ref.key.digest):
        store.install("_app", ref.key, ref.size, wrong)
    assert list((tmp_path / "_app").iterdir()) == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (tmpfs), unmounted after the test whatever happened."""
    with tmpfs(tmp_path / "small-disk", "size=1m") as mount_point:
        yield mount_point


def assert_names_full_disk(error: LocalDiskFull, folder: Path, needed: int) -> None:
    """The message names the folder, the bytes needed and the bytes free now (the failed
    write's temp file already removed), and says what to do."""
    message = str(error)
    assert str(folder) in message and f"{needed} bytes" in message, message
    free = re.search(r"has (\d+) bytes free", message)
    assert free is not None and int(free.group(1)) == free_bytes(folder), message
    assert "spark.steward.local.dir" in message, message
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == 28


def test_a_blob_put_larger_than_the_local_disk_names_the_dir_needed_and_free(
        small_disk: Path, tmp_path: Path) -> None:
    depot = BlobDepot(LocalBlobStore(small_disk / "blobs"), None)
    big = os.urandom(1_500_000)
    with pytest.raises(LocalDiskFull) as from_bytes:
        depot.put_bytes(big)
    assert_names_full_disk(from_bytes.value, small_disk / "blobs" / "_app", len(big))
    source = tmp_path / "big.bin"
    source.write_bytes(big)
    with pytest.raises(LocalDiskFull) as from_file:
        depot.put_file(source)
    assert_names_full_disk(from_file.value, small_disk / "blobs" / "_app", len(big))

    left = [p for p in small_disk.rglob("*") if p.is_file()]
    assert left == [], f"half-written files left behind: {left}"
    assert depot.refs() == [], "a blob that was not stored is not in the ledger"
    ref = depot.put_bytes(DATA)  # the space went back: a blob that fits is stored
    assert depot.local.path(ref.scope, ref.key).read_bytes() == DATA


def test_a_blob_larger_than_the_hosts_disk_is_not_cached_nor_streamed_onto_it(
        small_disk: Path) -> None:
    big = os.urandom(1_500_000)
    ref = ref_of(big)
    served: list[int] = []

    def from_server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        served.append(1)
        out.write(big)
        return crc32c.crc32c(big), len(big)

    cache = BlobCache(small_disk / "cache", BlobSources(fetch_from_server=from_server))
    with pytest.raises(LocalDiskFull) as info:
        cache.get(ref, 1)
    assert f"{len(big)} bytes" in str(info.value) and str(small_disk / "cache") in str(info.value)
    assert served == [1], "a full disk is not retried, nor streamed onto the same disk"
    left = [p for p in small_disk.rglob("*") if p.is_file() and p.stat().st_size > 0]
    assert left == [], f"half-written files left behind: {left}"


def test_verify_removes_a_corrupt_copy(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    ref = ref_of(DATA)
    digest = store.put_bytes("_app", DATA)
    path = store.path("_app", digest.key)
    raw = bytearray(path.read_bytes())
    raw[100] ^= 1
    path.write_bytes(bytes(raw))
    assert store.open_verified("_app", ref.key, ref.crc32c, ref.size, None) is None
    assert not path.exists()


def test_ha_store_layout_is_the_same_relative_path(memory_storage: Storage,
                                                   tmp_path: Path) -> None:
    local = LocalBlobStore(tmp_path)
    ha = HaBlobStore(memory_storage, "app-1")
    digest = local.put_bytes("job.1", DATA)
    ha.put("job.1", digest.key, local.path("job.1", digest.key))
    assert memory_storage.exists(f"apps/app-1/blobs/job.1/{digest.key}")
    dest = tmp_path / "restored"
    assert ha.download("job.1", digest.key, dest) == (digest.crc32c, digest.size,
                                                      digest.key.digest)
    assert dest.read_bytes() == DATA


def _cache(tmp_path: Path, **sources: Any) -> BlobCache:
    return BlobCache(tmp_path / "cache", BlobSources(**sources))


def test_cache_prefers_driver_copy_then_ha_then_server(tmp_path: Path,
                                                        memory_storage: Storage) -> None:
    ref = ref_of(DATA)
    calls: list[str] = []

    def from_server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        calls.append("server")
        out.write(DATA)
        return crc32c.crc32c(DATA), len(DATA)

    ha = HaBlobStore(memory_storage, "app")
    driver = LocalBlobStore(tmp_path / "driver")
    # Nothing but the server has it.
    cache = _cache(tmp_path, driver_store=driver, ha=ha, fetch_from_server=from_server)
    assert cache.get(ref, 1).read_bytes() == DATA
    assert cache.stats["server"] == 1 and calls == ["server"]


def test_cache_links_the_driver_copy_without_copying(tmp_path: Path) -> None:
    driver = LocalBlobStore(tmp_path / "driver")
    digest = driver.put_bytes("_app", DATA)
    cache = _cache(tmp_path, driver_store=driver)
    path = cache.get(ref_of(DATA), 1)
    assert os.stat(path).st_ino == os.stat(driver.path("_app", digest.key)).st_ino
    assert cache.stats["linked"] == 1


def test_cache_uses_ha_when_the_server_is_gone(tmp_path: Path, memory_storage: Storage) -> None:
    ha = HaBlobStore(memory_storage, "app")
    local = LocalBlobStore(tmp_path / "driver")
    digest = local.put_bytes("_app", DATA)
    ha.put("_app", digest.key, local.path("_app", digest.key))

    def dead_server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        raise AssertionError("the HA copy must be used first")

    cache = _cache(tmp_path, ha=ha, fetch_from_server=dead_server)
    assert cache.get(ref_of(DATA), 1).read_bytes() == DATA
    assert cache.stats["ha"] == 1


def test_cache_retries_a_corrupt_transfer_and_then_reports_every_source(tmp_path: Path) -> None:
    attempts: list[int] = []

    def corrupt_server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        attempts.append(1)
        out.write(b"y" * len(DATA))
        return crc32c.crc32c(b"y" * len(DATA)), len(DATA)

    cache = _cache(tmp_path, fetch_from_server=corrupt_server, attempts=3)
    with pytest.raises(BlobNotFound, match="server attempt 3"):
        cache.get(ref_of(DATA), 1)
    assert len(attempts) == 3
    assert not any(p.name == ref_of(DATA).key.digest for p in (tmp_path / "cache").rglob("*"))
    assert cache.referenced(ref_of(DATA)) == 0, "a failed get holds no reference"


def test_cache_detects_corruption_after_first_use_and_fetches_again(tmp_path: Path) -> None:
    served: list[int] = []

    def server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        served.append(1)
        out.write(DATA)
        return crc32c.crc32c(DATA), len(DATA)

    cache = _cache(tmp_path, fetch_from_server=server)
    ref = ref_of(DATA)
    path = cache.get(ref, 1)
    raw = bytearray(path.read_bytes())
    raw[5] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert cache.get(ref, 2).read_bytes() == DATA
    assert len(served) == 2


def test_task_references_stage_and_tick_deletes_after_two_periods(tmp_path: Path) -> None:
    driver = LocalBlobStore(tmp_path / "driver")
    driver.put_bytes("_app", DATA)
    cache = _cache(tmp_path, driver_store=driver)
    ref = ref_of(DATA)
    path = cache.get(ref, task_id=7)
    assert cache.referenced(ref) == 1
    assert cache.tick() == 0
    cache.release_task(7)
    assert cache.referenced(ref) == 0
    assert cache.tick() == 0 and path.exists(), "staged: survives the first period"
    assert cache.tick() == 1 and not path.exists()


def test_reuse_rescues_a_staged_entry(tmp_path: Path) -> None:
    driver = LocalBlobStore(tmp_path / "driver")
    driver.put_bytes("_app", DATA)
    cache = _cache(tmp_path, driver_store=driver)
    ref = ref_of(DATA)
    cache.get(ref, 1)
    cache.release_task(1)
    cache.tick()
    cache.get(ref, 2)
    cache.release_other_tasks(3)  # a worker's next task: task 2 is over
    assert cache.tick() == 0, "rescued by task 2, staged again at its end"
    assert cache.tick() == 1


def _hold_in_child(root: str, ref: BlobRef, ready: Any, release: Any) -> None:
    driver = LocalBlobStore(Path(root) / "driver")
    cache = BlobCache(Path(root) / "cache", BlobSources(driver_store=driver))
    cache.get(ref, 1)
    ready.set()
    release.wait(30)


def test_an_entry_in_use_by_another_process_is_not_deleted(tmp_path: Path) -> None:
    driver = LocalBlobStore(tmp_path / "driver")
    driver.put_bytes("_app", DATA)
    ref = ref_of(DATA)
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_in_child, args=(str(tmp_path), ref, ready, release))
    child.start()
    try:
        assert ready.wait(30)
        cache = _cache(tmp_path, driver_store=driver)
        path = cache.get(ref, 1)
        cache.release_task(1)
        cache.tick()
        assert cache.tick() == 0 and path.exists(), "the other process still holds it"
    finally:
        release.set()
        child.join(30)
    cache.release_task(1)
    cache._staged.stage((ref.scope, ref.key))
    cache.tick()
    assert cache.tick() == 1 and not path.exists()


def _racer(root: str, ref: BlobRef, log_path: str, start: Any) -> None:
    def slow_server(r: BlobRef, out: BinaryIO) -> tuple[int, int]:
        with open(log_path, "a") as log:
            log.write(f"{os.getpid()}\n")
        out.write(DATA)
        return crc32c.crc32c(DATA), len(DATA)

    cache = BlobCache(Path(root) / "cache", BlobSources(fetch_from_server=slow_server))
    start.wait(30)
    assert cache.get(ref, 1).read_bytes() == DATA


def test_processes_racing_for_one_blob_download_it_once(tmp_path: Path) -> None:
    ref = ref_of(DATA)
    log_path = tmp_path / "downloads.log"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    racers = [ctx.Process(target=_racer, args=(str(tmp_path), ref, str(log_path), start))
              for _ in range(6)]
    for racer in racers:
        racer.start()
    start.set()
    for racer in racers:
        racer.join(60)
    assert [r.exitcode for r in racers] == [0] * 6
    assert len(log_path.read_text().split()) == 1
