"""Packed streaming checkpoint locations on real files (FLIP-306): unpack, drop, survey, CLI.

The location is packed by the real :class:`~spark_steward.streams.packer.Packer`; what Spark
saw before (every logical file and its bytes) is compared with the plain layout after
``unpack``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_steward.errors import StreamActive
from spark_steward.streams.lifecycle.packs import PACKS_FOLDER, packable
from spark_steward.storage import Storage
from spark_steward.streams.location import Location
from spark_steward.streams.packer import Packer
from spark_steward.streams.packs import Packs
from spark_steward.streams.store import StreamStore
from tests.integration.test_streams_store import (GRACE, HORIZON, T0, _finished_app, _live_app,
                                                  _registered, _stream, _write, apps, clock,
                                                  storage, store)

__all__ = ["apps", "clock", "storage", "store"]  # the fixtures, shared


def _packed_location(root: Path, batches: int = 6) -> dict[str, bytes]:
    """A location of ``batches`` committed batches, packed (loose copies removed); returns
    every logical file Spark sees with its bytes."""
    _write(root / "metadata", b'{"id":"x"}')
    for batch in range(batches):
        _write(root / "offsets" / str(batch), f"offsets {batch}".encode())
        _write(root / "offsets" / f".{batch}.crc", b"crc")
        _write(root / "commits" / str(batch), f"commits {batch}".encode())
        for part in (0, 1):
            _write(root / "state" / "0" / str(part) / f"{batch + 1}.delta", bytes([batch]) * 50)
    seen = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and packable(str(p.relative_to(root))) is not None}
    packer = Packer(Location(f"file:{root}"), keep=1, grace=0.0, max_member=1 << 20)
    assert packer.cycle().packed > 0
    assert packer.cycle().removed > 0
    return seen


def _logical(root: Path) -> dict[str, bytes]:
    storage = Storage.from_url(f"file://{root}")
    packs = Packs(storage, str(root))
    out = {rel: packs.member_bytes(m) for rel, m in packs.read().live().items()}
    for path in root.rglob("*"):
        rel = str(path.relative_to(root))
        if path.is_file() and packable(rel) is not None:
            out[rel] = path.read_bytes()
    return out


def test_unpack_writes_every_packed_file_back_and_removes_the_packs(
        tmp_path: Path, storage: Storage, apps, store: StreamStore) -> None:  # noqa: ANN001
    root = tmp_path / "q1"
    seen = _packed_location(root)
    assert not (root / "offsets" / "0").exists() and _logical(root) == seen
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100))

    result = store.unpack("q1")

    assert result.files > 0 and result.packs == 1
    assert not (root / PACKS_FOLDER).exists()
    plain = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
             if p.is_file() and packable(str(p.relative_to(root))) is not None}
    assert plain == seen  # the plain layout holds exactly what Spark saw, byte for byte
    again = store.unpack("q1")
    assert (again.files, again.packs) == (0, 0)


def test_unpack_keeps_a_loose_file_that_won_over_its_packed_copy(
        tmp_path: Path, storage: Storage, apps, store: StreamStore) -> None:  # noqa: ANN001
    root = tmp_path / "q1"
    _packed_location(root)
    _write(root / "offsets" / "1", b"rewritten by Spark")
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100))
    store.unpack("q1")
    assert (root / "offsets" / "1").read_bytes() == b"rewritten by Spark"


def test_unpack_refused_while_the_query_may_run(
        tmp_path: Path, storage: Storage, apps, store: StreamStore) -> None:  # noqa: ANN001
    root = tmp_path / "q1"
    seen = _packed_location(root)
    _live_app(apps)
    _registered(storage, _stream(root))
    with pytest.raises(StreamActive, match="refusing to unpack .*still runs"):
        store.unpack("q1")
    assert _logical(root) == seen and (root / PACKS_FOLDER).exists()


def test_unpack_refused_for_a_location_being_dropped(
        tmp_path: Path, storage: Storage, apps, store: StreamStore) -> None:  # noqa: ANN001
    root = tmp_path / "q1"
    _packed_location(root)
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100, dropping=T0 - 10))
    with pytest.raises(StreamActive, match="being dropped"):
        store.unpack("q1")


def test_a_packed_location_is_dropped_whole(
        tmp_path: Path, storage: Storage, apps, store: StreamStore,  # noqa: ANN001
        clock) -> None:  # noqa: ANN001
    root = tmp_path / "q1"
    _packed_location(root)
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100, heartbeat=T0 - 100))
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (T0 - 100, T0 - 100))
    clock.advance(GRACE)
    result = store.drop("q1")
    assert result.files > 0 and not root.exists()


def test_survey_counts_packs_and_sweeps_the_packers_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "q1"
    _packed_location(root)
    temp = _write(root / PACKS_FOLDER / ".0000000000000009-x.pack.tmp-abc", b"half")
    jvm_temp = _write(root / PACKS_FOLDER / "dead" / ".abc-1.txt.tmp", b"half")
    location = Location(f"file:{root}")
    running = location.survey(now=time.time(), query_active=True, horizon=HORIZON)
    assert running.packs == 1 and running.temps == []  # young, and the query runs
    stopped = location.survey(now=time.time(), query_active=False, horizon=HORIZON)
    assert sorted(stopped.temps) == sorted(str(p.relative_to(root)) for p in (temp, jvm_temp))


def test_cli_streams_unpack_and_du(tmp_path: Path, storage: Storage, apps) -> None:  # noqa: ANN001
    root = tmp_path / "q1"
    seen = _packed_location(root)
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100))
    url = storage.url

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "spark_steward.cli", "streams", *args,
                               "--storage", url, "--json"], capture_output=True, text=True)

    du = cli("du")
    assert du.returncode == 0, du.stderr
    [row] = json.loads(du.stdout)["streams"]
    assert row["packs"] == 1
    done = cli("unpack", "q1")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["packs"] == 1 and body["files"] > 0
    assert _logical(root) == seen
    missing = cli("unpack", "no-such-query")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "no-such-query" in missing.stderr


def test_the_packer_never_packs_or_removes_a_symlink_or_an_oversized_file(tmp_path: Path) -> None:
    """A neighbour's symlink in a state folder (to a file outside the location) is neither read
    into a pack nor deleted, nor is its target; a file over max-member stays loose."""
    root = tmp_path / "q1"
    secret = _write(tmp_path / "outside" / "secret", b"not Spark's")
    _write(root / "metadata", b'{"id":"x"}')
    for batch in range(4):
        _write(root / "offsets" / str(batch), b"o")
        _write(root / "commits" / str(batch), b"c")
        _write(root / "state" / "0" / "0" / f"{batch + 1}.delta", b"d" * 10)
    link = root / "state" / "0" / "0" / "2.snapshot"
    link.symlink_to(secret)
    big = _write(root / "state" / "0" / "0" / "1.snapshot", b"s" * 2048)
    packer = Packer(Location(f"file:{root}"), keep=1, grace=0.0, max_member=1024)
    packer.cycle()
    packer.cycle()
    members = {rel for rel in Packs(Storage.from_url(f"file://{root}"), str(root)).read().live()}
    assert "state/0/0/2.delta" in members  # packing did happen
    assert "state/0/0/2.snapshot" not in members and "state/0/0/1.snapshot" not in members
    assert link.is_symlink() and secret.read_bytes() == b"not Spark's"
    assert big.exists()


def _one_cycle_packed(root: Path) -> None:
    """A location whose last pack is written but not settled (the query stopped inside the
    grace): every packed file still has its loose copy."""
    _write(root / "metadata", b'{"id":"x"}')
    for batch in range(4):
        _write(root / "offsets" / str(batch), f"offsets {batch}".encode())
        _write(root / "commits" / str(batch), f"commits {batch}".encode())
        _write(root / "state" / "0" / "0" / f"{batch + 1}.delta", bytes([batch]) * 20)
    packer = Packer(Location(f"file:{root}"), keep=1, grace=3600.0, max_member=1 << 20)
    assert packer.cycle().packed > 0
    state = Packs(Storage.from_url(f"file://{root}"), str(root)).read()
    assert state.settled == set() and state.packs


def test_unpack_does_not_bring_back_what_spark_deleted_before_the_pack_settled(
        tmp_path: Path, storage: Storage, apps, store: StreamStore) -> None:  # noqa: ANN001
    """A JVM whose view predates a pack deletes the loose copy alone (no tombstone: the pack is
    not in its view). The packer removes loose copies only of settled packs, so a member of an
    unsettled pack without its loose copy is one Spark deleted: unpack must not write it back
    (it did: the file came back for good)."""
    root = tmp_path / "q1"
    _one_cycle_packed(root)
    (root / "offsets" / "0").unlink()  # Spark's retention, through a JVM with a stale view
    (root / "state" / "0" / "0" / "1.delta").unlink()
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100))
    result = store.unpack("q1")
    assert result.files == 0 and result.packs == 1
    assert not (root / "offsets" / "0").exists()
    assert not (root / "state" / "0" / "0" / "1.delta").exists()
    assert (root / "offsets" / "1").read_bytes() == b"offsets 1"


def test_a_cancelled_or_superseded_packer_writes_nothing(tmp_path: Path) -> None:
    """A stopped run's in-flight cycle must not write the catalog a restarted run's packer
    relies on: cancel() stops it before any write, and so does ``owns`` saying another run
    holds the location, before the catalog and before any loose copy goes."""
    from spark_steward.streams.packer import Cancelled

    root = tmp_path / "q1"
    _one_cycle_packed(root)
    before = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    cancelled = Packer(Location(f"file:{root}"), keep=1, grace=0.0, max_member=1 << 20)
    cancelled.cancel()
    with pytest.raises(Cancelled, match="stopped before"):
        cancelled.cycle()
    owner = [True]
    superseded = Packer(Location(f"file:{root}"), keep=1, grace=0.0, max_member=1 << 20,
                        owns=lambda: owner[0])
    owner[0] = False
    with pytest.raises(Cancelled, match="before writing the catalog"):
        superseded.cycle()
    after = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before, "a packer that does not own the location changed it"
    # The control: the owner settles the pack and removes the loose copies.
    owner[0] = True
    assert superseded.cycle().removed > 0
