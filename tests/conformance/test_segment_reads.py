"""A merged checkpoint's segments read back by byte range, one suite for both readers: the
JVM's ``SegmentFiles`` (restores on filesystems) and Python's ``read_segment`` (compactions,
and restores from storage only Python reaches) deliver a segment's exact bytes, and fail a
flipped byte, a truncated or missing file with the same error naming the checkpoint, the
partition, the file and the byte range.

Writing segments, the existence check before a restore and object stores are Python's alone
(tests/unit/test_segment_files.py); the restore through Spark is tests/spark.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from spark_steward.checksum import crc32c_of, format_crc
from tests.conformance.jvm import JvmDriver
from tests.conformance.segment_readers import (JavaSegmentReader, PythonSegmentReader,
                                               SegmentReader)
from tests.conformance.vectors.segments import (KNOWN_DISAGREEMENTS, LABEL, ROOTS, past_the_end,
                                                segment_file, storage_at, what)


def expect_agreement(request: pytest.FixtureRequest, reader: SegmentReader, vector: str) -> None:
    """Marks the test an expected failure where the runtimes are known to disagree."""
    reason = KNOWN_DISAGREEMENTS.get((reader.runtime, vector))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


class SegmentReadSuite:
    """The suite; a concrete class provides the runtime's ``reader`` (fsspec's tests/abstract)."""

    @pytest.mark.parametrize("root", list(ROOTS))
    def test_every_segment_reads_as_its_exact_bytes(
            self, reader: SegmentReader, tmp_path: Path, root: str,
            request: pytest.FixtureRequest) -> None:
        expect_agreement(request, reader, f"root-{root}")
        storage = storage_at(tmp_path, root)
        segments, parts = segment_file(storage)
        for segment, data in zip(segments, parts):
            assert reader.read(storage, segment, LABEL) == (data, None), segment

    def test_an_upper_case_recorded_crc_is_the_same_crc(self, reader: SegmentReader,
                                                        tmp_path: Path) -> None:
        storage = storage_at(tmp_path)
        segments, parts = segment_file(storage)
        segment = replace(segments[0], crc32c=segments[0].crc32c.upper())
        assert reader.read(storage, segment, LABEL) == (parts[0], None)

    @pytest.mark.parametrize("partition", [0, 1, 4])
    def test_a_flipped_byte_fails_the_read_naming_the_segment(
            self, reader: SegmentReader, tmp_path: Path, partition: int) -> None:
        storage = storage_at(tmp_path)
        segments, parts = segment_file(storage)
        segment = segments[partition]
        at = segment.offset + segment.length - 7
        path = Path(storage.path(segment.file))
        stored = bytearray(path.read_bytes())
        stored[at] ^= 0x01
        path.write_bytes(stored)
        actual = format_crc(crc32c_of(bytes(stored[segment.offset:segment.end])))

        data, error = reader.read(storage, segment, LABEL)
        assert error == (f"{what(storage, segment)}: crc32c {actual} != recorded "
                         f"{segment.crc32c} (the bytes changed on storage)")
        assert bytes(stored[segment.offset:segment.end]).startswith(data)
        for other in segments:  # the neighbours are unaffected
            if other.partition != partition:
                assert reader.read(storage, other, LABEL) == (parts[other.partition], None)

    def test_a_truncated_file_fails_the_read_of_every_segment_it_cuts(
            self, reader: SegmentReader, tmp_path: Path) -> None:
        storage = storage_at(tmp_path)
        segments, parts = segment_file(storage)
        cut = segments[1].offset + 1000  # inside partition 1: 2, 3 (empty) and 4 are past it
        os.truncate(storage.path(segments[0].file), cut)
        assert reader.read(storage, segments[0], LABEL) == (parts[0], None)
        for segment in (segments[1], segments[2], segments[4]):
            data, error = reader.read(storage, segment, LABEL)
            assert error == f"{what(storage, segment)}: the file has only {cut} bytes (truncated)"
            assert parts[segment.partition].startswith(data)

    def test_a_missing_file_fails_the_read_naming_the_segment(
            self, reader: SegmentReader, tmp_path: Path) -> None:
        storage = storage_at(tmp_path)
        segments, _ = segment_file(storage)
        os.unlink(storage.path(segments[0].file))
        for segment in (segments[0], segments[4]):
            assert reader.read(storage, segment, LABEL) == (
                b"", f"{what(storage, segment)}: the file is missing")

    def test_a_directory_in_place_of_the_file_fails_the_read_naming_the_segment(
            self, reader: SegmentReader, tmp_path: Path) -> None:
        storage = storage_at(tmp_path)
        segments, _ = segment_file(storage)
        path = Path(storage.path(segments[0].file))
        path.unlink()
        path.mkdir()
        data, error = reader.read(storage, segments[1], LABEL)
        assert data == b"" and error is not None
        assert error.startswith(f"{what(storage, segments[1])}: "), error

    def test_an_empty_segment_past_the_end_of_its_file_fails_as_truncated(
            self, reader: SegmentReader, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        expect_agreement(request, reader, "empty-past-the-end")
        storage = storage_at(tmp_path)
        segments, _ = segment_file(storage)
        size = os.path.getsize(storage.path(segments[0].file))
        segment = past_the_end(segments[3], size)
        assert reader.read(storage, segment, LABEL) == (
            b"", f"{what(storage, segment)}: the file has only {size} bytes (truncated)")


class TestPythonSegmentReader(SegmentReadSuite):
    @pytest.fixture
    def reader(self) -> SegmentReader:
        return PythonSegmentReader(chunk_size=1000)  # many pieces, the last one short


class TestJavaSegmentReader(SegmentReadSuite):
    @pytest.fixture
    def reader(self, jvm: JvmDriver) -> SegmentReader:
        return JavaSegmentReader(jvm)
