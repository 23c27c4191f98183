"""segment_files.py on real files and moto's S3: partition streams stored as segments of shared
physical files, concurrent appenders, reuse, corruption in transit, the existence check before a
restore, copies. Reading a segment back from a filesystem is one suite for Python and the JVM:
tests/conformance/test_segment_reads.py."""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import multiprocessing
import os
import random
import signal
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from spark_steward.checkpoint.merging.segment_files import (
    check_segments_exist,
    copy_segments,
    read_segment,
    write_segments,
)
from spark_steward.checksum import crc32c_of, format_crc
from spark_steward.errors import CheckpointCorrupt, CheckpointError, StorageError
from spark_steward.checkpoint.merging.lifecycle import Segment
from spark_steward.storage import Storage

FOLDER = "checkpoints/merged/s/0000000007"
LABEL = "checkpoint pagerank/7"


# -- building the input a Spark task hands over --------------------------------------------------


def end_record(partition: int, data: bytes, **override: Any) -> bytes:
    body = {"partition": partition, "rows": len(data) // 10, "length": len(data),
            "crc32c": format_crc(crc32c_of(data)), "sha256": hashlib.sha256(data).hexdigest()}
    body.update(override)
    return b"E" + json.dumps(body).encode()


def elements(parts: list[tuple[int, bytes]], piece: int = 4096) -> list[bytes]:
    """Each partition split into DATA pieces of at most ``piece`` bytes, then its END."""
    out = []
    for partition, data in parts:
        out += [b"D" + data[i:i + piece] for i in range(0, len(data), piece)]
        out.append(end_record(partition, data))
    return out


def random_parts(sizes: list[int], seed: int = 1) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    return [(p, rng.randbytes(size)) for p, size in enumerate(sizes)]


def read_all(storage: Storage, seg: Segment, chunk_size: int = 8 << 20) -> bytes:
    return b"".join(read_segment(storage, seg, label=LABEL, chunk_size=chunk_size))


def file_sizes(storage: Storage, folder: str = FOLDER) -> dict[str, int]:
    storage.fs.invalidate_cache()
    return {e.path: e.size for e in storage.walk_files(folder)}


@pytest.fixture
def local(tmp_path: Path) -> Storage:
    return Storage.from_url((tmp_path / "root").as_uri())


# -- filesystems: append mode -------------------------------------------------------------------


def test_round_trip_with_rotation_and_exact_ranges(local: Storage) -> None:
    # max 8000: appends go to the first file with room, an oversized segment to an empty file
    sizes = [5000, 1, 3000, 0, 7000, 2, 4000, 9000]
    parts = random_parts(sizes)
    segs = write_segments(local, FOLDER, elements(parts, piece=1500), writer_name="host-a",
                          max_file_size=8000)

    f = [f"{FOLDER}/host-a-{n:04d}.arrows" for n in range(4)]
    assert [(s.partition, s.file, s.offset, s.length) for s in segs] == [
        (0, f[0], 0, 5000), (1, f[0], 5000, 1), (2, f[1], 0, 3000), (3, f[0], 5001, 0),
        (4, f[2], 0, 7000), (5, f[0], 5001, 2), (6, f[1], 3000, 4000), (7, f[3], 0, 9000)]
    assert file_sizes(local) == {f[0]: 5003, f[1]: 7000, f[2]: 7000, f[3]: 9000}
    for seg, (partition, data) in zip(segs, parts):
        assert seg.rows == len(data) // 10
        assert seg.crc32c == format_crc(crc32c_of(data))
        assert seg.sha256 == hashlib.sha256(data).hexdigest()
        pieces = list(read_segment(local, seg, label=LABEL, chunk_size=1000))
        assert b"".join(pieces) == data
        assert all(len(p) <= 1000 for p in pieces)
        with open(local.path(seg.file), "rb") as raw:
            raw.seek(seg.offset)
            assert raw.read(seg.length) == data
    check_segments_exist(local, segs, label=LABEL)


def test_identical_partitions_of_one_call_share_one_segment(local: Storage) -> None:
    data = random.Random(2).randbytes(3000)
    segs = write_segments(local, FOLDER, elements([(0, data), (1, data)]), writer_name="h",
                          max_file_size=1 << 20)
    assert [s.partition for s in segs] == [0, 1]
    assert (segs[0].file, segs[0].offset) == (segs[1].file, segs[1].offset)
    assert file_sizes(local) == {segs[0].file: 3000}


def test_reuse_of_known_segments_writes_nothing(local: Storage) -> None:
    parts = random_parts([2000, 3000, 500], seed=3)
    first = write_segments(local, FOLDER, elements(parts), writer_name="h", max_file_size=1 << 20)
    before = file_sizes(local)

    known = {s.sha256: s for s in first}
    renumbered = [(p + 10, data) for p, data in reversed(parts)]
    again = write_segments(local, "checkpoints/merged/s/0000000008", elements(renumbered),
                           writer_name="h", max_file_size=1 << 20, known=known)
    assert again == [replace(first[2], partition=10 + 2), replace(first[1], partition=11),
                     replace(first[0], partition=10)]
    assert file_sizes(local, "checkpoints") == before

    # the same hash with another length is not the same bytes: written anew
    odd = {first[0].sha256: replace(first[0], length=first[0].length + 1)}
    fresh = write_segments(local, FOLDER, elements([(5, parts[0][1])]), writer_name="h",
                           max_file_size=1 << 20, known=odd)
    assert (fresh[0].file, fresh[0].offset) == (first[0].file, sum(before.values()))
    assert read_all(local, fresh[0]) == parts[0][1]


@pytest.mark.parametrize("override", [
    {"crc32c": "00000000"},
    {"sha256": "0" * 64},
    {"length": 999},
])
def test_bytes_damaged_in_transit_are_never_stored(local: Storage,
                                                   override: dict[str, Any]) -> None:
    data = random.Random(4).randbytes(1000)
    bad = [b"D" + data[:600], b"D" + data[600:], end_record(3, data, **override)]
    with pytest.raises(CheckpointCorrupt, match="partition 3 arrived damaged") as err:
        write_segments(local, FOLDER, bad, writer_name="h", max_file_size=1 << 20)
    assert local.url_of(FOLDER) in str(err.value)
    assert file_sizes(local) == {}

    # after a good partition: only the good one's bytes are in the file
    good = random.Random(5).randbytes(700)
    with pytest.raises(CheckpointCorrupt, match="partition 3"):
        write_segments(local, FOLDER, elements([(2, good)]) + bad, writer_name="h",
                       max_file_size=1 << 20)
    assert file_sizes(local) == {f"{FOLDER}/h-0000.arrows": 700}


@pytest.mark.parametrize("stream, message", [
    ([b"D" + b"x" * 10], "10 bytes of DATA after the start with no END record"),
    ([b"Dabc", end_record(0, b"abc"), b"Dxyz"], "after the END of partition 0 with no END"),
    ([end_record(4, b"abcd")], "partition 4's END record announces 4 bytes but no DATA"),
    ([b"Dabc", b"Xabc"], "unknown tag b'X'"),
    ([b"Dabc", b"E{not json"], "malformed END record"),
    ([b"Dabc", end_record(0, b"abc", crc32c="xyz")], "malformed END record"),
    ([b"Dabc", end_record(0, b"abc", rows=-1)], "malformed END record"),
    ([b"Dabc", end_record(0, b"abc"), b"Dabc", end_record(0, b"abc")], "partition 0 came twice"),
    ([b""], "empty element"),
])
def test_stream_protocol_errors_are_named(local: Storage, stream: list[bytes],
                                          message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        write_segments(local, FOLDER, stream, writer_name="h", max_file_size=1 << 20)


def test_no_partitions_write_nothing(local: Storage) -> None:
    assert write_segments(local, FOLDER, [], writer_name="h", max_file_size=100) == []
    assert file_sizes(local) == {}


def test_bad_writer_name_is_refused(local: Storage) -> None:
    with pytest.raises(ValueError, match="'a/b'"):
        write_segments(local, FOLDER, [], writer_name="a/b", max_file_size=100)


def test_a_file_locked_by_another_process_is_skipped(local: Storage) -> None:
    parts = random_parts([100, 200, 300], seed=6)
    first = write_segments(local, FOLDER, elements(parts[:1]), writer_name="h",
                           max_file_size=1 << 20)[0]
    # flock locks belong to an open file description: a second open conflicts like another
    # process would
    fd = os.open(local.path(first.file), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = write_segments(local, FOLDER, elements(parts[1:2]), writer_name="h",
                              max_file_size=1 << 20)[0]
    finally:
        os.close(fd)
    free = write_segments(local, FOLDER, elements(parts[2:]), writer_name="h",
                          max_file_size=1 << 20)[0]
    assert (busy.file, busy.offset) == (f"{FOLDER}/h-0001.arrows", 0)
    assert (free.file, free.offset) == (first.file, 100)
    assert [read_all(local, s) for s in (first, busy, free)] == [d for _, d in parts]


def test_a_failed_append_names_the_file_and_leaves_it_usable(local: Storage) -> None:
    resource = pytest.importorskip("resource")
    data = random.Random(7).randbytes(300_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:  # files may grow to 100 kB: the append writes short, then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
        with pytest.raises(StorageError) as err:
            write_segments(local, FOLDER, elements([(0, data)], piece=50_000), writer_name="h",
                           max_file_size=1 << 20)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    name = f"{FOLDER}/h-0000.arrows"
    assert local.url_of(name) in str(err.value) and "partition 0" in str(err.value)
    assert file_sizes(local) == {name: 100_000}  # the garbage stays; nobody references it

    again = write_segments(local, FOLDER, elements([(0, data)]), writer_name="h",
                           max_file_size=1 << 20)[0]
    assert (again.file, again.offset) == (name, 100_000)
    assert read_all(local, again) == data


# -- several processes appending to the same files ---------------------------------------------

WRITERS = 4
PER_WRITER = 30
MAX_SEGMENT = 200_000
SHARED_MAX = 1_000_000


def _writer_data(index: int) -> Iterator[tuple[int, bytes]]:
    rng = random.Random(1000 + index)
    for k in range(PER_WRITER):
        yield index * 100 + k, rng.randbytes(rng.randint(1, MAX_SEGMENT))


def _writer_process(url: str, index: int, start: Any, results: Any) -> None:
    """One executor Python worker: one write_segments call per partition, host-wide files."""
    try:
        storage = Storage.from_url(url)
        start.wait(60)
        found = []
        for partition, data in _writer_data(index):
            found += write_segments(storage, FOLDER, elements([(partition, data)], piece=65536),
                                    writer_name="host-a", max_file_size=SHARED_MAX)
        results.put((index, [s.to_json() for s in found]))
    except BaseException:  # noqa: BLE001 - reported to the test
        results.put((index, traceback.format_exc()))


def test_several_processes_append_to_shared_files(local: Storage) -> None:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(local.url, i, start, results))
             for i in range(WRITERS)]
    for p in procs:
        p.start()
    try:
        reports = dict(results.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    failed = {i: r for i, r in reports.items() if isinstance(r, str)}
    assert not failed, failed

    segs = [Segment.from_json(s) for i in range(WRITERS) for s in reports[i]]
    expected = {p: data for i in range(WRITERS) for p, data in _writer_data(i)}
    assert sorted(s.partition for s in segs) == sorted(expected)
    sizes = file_sizes(local)
    by_file: dict[str, list[Segment]] = {}
    for seg in segs:
        by_file.setdefault(seg.file, []).append(seg)
    assert set(by_file) == set(sizes)
    for name, held in by_file.items():
        held.sort(key=lambda s: s.offset)
        # back to back from byte 0 to the end: no overlap, no gap, nothing lost
        assert [s.offset for s in held] == [0] + [s.end for s in held[:-1]], name
        assert held[-1].end == sizes[name], name
        assert sizes[name] <= SHARED_MAX
    for seg in segs:
        assert read_all(local, seg) == expected[seg.partition]
    writers_of = {name: {s.partition // 100 for s in held} for name, held in by_file.items()}
    assert any(len(w) > 1 for w in writers_of.values()), writers_of  # the files are shared
    total = sum(len(d) for d in expected.values())
    # a new file is started only when every earlier one is full (no room for a segment) or
    # locked by one of the other writers
    assert len(sizes) <= total // (SHARED_MAX - MAX_SEGMENT) + WRITERS
    assert len(sizes) >= math.ceil(total / SHARED_MAX)


# -- corruption on storage ---------------------------------------------------------------------


def test_the_existence_check_names_truncated_and_missing_files_without_reading_them(
        local: Storage) -> None:
    """The cheap pass before a restore: one metadata call per file, no content read (a flipped
    byte passes it). What a read of a damaged segment says is the conformance suite's
    (tests/conformance/test_segment_reads.py: both runtimes read segments)."""
    parts = random_parts([3000, 4000, 2000, 1000], seed=9)
    segs = write_segments(local, FOLDER, elements(parts), writer_name="h", max_file_size=9000)
    assert [s.file for s in segs] == [segs[0].file] * 3 + [f"{FOLDER}/h-0001.arrows"]
    check_segments_exist(local, segs, label=LABEL)
    with open(local.path(segs[1].file), "r+b") as f:
        f.seek(segs[1].offset + 1234)
        byte = f.read(1)
        f.seek(segs[1].offset + 1234)
        f.write(bytes([byte[0] ^ 0x01]))
    check_segments_exist(local, segs, label=LABEL)

    os.truncate(local.path(segs[0].file), 8000)  # cuts partition 2 (7000..9000)
    with pytest.raises(CheckpointCorrupt) as err:
        check_segments_exist(local, segs, label=LABEL)
    message = str(err.value)
    assert message.startswith(f"{LABEL}: ") and "partition 2" in message
    assert local.url_of(segs[0].file) in message and "bytes 7000..9000" in message
    assert "only 8000 bytes" in message

    os.unlink(local.path(segs[3].file))
    with pytest.raises(CheckpointCorrupt) as err:
        check_segments_exist(local, segs[3:], label=LABEL)
    message = str(err.value)
    assert message.startswith(f"{LABEL}: ") and "partition 3" in message
    assert local.url_of(segs[3].file) in message and "bytes 0..1000" in message
    assert "missing" in message


def test_copy_segments_on_a_filesystem(local: Storage) -> None:
    parts = random_parts([3000, 100, 2500, 900], seed=10)
    segs = write_segments(local, FOLDER, elements(parts), writer_name="h", max_file_size=4000)
    target = "checkpoints/merged/s/0000000009"
    copies = copy_segments(local, segs[::-1], target, writer_name="rewrite", max_file_size=3000,
                           label=LABEL)
    assert [(c.file, c.offset) for c in copies] == [
        (f"{target}/rewrite-0000.arrows", 0), (f"{target}/rewrite-0001.arrows", 0),
        (f"{target}/rewrite-0001.arrows", 2500), (f"{target}/rewrite-0002.arrows", 0)]
    for old, new in zip(segs[::-1], copies):
        assert replace(new, file=old.file, offset=old.offset) == old
        assert read_all(local, new) == parts[old.partition][1]
    # group mode only moves forward: 900 | 2500 + 100 | 3000
    assert file_sizes(local, target) == {f"{target}/rewrite-0000.arrows": 900,
                                         f"{target}/rewrite-0001.arrows": 2600,
                                         f"{target}/rewrite-0002.arrows": 3000}

    # a corrupt source fails the copy and leaves no partial file
    with open(local.path(segs[0].file), "r+b") as f:
        f.write(b"\x00" if parts[0][1][0] != 0 else b"\x01")
    bad_target = "checkpoints/merged/s/0000000010"
    with pytest.raises(CheckpointCorrupt, match=f"^{LABEL}: segment of partition 0"):
        copy_segments(local, segs[:1], bad_target, writer_name="rewrite", max_file_size=3000,
                      label=LABEL)
    assert file_sizes(local, bad_target) == {}


# -- object stores: group mode ------------------------------------------------------------------


@pytest.fixture
def s3(moto_endpoint: str, s3_bucket: str) -> Storage:
    return Storage.from_url(f"s3://{s3_bucket}/steward", endpoint_url=moto_endpoint,
                            skip_instance_cache=True)


def objects(storage: Storage, folder: str) -> dict[str, int]:
    """What the bucket holds below ``folder``, asked of S3 itself (no s3fs listing cache)."""
    import boto3

    bucket, root = storage.root.split("/", 1)
    client = boto3.client("s3", endpoint_url=storage.options["endpoint_url"],
                          region_name="us-east-1")
    prefix = f"{root}/{folder}/"
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(root) + 1:]: int(o["Size"]) for o in listed}


def test_group_mode_on_s3_writes_own_objects_in_order(s3: Storage) -> None:
    parts = random_parts([1000] * 10, seed=11)
    segs = write_segments(s3, FOLDER, elements(parts, piece=300), writer_name="host-7",
                          max_file_size=3000)
    names = [f"{FOLDER}/host-7-{n:04d}.arrows" for n in range(math.ceil(10 / 3))]
    assert [(s.partition, s.file, s.offset) for s in segs] == [
        (p, names[p // 3], 1000 * (p % 3)) for p in range(10)]
    assert objects(s3, FOLDER) == {names[0]: 3000, names[1]: 3000, names[2]: 3000,
                                   names[3]: 1000}
    assert len(objects(s3, FOLDER)) == len({s.file for s in segs})
    for seg, (_, data) in zip(segs, parts):
        assert read_all(s3, seg, chunk_size=300) == data
        assert s3.read_bytes(seg.file)[seg.offset:seg.end] == data
    check_segments_exist(s3, segs, label=LABEL)

    # a second call with the same name never overwrites: it starts after the taken names
    more = write_segments(s3, FOLDER, elements(random_parts([500, 2900], seed=12)),
                          writer_name="host-7", max_file_size=3000)
    assert [(s.file, s.offset) for s in more] == [(f"{FOLDER}/host-7-0004.arrows", 0),
                                                  (f"{FOLDER}/host-7-0005.arrows", 0)]
    assert len(objects(s3, FOLDER)) == 6
    assert [read_all(s3, s) for s in segs] == [d for _, d in parts]


def test_group_mode_on_s3_reuses_known_segments(s3: Storage) -> None:
    parts = random_parts([800, 900], seed=13)
    first = write_segments(s3, FOLDER, elements(parts), writer_name="a", max_file_size=1 << 20)
    again = write_segments(s3, "checkpoints/merged/s/0000000008", elements(parts),
                           writer_name="b", max_file_size=1 << 20,
                           known={s.sha256: s for s in first})
    assert again == first
    assert objects(s3, "checkpoints/merged/s/0000000008") == {}


def test_group_mode_on_s3_stores_nothing_when_the_call_fails(s3: Storage) -> None:
    good, bad = random.Random(14).randbytes(2000), random.Random(15).randbytes(2000)
    stream = elements([(0, good)]) + [b"D" + bad, end_record(1, bad, crc32c="12345678")]
    with pytest.raises(CheckpointCorrupt, match="partition 1 arrived damaged"):
        write_segments(s3, FOLDER, stream, writer_name="t-1", max_file_size=1 << 20)
    assert objects(s3, FOLDER) == {}  # the open object was dropped, not uploaded


def test_copy_segments_on_s3(s3: Storage) -> None:
    parts = random_parts([700, 1500, 400, 1200, 900, 300], seed=16)
    segs = write_segments(s3, FOLDER, elements(parts), writer_name="t-1", max_file_size=2000)
    target = "checkpoints/merged/s/0000000009"
    moving = [segs[5], segs[1], segs[3], segs[0]]
    copies = copy_segments(s3, moving, target, writer_name="rewrite", max_file_size=2000,
                           label=LABEL)
    assert [(c.file, c.offset) for c in copies] == [
        (f"{target}/rewrite-0000.arrows", 0), (f"{target}/rewrite-0000.arrows", 300),
        (f"{target}/rewrite-0001.arrows", 0), (f"{target}/rewrite-0001.arrows", 1200)]
    for old, new in zip(moving, copies):
        assert replace(new, file=old.file, offset=old.offset) == old
        assert read_all(s3, new) == parts[old.partition][1]
    assert objects(s3, target) == {f"{target}/rewrite-0000.arrows": 1800,
                                   f"{target}/rewrite-0001.arrows": 1900}
    assert len(objects(s3, target)) == len({c.file for c in copies})

    # a source changed on S3: the copy fails naming it, and no object is left behind
    source = s3.read_bytes(segs[1].file)
    flipped = bytearray(source)
    flipped[segs[1].offset + 10] ^= 0xFF
    s3.fs.pipe_file(s3.path(segs[1].file), bytes(flipped))
    bad_target = "checkpoints/merged/s/0000000010"
    with pytest.raises(CheckpointCorrupt) as err:
        copy_segments(s3, [segs[1]], bad_target, writer_name="rewrite", max_file_size=2000,
                      label=LABEL)
    assert str(err.value).startswith(f"{LABEL}: segment of partition 1 in "
                                     f"{s3.url_of(segs[1].file)} (bytes {segs[1].offset}..")
    assert objects(s3, bad_target) == {}


def test_reads_on_s3_name_missing_and_short_objects(s3: Storage) -> None:
    parts = random_parts([1000, 1000], seed=17)
    segs = write_segments(s3, FOLDER, elements(parts), writer_name="t-1", max_file_size=1 << 20)
    s3.fs.pipe_file(s3.path(segs[0].file), s3.read_bytes(segs[0].file)[:1500])
    for check in (lambda: check_segments_exist(s3, segs, label=LABEL),
                  lambda: read_all(s3, segs[1], chunk_size=300)):
        with pytest.raises(CheckpointCorrupt) as err:
            check()
        message = str(err.value)
        assert message.startswith(f"{LABEL}: segment of partition 1 in "
                                  f"{s3.url_of(segs[1].file)} (bytes 1000..2000)")
        assert "only 1500 bytes" in message
    beyond = replace(segs[1], offset=1600, length=100)  # starts past the end: S3 answers 416
    with pytest.raises(CheckpointCorrupt, match="only 1500 bytes"):
        read_all(s3, beyond)

    s3.fs.rm(s3.path(segs[0].file))
    for check in (lambda: check_segments_exist(s3, segs, label=LABEL),
                  lambda: read_all(s3, segs[0])):
        with pytest.raises(CheckpointCorrupt, match=f"^{LABEL}: segment of partition .* "
                                                    "the file is missing"):
            check()
