"""The host-local working dir's manifest records, one suite for both runtimes: each writes a
record it reads back exactly, names its file alike (the quoted entry), ignores a damaged one
(its own or the other runtime's), and counts the same bytes against the working dir's bound.

Python owns the format (``records.py``): the working dir's recovery, eviction and ``gc`` read
every record, the JVM's too (the Python class's own test); the JVM reads only the records it
writes (table replicas).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

import pytest

from tests.conformance.jvm import JvmDriver
from tests.conformance.manifests import (APP_ID, CAPABILITY, SCOPE, JavaManifest,
                                         ManifestRecords, PythonManifest)
from tests.conformance.vectors.manifest_records import (CRCS, DAMAGES, ENTRIES,
                                                        KNOWN_DISAGREEMENTS, SIZES)


def expect_agreement(request: pytest.FixtureRequest, runtime: str, vector: str) -> None:
    """Marks the test an expected failure where the runtimes are known to disagree."""
    reason = KNOWN_DISAGREEMENTS.get((runtime, vector))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def assert_body(body: dict | None, entry: str, size: int, crc: int,  # type: ignore[type-arg]
                state: str) -> None:
    assert body is not None, "the record was not read"
    written_at = body.pop("written_at")
    assert isinstance(written_at, (int, float)) and written_at > 1.7e9, written_at
    assert body == {"app_id": APP_ID, "capability": CAPABILITY, "crc32c": crc, "entry": entry,
                    "file": entry, "form": "file", "scope": SCOPE, "size": size,
                    "state": state}


class ManifestSuite:
    """The suite: ``records`` is the runtime under test, ``other`` the other runtime (fsspec's
    tests/abstract, with the other side as the writer of cross-runtime vectors)."""

    runtime: ClassVar[str]

    @pytest.mark.parametrize("entry", list(ENTRIES))
    def test_a_record_is_read_back_as_written(self, records: ManifestRecords, tmp_path: Path,
                                              entry: str, request: pytest.FixtureRequest
                                              ) -> None:
        expect_agreement(request, records.runtime, f"own-{entry}")
        for size, crc in zip(SIZES, CRCS):
            records.write(tmp_path, ENTRIES[entry], size=size, crc32c=crc, state="complete",
                          suffix="rec")
            assert_body(records.read(tmp_path, ENTRIES[entry], "rec"), ENTRIES[entry], size,
                        crc, "complete")
        records.write(tmp_path, ENTRIES[entry], size=7, crc32c=0, state="writing",
                      suffix="writing")
        assert_body(records.read(tmp_path, ENTRIES[entry], "writing"), ENTRIES[entry], 7, 0,
                    "writing")

    @pytest.mark.parametrize("entry", list(ENTRIES))
    def test_the_record_file_is_named_by_the_quoted_entry(
            self, records: ManifestRecords, tmp_path: Path, entry: str) -> None:
        for suffix in ("rec", "writing"):
            name = quote(ENTRIES[entry], safe="")
            assert records.file_name(tmp_path, ENTRIES[entry], suffix) == f"{name}.{suffix}"

    @pytest.mark.parametrize("damage", list(DAMAGES))
    def test_a_damaged_record_is_ignored(self, records: ManifestRecords,
                                         other: ManifestRecords, tmp_path: Path, damage: str,
                                         request: pytest.FixtureRequest) -> None:
        expect_agreement(request, records.runtime, f"damaged-{damage}")
        entry = ENTRIES["plain"]
        for writer in (records, other):
            workdir = tmp_path / writer.runtime
            writer.write(workdir, entry, size=10, crc32c=5, state="complete", suffix="rec")
            path = workdir / "manifest" / writer.file_name(workdir, entry, "rec")
            path.write_bytes(DAMAGES[damage](path.read_bytes()))
            assert records.read(workdir, entry, "rec") is None, f"written by {writer.runtime}"

    def test_the_bound_counts_the_complete_records_that_verify(
            self, records: ManifestRecords, other: ManifestRecords, tmp_path: Path,
            request: pytest.FixtureRequest) -> None:
        expect_agreement(request, records.runtime, "usage")
        for n, writer in enumerate((records, other)):
            writer.write(tmp_path, f"table-replicas/ok-{n}", size=1000 + n, crc32c=1,
                         state="complete", suffix="rec")
            writer.write(tmp_path, f"table-replicas/announced-{n}", size=50_000, crc32c=0,
                         state="writing", suffix="writing")
            writer.write(tmp_path, f"table-replicas/torn-{n}", size=70_000, crc32c=1,
                         state="complete", suffix="rec")
            torn = tmp_path / "manifest" / writer.file_name(
                tmp_path, f"table-replicas/torn-{n}", "rec")
            envelope = json.loads(torn.read_bytes())
            envelope["body"]["size"] += 1
            torn.write_text(json.dumps(envelope))
        assert records.usage(tmp_path) == 2001


class TestPythonManifest(ManifestSuite):
    """Python also reads every record the JVM wrote (recovery, eviction, ``gc``); the JVM reads
    only its own (a table replica's, when it serves the replica), so no test makes it read
    Python's (whose ``written_at`` has a fraction of a second only Python reproduces)."""

    runtime = "python"

    @pytest.mark.parametrize("entry", list(ENTRIES))
    def test_a_record_the_jvm_wrote_is_read(self, records: ManifestRecords,
                                            other: ManifestRecords, tmp_path: Path,
                                            entry: str) -> None:
        other.write(tmp_path, ENTRIES[entry], size=1 << 40, crc32c=0xFFFFFFFF, state="complete",
                    suffix="rec")
        assert_body(records.read(tmp_path, ENTRIES[entry], "rec"), ENTRIES[entry], 1 << 40,
                    0xFFFFFFFF, "complete")

    @pytest.fixture
    def records(self) -> ManifestRecords:
        return PythonManifest()

    @pytest.fixture
    def other(self, jvm: JvmDriver) -> ManifestRecords:
        return JavaManifest(jvm)


class TestJavaManifest(ManifestSuite):
    runtime = "java"

    @pytest.fixture
    def records(self, jvm: JvmDriver) -> ManifestRecords:
        return JavaManifest(jvm)

    @pytest.fixture
    def other(self) -> ManifestRecords:
        return PythonManifest()
