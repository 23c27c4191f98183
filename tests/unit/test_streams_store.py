"""streams/store.py and gc on real local folders: records of locations that are gone, and
locations looked up by any spelling of their URL (issue 33)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.lifecycle.streams import LocationCheck, StreamRecord
from spark_steward.storage import Storage
from spark_steward.streams.gc import collect_streams
from spark_steward.streams.location import Location
from spark_steward.streams.store import StreamStore
from tests.unit.conftest import FakeClock
from tests.unit.failing_fs import failing_storage

QID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
GRACE = 600.0


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> StreamStore:
    registry = ApplicationRegistry(Storage.from_url((tmp_path / "storage").as_uri()),
                                   heartbeat_timeout=60.0, clock=clock)
    return StreamStore(registry, abandoned_after=7 * 86400.0, drop_grace=GRACE,
                       temp_horizon=3600.0, clock=clock)


def _record(location: Path, clock: FakeClock, **changes: Any) -> StreamRecord:
    fields: dict[str, Any] = {"name": "q1", "app_id": "app-20261127000000-0001",
                              "run_id": "run-1", "started": clock.now - 100,
                              "heartbeat": clock.now - 50, "stopped": clock.now}
    fields.update(changes)
    return StreamRecord(QID, f"file:{location}", **fields)


def _written(store: StreamStore, record: StreamRecord) -> StreamRecord:
    store.records.write(record)
    return record


def test_record_of_a_deleted_location_is_removed_after_the_drop_grace(
        store: StreamStore, tmp_path: Path, clock: FakeClock) -> None:
    record = _written(store, _record(tmp_path / "ckpt", clock))  # never created: gone
    clock.advance(GRACE - 1)
    assert "drop-grace" in (store.forget_gone(record) or "")
    assert store.records.read(QID) == record
    clock.advance(1)
    assert store.forget_gone(record) is None
    assert store.records.read(QID) is None


def test_record_of_an_existing_location_stays(store: StreamStore, tmp_path: Path,
                                              clock: FakeClock) -> None:
    (tmp_path / "ckpt").mkdir()
    record = _written(store, _record(tmp_path / "ckpt", clock))
    clock.advance(GRACE * 10)
    assert store.presence(record) == (LocationCheck.PRESENT, None)
    assert "exists" in (store.forget_gone(record) or "")
    assert store.records.read(QID) == record


def test_record_of_a_gone_location_stays_while_its_run_may_be_active(
        store: StreamStore, tmp_path: Path, clock: FakeClock) -> None:
    # no stop time and no proof the application ended (it has no record: liveness unknown)
    record = _written(store, _record(tmp_path / "ckpt", clock, stopped=None))
    clock.advance(GRACE * 10)
    assert "still runs" in (store.forget_gone(record) or "")
    assert store.records.read(QID) == record


def test_a_storage_error_while_looking_for_the_location_keeps_the_record(
        store: StreamStore, tmp_path: Path, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    record = _written(store, _record(tmp_path / "ckpt", clock))
    broken, fs = failing_storage()
    fs.fail("info", None, PermissionError(13, "denied"))
    location = Location(record.location)
    location.storage = broken
    monkeypatch.setattr(store, "location", lambda r: location)
    clock.advance(GRACE * 10)
    check, error = store.presence(record)
    assert check is LocationCheck.UNKNOWN and "denied" in (error or "")
    why = store.forget_gone(record)
    assert why is not None and "unknown" in why and "denied" in why
    assert store.records.read(QID) == record
    report = collect_streams(store, dry_run=False)
    assert report.deleted == [] and store.records.read(QID) == record


def test_a_run_recorded_between_the_check_and_the_removal_keeps_its_record(
        store: StreamStore, tmp_path: Path, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    record = _written(store, _record(tmp_path / "ckpt", clock))
    clock.advance(GRACE * 10)
    restarted = _record(tmp_path / "ckpt", clock, run_id="run-2", stopped=None)
    looked = store.presence

    def presence_then_a_restart(r: StreamRecord) -> Any:
        found = looked(r)
        store.records.write(restarted)  # the new run records itself meanwhile
        return found

    monkeypatch.setattr(store, "presence", presence_then_a_restart)
    assert "changed meanwhile" in (store.forget_gone(record) or "")
    assert store.records.read(QID) == restarted


def test_gc_removes_the_record_of_a_gone_location_and_dry_run_only_reports_it(
        store: StreamStore, tmp_path: Path, clock: FakeClock) -> None:
    record = _written(store, _record(tmp_path / "ckpt", clock))
    clock.advance(GRACE + 1)
    dry = collect_streams(store, dry_run=True)
    assert [d.app_id for d in dry.deleted] == [record.location]
    assert store.records.read(QID) == record
    done = collect_streams(store, dry_run=False)
    assert [d.app_id for d in done.deleted] == [record.location] and done.failed == []
    assert store.records.read(QID) is None


def test_gc_keeps_a_gone_locations_record_within_the_grace_and_says_why(
        store: StreamStore, tmp_path: Path, clock: FakeClock) -> None:
    _written(store, _record(tmp_path / "ckpt", clock))
    report = collect_streams(store, dry_run=False)
    assert report.deleted == [] and len(report.skipped) == 1
    assert "drop-grace" in report.skipped[0].reason
    assert store.records.read(QID) is not None


@pytest.mark.parametrize("spelling", ["{p}", "{p}/", "file://{p}", "file:{p}/",
                                      "file://localhost{p}", "{parent}/x/../ckpt"])
def test_a_location_is_found_by_any_spelling_of_its_url(store: StreamStore, tmp_path: Path,
                                                       clock: FakeClock, spelling: str) -> None:
    record = _written(store, _record(tmp_path / "ckpt", clock))
    typed = spelling.format(p=tmp_path / "ckpt", parent=tmp_path)
    assert store.records.find(typed) == record


def test_cli_unpack_finds_a_location_recorded_in_hadoops_spelling(tmp_path: Path) -> None:
    location = tmp_path / "x"
    location.mkdir()
    storage = Storage.from_url((tmp_path / "storage").as_uri())
    registry = ApplicationRegistry(storage, heartbeat_timeout=60.0)
    StreamStore(registry, abandoned_after=1.0, drop_grace=1.0, temp_horizon=1.0).records.write(
        StreamRecord(QID, f"file:{location}", "q1", "app-20261127000000-0001", "run-1",
                     started=1.0, heartbeat=2.0, stopped=3.0))
    for command in ("unpack", "drop"):
        done = subprocess.run([sys.executable, "-m", "spark_steward.cli", "streams", command,
                               location.as_uri(), "--storage", (tmp_path / "storage").as_uri(),
                               "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["query_id"] == QID
    assert not location.exists()
