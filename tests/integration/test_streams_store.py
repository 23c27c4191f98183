"""Streaming checkpoint locations on real files: intents, surveys, drops, gc and the registry."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from spark_steward.applications import ApplicationRecord, ApplicationRegistry
from spark_steward.errors import StorageError, StreamActive, StreamError
from spark_steward.lifecycle.liveness import Place
from spark_steward.streams.lifecycle.locations import LocationCheck, StreamRecord, StreamState
from spark_steward.storage import Storage
from spark_steward.streams.gc import collect_streams
from spark_steward.streams.location import Location, checksum_sidecar, fsspec_url
from spark_steward.streams.registry import StreamRegistry
from spark_steward.streams.store import StreamStore
from tests.unit.failing_fs import failing_storage

T0 = 1_700_000_000.0
HEARTBEAT_TIMEOUT = 60.0
ABANDONED = 7 * 86400.0
GRACE = 600.0
HORIZON = 300.0
UUID = "123e4567-e89b-12d3-a456-426614174000"
QID1 = "11111111-1111-4111-8111-111111111111"
QID2 = "22222222-2222-4222-8222-222222222222"
QID3 = "33333333-3333-4333-8333-333333333333"
GOOD_INTENT = "f" * 32 + ".json"
HOSTILE_INTENT = "0" * 32 + ".json"
LOCATION_LOG = "spark_steward.streams.location"


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- helpers ---------------------------------------------------------------------------------------


def _write(path: Path, data: bytes = b"x", mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _intent(location: Path, rel: Any, name: str = GOOD_INTENT, *, raw: bytes | None = None,
            mtime: float | None = None) -> Path:
    # "time": when Spark asked (epoch ms, as the JVM writes it): now, after the target's write
    body = raw if raw is not None else json.dumps({"path": rel,
                                                   "time": int(time.time() * 1000)}).encode()
    return _write(location / "_steward" / "deletes" / name, body, mtime)


def _age_all(root: Path, mtime: float) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (mtime, mtime), follow_symlinks=False)


def _spark_location(root: Path, mtime: float = T0 - 5000) -> Path:
    """A small checkpoint location as Spark leaves it on a local file system."""
    _write(root / "metadata", b'{"id":"x"}')
    _write(root / "offsets" / "0", b"v1\n{}\n")
    _write(root / "offsets" / ".0.crc", b"crc")
    _write(root / "commits" / "0", b"v1\n")
    _write(root / "state" / "0" / "0" / "1.delta", b"d" * 100)
    _age_all(root, mtime)
    return root


def _url(path: Path) -> str:
    return f"file:{path}"  # Spark's form: file:/abs/path


def _stream(location: Path, query_id: str = QID1, *, name: str | None = "q1",
            app_id: str = "app-1", stopped: float | None = None,
            heartbeat: float = T0 - 5000, dropping: float | None = None) -> StreamRecord:
    return StreamRecord(query_id, _url(location), name, app_id, "run-1", T0 - 6000, heartbeat,
                        stopped, None, dropping)


def _never_probe(pid: int, pid_start: int | None) -> bool:
    raise AssertionError("the process probe must not decide in these tests")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage.from_url(f"file://{tmp_path / 'steward'}")


@pytest.fixture
def apps(storage: Storage, clock: Clock) -> ApplicationRegistry:
    # A place without boot id: liveness is judged from heartbeats, never by probing a pid.
    return ApplicationRegistry(storage, heartbeat_timeout=HEARTBEAT_TIMEOUT, clock=clock,
                               here=Place("gc-host"), probe=_never_probe)


@pytest.fixture
def store(apps: ApplicationRegistry, clock: Clock) -> StreamStore:
    return StreamStore(apps, abandoned_after=ABANDONED, drop_grace=GRACE, temp_horizon=HORIZON,
                       clock=clock)


def _live_app(apps: ApplicationRegistry, app_id: str = "app-1") -> ApplicationRecord:
    record = apps.new_record(app_id, "streaming")
    apps.write(record)
    return record


def _finished_app(apps: ApplicationRegistry, app_id: str = "app-1") -> ApplicationRecord:
    return apps.finish(apps.new_record(app_id, "streaming"))


def _crashed_app(apps: ApplicationRegistry, clock: Clock, app_id: str = "app-1") -> None:
    record = apps.new_record(app_id, "streaming")
    apps.write(replace(record, heartbeat_at=clock() - HEARTBEAT_TIMEOUT - 1))


# -- fsspec_url and checksum_sidecar ---------------------------------------------------------------


@pytest.mark.parametrize("location,expected", [
    ("file:/ckpt/q1", "file:///ckpt/q1"),
    ("file:///ckpt/q1", "file:///ckpt/q1"),
    ("s3a://bucket/ckpt", "s3://bucket/ckpt"),
    ("abfss://c@a.dfs.core.windows.net/x", "abfs://c@a.dfs.core.windows.net/x"),
    ("memory://x", "memory://x"),
])
def test_fsspec_url_maps_hadoop_urls(location: str, expected: str) -> None:
    assert fsspec_url(location) == expected


@pytest.mark.parametrize("rel,expected", [
    ("offsets/12", "offsets/.12.crc"),
    ("metadata", ".metadata.crc"),
    ("state/0/3/7.delta", "state/0/3/.7.delta.crc"),
])
def test_checksum_sidecar_names(rel: str, expected: str) -> None:
    assert checksum_sidecar(rel) == expected


# -- (a) retrying intents --------------------------------------------------------------------------


def test_retry_intents_deletes_target_then_sidecar_then_intent(tmp_path: Path) -> None:
    root = _spark_location(tmp_path / "q1")
    _intent(root, "offsets/0")
    location = Location(_url(root))

    assert location.pending_intents() == [GOOD_INTENT]
    assert location.retry_intents() == 1

    assert not (root / "offsets" / "0").exists()
    assert not (root / "offsets" / ".0.crc").exists()
    assert not (root / "_steward" / "deletes" / GOOD_INTENT).exists()
    assert (root / "commits" / "0").exists() and (root / "metadata").exists()
    assert location.pending_intents() == []


def test_retry_intents_deletes_a_directory_target_recursively(tmp_path: Path) -> None:
    root = _spark_location(tmp_path / "q1")
    _intent(root, "state/0")
    assert Location(_url(root)).retry_intents() == 1
    assert not (root / "state" / "0").exists()
    assert (root / "state").is_dir() and (root / "offsets" / "0").exists()


def test_retry_intents_idempotent_when_target_already_gone(tmp_path: Path) -> None:
    root = _spark_location(tmp_path / "q1")
    (root / "offsets" / "0").unlink()
    _intent(root, "offsets/0")
    location = Location(_url(root))

    assert location.retry_intents() == 1
    assert not (root / "offsets" / ".0.crc").exists()  # the sidecar still goes
    assert not (root / "_steward" / "deletes" / GOOD_INTENT).exists()
    assert location.retry_intents() == 0
    assert (root / "commits" / "0").exists()


def test_retry_intents_ignores_temp_files_of_intents_being_written(tmp_path: Path) -> None:
    root = _spark_location(tmp_path / "q1")
    temp = _intent(root, "commits/0", f".{'a' * 32}.json.{UUID}.tmp")
    location = Location(_url(root))
    assert location.pending_intents() == []
    assert location.retry_intents() == 0
    assert temp.exists() and (root / "commits" / "0").exists()


def test_retry_intents_raises_storage_error_and_keeps_intent_when_delete_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _spark_location(tmp_path / "q1")
    intent = _intent(root, "offsets/0")

    def failing(self: Storage, rel: str) -> bool:
        raise StorageError(f"injected failure deleting {rel}")

    monkeypatch.setattr(Storage, "delete", failing)
    with pytest.raises(StorageError, match="injected"):
        Location(_url(root)).retry_intents()
    monkeypatch.undo()
    assert intent.exists() and (root / "offsets" / "0").exists()
    assert Location(_url(root)).retry_intents() == 1
    assert not intent.exists() and not (root / "offsets" / "0").exists()


# -- (b) hostile intents ---------------------------------------------------------------------------


def _hostile_setup(tmp_path: Path) -> tuple[Path, Path]:
    """A location ``ckpt/q1`` with a good intent (for ``commits/0``) and a file ``keep``; an
    outside folder ``ckpt/outside`` holding files no intent may touch."""
    root = _spark_location(tmp_path / "ckpt" / "q1")
    _write(root / "keep", b"keep me")
    _write(root / "_steward" / "keep.json", b"{}")
    _intent(root, "commits/0", GOOD_INTENT)
    outside = tmp_path / "ckpt" / "outside"
    _write(outside / "victim", b"outside")
    _write(outside / "victim.json", b'{"path": "keep"}')
    _write(tmp_path / "ckpt" / "x", b"sibling")
    return root, outside


def _assert_only_good_intent_acted(tmp_path: Path, root: Path, outside: Path) -> None:
    assert not (root / "commits" / "0").exists(), "the good intent was not processed"
    assert (root / "keep").read_bytes() == b"keep me"
    assert (root / "_steward" / "keep.json").exists()
    assert (root / "offsets" / "0").exists() and (root / "metadata").exists()
    assert (outside / "victim").read_bytes() == b"outside"
    assert (outside / "victim.json").exists()
    assert (tmp_path / "ckpt" / "x").read_bytes() == b"sibling"
    assert not list((root / "_steward" / "deletes").iterdir()), "an intent was left"


HOSTILE_BODIES: list[Any] = [
    pytest.param(json.dumps({"path": "../outside/victim"}).encode(), id="dotdot"),
    pytest.param(json.dumps({"path": "../x"}).encode(), id="dotdot-sibling"),
    pytest.param(json.dumps({"path": "a/../../x"}).encode(), id="dotdot-nested"),
    pytest.param(json.dumps({"path": "keep/."}).encode(), id="dot"),
    pytest.param(json.dumps({"path": "keep/"}).encode(), id="trailing-slash"),
    pytest.param(json.dumps({"path": "offsets//0"}).encode(), id="empty-segment"),
    pytest.param(json.dumps({"path": "_steward/keep.json"}).encode(), id="own-folder-file"),
    pytest.param(json.dumps({"path": "_steward"}).encode(), id="own-folder"),
    pytest.param(json.dumps({"path": "_steward/deletes"}).encode(), id="intents-folder"),
    pytest.param(json.dumps({"path": ""}).encode(), id="empty"),
    pytest.param(json.dumps({"path": 5}).encode(), id="number"),
    pytest.param(json.dumps({"path": ["keep"]}).encode(), id="list"),
    pytest.param(json.dumps({"path": None}).encode(), id="null"),
    pytest.param(json.dumps({"where": "keep"}).encode(), id="no-path"),
    pytest.param(json.dumps(["keep"]).encode(), id="json-list"),
    pytest.param(json.dumps("keep").encode(), id="json-string"),
    pytest.param(b'{"path": "keep"', id="truncated-json"),
    pytest.param(b"\xff\xfe\x00garbage", id="binary"),
    pytest.param(b"", id="empty-file"),
    pytest.param(json.dumps({"path": "keep", "pad": "x" * (1 << 20)}).encode(), id="1MiB"),
]


@pytest.mark.parametrize("body", HOSTILE_BODIES)
def test_hostile_intent_dropped_with_warning_and_good_one_processed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, body: bytes) -> None:
    root, outside = _hostile_setup(tmp_path)
    _write(root / "a" / "f")  # so that a/.. resolves on the file system
    _intent(root, None, HOSTILE_INTENT, raw=body)
    caplog.set_level(logging.WARNING, logger=LOCATION_LOG)

    assert Location(_url(root)).retry_intents() == 2

    _assert_only_good_intent_acted(tmp_path, root, outside)
    assert (root / "a" / "f").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("dropping" in m and HOSTILE_INTENT in m for m in warnings), warnings


def test_hostile_absolute_path_to_outside_file_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, outside = _hostile_setup(tmp_path)
    _intent(root, str(outside / "victim"), HOSTILE_INTENT)
    # The same path below the location must not be taken for it either.
    inside_twin = _write(root / str(outside / "victim").lstrip("/"), b"twin")
    caplog.set_level(logging.WARNING, logger=LOCATION_LOG)

    assert Location(_url(root)).retry_intents() == 2

    _assert_only_good_intent_acted(tmp_path, root, outside)
    assert inside_twin.exists()
    assert any("dropping" in r.getMessage() and "victim" in r.getMessage()
               for r in caplog.records)


def test_hostile_intent_naming_another_intent_dropped_and_other_still_processed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, outside = _hostile_setup(tmp_path)
    other = "other.json"
    _intent(root, "offsets/0", other)
    _intent(root, f"_steward/deletes/{other}", HOSTILE_INTENT)  # sorts first
    caplog.set_level(logging.WARNING, logger=LOCATION_LOG)

    assert Location(_url(root)).retry_intents() == 3

    assert not (root / "offsets" / "0").exists(), "the other intent was not processed"
    assert not (root / "commits" / "0").exists()
    assert not list((root / "_steward" / "deletes").iterdir())
    assert (outside / "victim").exists() and (root / "keep").exists()
    assert any("_steward/deletes/other.json" in r.getMessage() for r in caplog.records)


def test_hostile_intent_with_backslash_dotdot_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, outside = _hostile_setup(tmp_path)
    _intent(root, "..\\outside\\victim", HOSTILE_INTENT)
    caplog.set_level(logging.WARNING, logger=LOCATION_LOG)

    assert Location(_url(root)).retry_intents() == 2

    _assert_only_good_intent_acted(tmp_path, root, outside)


def test_hostile_intent_with_backslashes_into_own_folder_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, outside = _hostile_setup(tmp_path)
    _intent(root, "offsets/0", "other.json")
    _intent(root, "_steward\\deletes\\other.json", HOSTILE_INTENT)  # sorts first
    caplog.set_level(logging.WARNING, logger=LOCATION_LOG)

    Location(_url(root)).retry_intents()

    assert not (root / "offsets" / "0").exists(), "the other intent was not processed"


def test_intent_vanishing_between_listing_and_reading_is_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _spark_location(tmp_path / "q1")
    _intent(root, "offsets/0", HOSTILE_INTENT)
    _intent(root, "commits/0", GOOD_INTENT)
    real = Storage.read_bytes

    def concurrent_cleaner(self: Storage, rel: str) -> bytes:
        if rel.endswith(HOSTILE_INTENT):  # another process settles it first
            os.remove(self.path("offsets/0"))
            os.remove(self.path(rel))
        return real(self, rel)

    monkeypatch.setattr(Storage, "read_bytes", concurrent_cleaner)
    Location(_url(root)).retry_intents()

    assert not (root / "commits" / "0").exists()
    assert not list((root / "_steward" / "deletes").iterdir())


def test_hostile_intent_with_nul_byte_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, outside = _hostile_setup(tmp_path)
    _intent(root, "keep\u0000x", HOSTILE_INTENT)
    caplog.set_level(logging.WARNING, logger=LOCATION_LOG)

    assert Location(_url(root)).retry_intents() == 2

    _assert_only_good_intent_acted(tmp_path, root, outside)


def test_intent_naming_symlink_to_outside_file_deletes_only_the_link(tmp_path: Path) -> None:
    root, outside = _hostile_setup(tmp_path)
    os.symlink(outside / "victim", root / "offsets" / "5")
    _intent(root, "offsets/5", HOSTILE_INTENT)

    assert Location(_url(root)).retry_intents() == 2

    assert not os.path.lexists(root / "offsets" / "5")
    _assert_only_good_intent_acted(tmp_path, root, outside)


def test_intent_naming_symlink_to_outside_folder_deletes_only_the_link(tmp_path: Path) -> None:
    root, outside = _hostile_setup(tmp_path)
    os.symlink(outside, root / "state" / "1")
    _intent(root, "state/1", HOSTILE_INTENT)

    assert Location(_url(root)).retry_intents() == 2

    assert not os.path.lexists(root / "state" / "1")
    _assert_only_good_intent_acted(tmp_path, root, outside)


def test_intent_through_symlinked_folder_does_not_delete_outside(tmp_path: Path) -> None:
    root, outside = _hostile_setup(tmp_path)
    os.symlink(outside, root / "state" / "2")
    _intent(root, "state/2/victim", HOSTILE_INTENT)

    Location(_url(root)).retry_intents()

    assert (outside / "victim").read_bytes() == b"outside"


def test_symlinked_intents_folder_does_not_delete_outside(tmp_path: Path) -> None:
    root = _spark_location(tmp_path / "ckpt" / "q1")
    outside = tmp_path / "ckpt" / "outside"
    _write(outside / "settings.json", b'{"user": "data"}')
    (root / "_steward").mkdir()
    os.symlink(outside, root / "_steward" / "deletes")

    Location(_url(root)).retry_intents()

    assert (outside / "settings.json").read_bytes() == b'{"user": "data"}'


# -- (c) survey and temp sweep ---------------------------------------------------------------------


def _surveyed_location(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    root = _spark_location(tmp_path / "q1", mtime=T0 - 1000)
    files = {
        "intent1": _intent(root, "offsets/0", "a" * 32 + ".json", mtime=T0 - 1000),
        "intent2": _intent(root, "commits/0", "b" * 32 + ".json", mtime=T0 - 900),
        "old_temp": _write(root / "offsets" / f".1.{UUID}.tmp", b"12345", T0 - HORIZON),
        "old_delta": _write(root / "state" / "0" / "0" / f".2.delta.{UUID}.tmp", b"1", T0 - 5000),
        "intent_temp": _write(root / "_steward" / "deletes" / f".{'c' * 32}.json.{UUID}.tmp",
                              b"{}", T0 - 3000),
        "young_temp": _write(root / "commits" / f".1.{UUID}.tmp", b"123", T0 - HORIZON + 1),
        "young_intent_temp": _write(root / "_steward" / "deletes" / f".{'d' * 32}.json.{UUID}.tmp",
                                    b"{}", T0 - 10),
        "not_temp": _write(root / "offsets" / "notes.tmp", b"n", T0 - 9000),
    }
    return root, files


def _rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


def test_survey_counts_files_bytes_newest_and_intents(tmp_path: Path) -> None:
    root, _ = _surveyed_location(tmp_path)
    expected_files = [p for p in root.rglob("*") if p.is_file()]
    found = Location(_url(root)).survey(now=T0, query_active=True, horizon=HORIZON)
    assert found.files == len(expected_files) == 13
    assert found.bytes == sum(p.stat().st_size for p in expected_files)
    assert found.newest == T0 - 10
    assert found.intents == 2


def test_survey_of_active_query_lists_only_temps_older_than_horizon(tmp_path: Path) -> None:
    root, files = _surveyed_location(tmp_path)
    found = Location(_url(root)).survey(now=T0, query_active=True, horizon=HORIZON)
    assert sorted(found.temps) == sorted(_rel(root, files[k]) for k in
                                         ("old_temp", "old_delta", "intent_temp"))


def test_survey_of_stopped_query_lists_every_temp(tmp_path: Path) -> None:
    root, files = _surveyed_location(tmp_path)
    found = Location(_url(root)).survey(now=T0, query_active=False, horizon=HORIZON)
    assert sorted(found.temps) == sorted(_rel(root, files[k]) for k in
                                         ("old_temp", "old_delta", "intent_temp", "young_temp",
                                          "young_intent_temp"))


def test_sweep_temps_deletes_only_what_survey_listed(tmp_path: Path) -> None:
    root, files = _surveyed_location(tmp_path)
    location = Location(_url(root))
    found = location.survey(now=T0, query_active=True, horizon=HORIZON)
    assert location.sweep_temps(found.temps) == 3
    for key in ("old_temp", "old_delta", "intent_temp"):
        assert not files[key].exists(), key
    for key in ("young_temp", "young_intent_temp", "not_temp", "intent1", "intent2"):
        assert files[key].exists(), key
    assert (root / "offsets" / "0").exists() and (root / "offsets" / ".0.crc").exists()


def test_survey_of_missing_location_is_empty(tmp_path: Path) -> None:
    location = Location(_url(tmp_path / "nothing"))
    assert not location.exists()
    found = location.survey(now=T0, query_active=False, horizon=HORIZON)
    assert (found.files, found.bytes, found.newest, found.temps, found.intents) == (
        0, 0, None, [], 0)


# -- (d) dropping ----------------------------------------------------------------------------------


def _registered(storage: Storage, record: StreamRecord) -> StreamRecord:
    StreamRegistry(storage).write(record)
    return record


def _record_file(storage: Storage, query_id: str) -> Path:
    return Path(storage.path(f"streams/{query_id}.json"))


def test_drop_refused_while_application_live_and_not_stopped(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        clock: Clock) -> None:
    root = _spark_location(tmp_path / "q1")
    _live_app(apps)
    _registered(storage, _stream(root))
    clock.advance(10 * GRACE)
    apps.heartbeat(apps.read("app-1"))  # type: ignore[arg-type]

    with pytest.raises(StreamActive, match="app-1"):
        store.drop("q1")

    assert (root / "offsets" / "0").exists()
    assert StreamRegistry(storage).read(QID1).dropping is None  # type: ignore[union-attr]


def test_drop_refused_for_application_without_record(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _registered(storage, _stream(root))
    with pytest.raises(StreamActive, match="still runs"):
        store.drop(QID1)
    assert (root / "metadata").exists() and _record_file(storage, QID1).exists()


def test_drop_refused_within_grace_then_allowed(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        clock: Clock) -> None:
    root = _spark_location(tmp_path / "q1")
    _live_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 100, heartbeat=T0 - 100))

    with pytest.raises(StreamActive, match="drop-grace"):
        store.drop("q1")
    assert (root / "metadata").exists()
    assert StreamRegistry(storage).read(QID1).dropping is None  # type: ignore[union-attr]

    clock.advance(GRACE - 100 - 1)
    with pytest.raises(StreamActive, match="drop-grace"):
        store.drop("q1")

    clock.advance(1)
    result = store.drop("q1")
    assert result.query_id == QID1 and result.location == _url(root)
    assert not root.exists()
    assert not _record_file(storage, QID1).exists()


def test_drop_refused_while_files_newer_than_record(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        clock: Clock) -> None:
    root = _spark_location(tmp_path / "q1")
    _write(root / "offsets" / "1", b"v1\n", T0 - 30)  # a writer without spark-steward
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5000))

    with pytest.raises(StreamActive, match="drop-grace"):
        store.drop(_url(root))
    assert (root / "offsets" / "1").exists()

    clock.advance(GRACE - 30)
    store.drop(_url(root))
    assert not root.exists()


def test_drop_after_grace_removes_location_and_record_and_counts(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _intent(root, "offsets/0", mtime=T0 - 5000)
    files = [p for p in root.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    _crashed_app(apps, apps.clock)  # type: ignore[arg-type]
    _registered(storage, _stream(root))  # never stopped, but its application crashed
    other = _spark_location(tmp_path / "q2")
    _registered(storage, _stream(other, QID2, name="q2"))

    result = store.drop(QID1)

    assert (result.files, result.bytes) == (len(files), size) == (6, size)
    assert not root.exists()
    assert not _record_file(storage, QID1).exists()
    assert (other / "metadata").exists() and _record_file(storage, QID2).exists()


def test_drop_of_stopped_query_of_this_live_application_allowed(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _live_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5000))
    store.drop("q1", this_app="app-1")
    assert not root.exists() and not _record_file(storage, QID1).exists()


def test_drop_of_running_query_of_this_application_refused(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _crashed_app(apps, apps.clock)  # type: ignore[arg-type]
    _registered(storage, _stream(root))
    with pytest.raises(StreamActive, match="still runs"):
        store.drop("q1", this_app="app-1")  # this_app overrides the stale record: live
    assert root.exists()


def test_begin_drop_records_dropping_before_deleting_anything(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5000))

    record = store.begin_drop("q1")

    assert record.dropping == T0
    assert StreamRegistry(storage).read(QID1) == record
    assert (root / "offsets" / "0").exists()
    assert store.status(record).state is StreamState.DROPPING


def test_begin_drop_of_dropping_record_keeps_the_recorded_drop(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        clock: Clock) -> None:
    root = _spark_location(tmp_path / "q1")
    recorded = _registered(storage, _stream(root, dropping=T0 - 10))
    _live_app(apps)
    clock.advance(100)
    assert store.begin_drop("q1") == recorded
    assert StreamRegistry(storage).read(QID1) == recorded  # not rewritten
    assert (root / "metadata").exists()


def test_interrupted_drop_resumed_by_collect_streams(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5000))
    store.begin_drop("q1")  # the driver died before finish_drop

    dry = collect_streams(store, dry_run=True)
    assert [d.app_id for d in dry.deleted] == [_url(root)]
    assert dry.deleted[0].files == 5
    assert root.exists() and _record_file(storage, QID1).exists()

    report = collect_streams(store, dry_run=False)
    assert report.ok and [d.app_id for d in report.deleted] == [_url(root)]
    assert report.deleted[0].files == 5
    assert not root.exists()
    assert not _record_file(storage, QID1).exists()


def test_interrupted_drop_resumed_even_when_a_new_application_is_live(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _registered(storage, _stream(root, dropping=T0 - 10))
    _live_app(apps)
    result = store.drop("q1")
    assert result.files == 5
    assert not root.exists() and not _record_file(storage, QID1).exists()


def test_drop_failing_in_delete_all_leaves_record_dropping_and_gc_finishes(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _spark_location(tmp_path / "q1")
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5000))
    real = Location.delete_all
    calls: list[str] = []

    def fail_once(self: Location) -> None:
        calls.append(self.location)
        if len(calls) == 1:
            raise StorageError("injected: the storage is down")
        real(self)

    monkeypatch.setattr(Location, "delete_all", fail_once)

    with pytest.raises(StorageError, match="injected"):
        store.drop("q1")
    left = StreamRegistry(storage).read(QID1)
    assert left is not None and left.dropping == T0
    assert (root / "offsets" / "0").exists()

    report = collect_streams(store, dry_run=False)
    assert report.ok and len(calls) == 2
    assert not root.exists() and not _record_file(storage, QID1).exists()


def test_drop_failing_midway_in_storage_delete_leaves_record_and_gc_finishes(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _spark_location(tmp_path / "q1")
    _intent(root, "offsets/0", mtime=T0 - 5000)
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5000))
    real = Storage.delete
    deleted: list[str] = []

    def fail_second(self: Storage, rel: str) -> bool:
        deleted.append(rel)
        if len(deleted) == 2:
            raise StorageError(f"injected failure deleting {rel}")
        return real(self, rel)

    monkeypatch.setattr(Storage, "delete", fail_second)

    with pytest.raises(StorageError, match="injected"):
        store.drop("q1")
    monkeypatch.undo()
    assert deleted[0] != "_steward"  # our own folder goes last
    left = StreamRegistry(storage).read(QID1)
    assert left is not None and left.dropping is not None
    assert root.exists() and (root / "_steward" / "deletes" / GOOD_INTENT).exists()

    report = collect_streams(store, dry_run=False)
    assert report.ok and len(report.deleted) == 1
    assert not root.exists() and not _record_file(storage, QID1).exists()


def test_collect_streams_reports_failure_of_resumed_drop_and_keeps_record(
        tmp_path: Path, storage: Storage, store: StreamStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = _spark_location(tmp_path / "q1")
    _registered(storage, _stream(root, dropping=T0 - 10))

    def down(self: Location) -> None:
        raise StorageError("injected: still down")

    monkeypatch.setattr(Location, "delete_all", down)
    report = collect_streams(store, dry_run=False)
    assert not report.ok and report.failed[0].path == _url(root)
    assert "still down" in report.failed[0].message
    assert _record_file(storage, QID1).exists() and root.exists()


def test_finish_drop_of_already_deleted_location_removes_record(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    record = _registered(storage, _stream(tmp_path / "gone", dropping=T0 - 10))
    result = store.finish_drop(record)
    assert (result.files, result.bytes) == (0, 0)
    assert not _record_file(storage, QID1).exists()


# -- (e) collect_streams ---------------------------------------------------------------------------


def _dirty(root: Path) -> dict[str, Path]:
    """A location with a recorded failed delete and temp files old and young."""
    _spark_location(root)
    return {
        "target": _write(root / "offsets" / "7", b"v1\n", T0 - 5000),
        "sidecar": _write(root / "offsets" / ".7.crc", b"c", T0 - 5000),
        "intent": _intent(root, "offsets/7", mtime=T0 - 5000),
        "old_temp": _write(root / "offsets" / f".8.{UUID}.tmp", b"t", T0 - 5000),
        "young_temp": _write(root / "commits" / f".8.{UUID}.tmp", b"t", T0 - 5),
    }


def test_collect_streams_skips_running_query(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = tmp_path / "q1"
    files = _dirty(root)
    _live_app(apps)
    _registered(storage, _stream(root, heartbeat=T0 - 5))

    report = collect_streams(store, dry_run=False)

    assert report.deleted == [] and report.failed == []
    assert [s.app_id for s in report.skipped] == [_url(root)]
    assert "app-1" in report.skipped[0].reason
    for key, path in files.items():
        assert path.exists(), key


def test_collect_streams_skips_query_of_application_without_record(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    root = tmp_path / "q1"
    files = _dirty(root)
    _registered(storage, _stream(root, app_id="app-unknown"))
    report = collect_streams(store, dry_run=False)
    assert len(report.skipped) == 1 and report.deleted == []
    assert all(p.exists() for p in files.values())


def test_collect_streams_cleans_stopped_query(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = tmp_path / "q1"
    files = _dirty(root)
    _live_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5))
    seen: list[tuple[int, int, str]] = []

    report = collect_streams(store, dry_run=False, progress=lambda *a: seen.append(a))

    assert report.ok and report.skipped == []
    assert [(d.app_id, d.files) for d in report.deleted] == [(_url(root), 3)]
    for key in ("target", "sidecar", "intent", "old_temp", "young_temp"):
        assert not files[key].exists(), key
    assert (root / "offsets" / "0").exists() and (root / "metadata").exists()
    assert _record_file(storage, QID1).exists()
    assert seen == [(1, 1, _url(root))]


def test_collect_streams_cleans_query_of_crashed_application(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        clock: Clock) -> None:
    root = tmp_path / "q1"
    files = _dirty(root)
    _crashed_app(apps, clock)
    _registered(storage, _stream(root))
    report = collect_streams(store, dry_run=False)
    assert report.ok and len(report.deleted) == 1
    assert not files["target"].exists() and not files["young_temp"].exists()
    assert (root / "offsets" / "0").exists()


def test_collect_streams_dry_run_reports_without_deleting(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = tmp_path / "q1"
    files = _dirty(root)
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5))

    report = collect_streams(store, dry_run=True)

    assert report.dry_run and report.ok
    assert [(d.app_id, d.files) for d in report.deleted] == [(_url(root), 3)]
    for key, path in files.items():
        assert path.exists(), key


def test_collect_streams_leaves_clean_stopped_query_unreported(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    root = _spark_location(tmp_path / "q1")
    _finished_app(apps)
    _registered(storage, _stream(root, stopped=T0 - 5))
    report = collect_streams(store, dry_run=False)
    assert report.deleted == [] and report.skipped == [] and report.failed == []
    assert len([p for p in root.rglob("*") if p.is_file()]) == 5


def test_collect_streams_mixed_locations(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    running, stopped = tmp_path / "run", tmp_path / "stop"
    running_files, stopped_files = _dirty(running), _dirty(stopped)
    _live_app(apps, "app-live")
    _finished_app(apps, "app-done")
    _registered(storage, _stream(running, QID1, name="a", app_id="app-live"))
    _registered(storage, _stream(stopped, QID2, name="b", app_id="app-done"))

    report = collect_streams(store, dry_run=False)

    assert [s.app_id for s in report.skipped] == [_url(running)]
    assert [d.app_id for d in report.deleted] == [_url(stopped)]
    assert all(p.exists() for p in running_files.values())
    assert not any(p.exists() for p in stopped_files.values())


# -- (f) the registry ------------------------------------------------------------------------------


@pytest.fixture
def streams(tmp_path: Path, storage: Storage) -> StreamRegistry:
    registry = StreamRegistry(storage)
    registry.write(_stream(tmp_path / "ckpt" / "q1", QID1, name="orders"))
    registry.write(_stream(tmp_path / "ckpt" / "q2", QID2, name=None))
    return registry


def test_find_by_name(streams: StreamRegistry) -> None:
    assert streams.find("orders").query_id == QID1


def test_find_by_query_id(streams: StreamRegistry) -> None:
    assert streams.find(QID2).query_id == QID2
    assert streams.find(QID1).query_id == QID1


def test_find_by_location_url_with_and_without_trailing_slash(
        tmp_path: Path, streams: StreamRegistry) -> None:
    assert streams.find(f"file:{tmp_path}/ckpt/q2").query_id == QID2
    assert streams.find(f"file:{tmp_path}/ckpt/q2/").query_id == QID2


def test_find_by_plain_path(tmp_path: Path, streams: StreamRegistry) -> None:
    assert streams.find(f"{tmp_path}/ckpt/q1").query_id == QID1
    assert streams.find(f"{tmp_path}/ckpt/q1/").query_id == QID1


def test_find_by_plain_path_of_triple_slash_location(tmp_path: Path, storage: Storage) -> None:
    registry = StreamRegistry(storage)
    registry.write(replace(_stream(tmp_path / "q3", QID3), location=f"file://{tmp_path}/q3"))
    assert registry.find(f"{tmp_path}/q3").query_id == QID3


def test_find_unknown_raises_stream_error(tmp_path: Path, streams: StreamRegistry) -> None:
    for wanted in ("nope", f"{tmp_path}/ckpt", f"file:{tmp_path}/ckpt/q", QID3):
        with pytest.raises(StreamError, match="no streaming checkpoint location"):
            streams.find(wanted)


def test_find_ambiguous_name_names_both_ids(tmp_path: Path, streams: StreamRegistry) -> None:
    streams.write(_stream(tmp_path / "ckpt" / "q3", QID3, name="orders"))
    with pytest.raises(StreamError) as raised:
        streams.find("orders")
    assert QID1 in str(raised.value) and QID3 in str(raised.value)
    assert streams.find(QID3).name == "orders"  # the id still tells them apart


def _writers(storage: Storage) -> dict[str, Callable[[Path], None]]:
    return {
        "garbage": lambda p: p.write_bytes(b"not a record"),
        "empty": lambda p: p.write_bytes(b""),
        "bad-field": lambda p: storage.write_record(
            f"streams/{QID3}.json", {**_stream(p, QID3).to_json(), "started": "yesterday"}),
        "other-format": lambda p: storage.write_record(
            f"streams/{QID3}.json", {**_stream(p, QID3).to_json(), "format": 2}),
    }


@pytest.mark.parametrize("kind", ["garbage", "empty", "bad-field", "other-format"])
def test_unreadable_record_skipped_by_all_with_warning(
        tmp_path: Path, storage: Storage, streams: StreamRegistry,
        caplog: pytest.LogCaptureFixture, kind: str) -> None:
    path = _record_file(storage, QID3)
    _writers(storage)[kind](path)
    caplog.set_level(logging.WARNING, logger="spark_steward.streams.registry")

    assert sorted(r.query_id for r in streams.all()) == [QID1, QID2]

    assert any(QID3 in r.getMessage() and "unreadable" in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
    assert path.exists()  # never deleted
    with pytest.raises(StreamError, match="unreadable"):
        streams.read(QID3)


def test_all_ignores_files_not_named_like_records(storage: Storage,
                                                  streams: StreamRegistry) -> None:
    _write(Path(storage.path("streams")) / "notes.txt", b"x")
    _write(Path(storage.path("streams")) / "not-an-id.json", b"x")
    _write(Path(storage.path("streams")) / f".{QID3}.json.tmp-1", b"x")
    assert sorted(r.query_id for r in streams.all()) == [QID1, QID2]


def test_statuses_skip_unreadable_record(
        tmp_path: Path, storage: Storage, store: StreamStore, streams: StreamRegistry) -> None:
    _record_file(storage, QID3).write_bytes(b"junk")
    assert sorted(s.record.query_id for s in store.statuses()) == [QID1, QID2]


def test_record_path_refuses_non_ids(storage: Storage) -> None:
    with pytest.raises(StreamError):
        StreamRegistry(storage).record_path("../applications/app-1")
    with pytest.raises(StreamError):
        StreamRegistry(storage).remove("x")


# -- records of locations that are gone (issue 33) -------------------------------------------------


def test_record_of_a_deleted_location_is_removed_after_the_drop_grace(
        tmp_path: Path, storage: Storage, store: StreamStore, clock: Clock) -> None:
    record = _registered(storage, _stream(tmp_path / "gone", stopped=T0))  # never created
    clock.advance(GRACE - 1)
    assert "drop-grace" in (store.forget_gone(record) or "")
    assert _record_file(storage, QID1).exists()
    clock.advance(1)
    assert store.forget_gone(record) is None
    assert not _record_file(storage, QID1).exists()


def test_record_of_an_existing_location_stays(
        tmp_path: Path, storage: Storage, store: StreamStore, clock: Clock) -> None:
    root = _spark_location(tmp_path / "q1")
    record = _registered(storage, _stream(root, stopped=T0 - 5000))
    assert store.presence(record) == (LocationCheck.PRESENT, None)
    assert "exists" in (store.forget_gone(record) or "")
    assert _record_file(storage, QID1).exists()


def test_record_of_a_gone_location_stays_while_its_application_is_live(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore) -> None:
    _live_app(apps)  # a fresh heartbeat; the run never said it stopped
    record = _registered(storage, _stream(tmp_path / "gone"))
    assert "still runs in application app-1" in (store.forget_gone(record) or "")
    assert _record_file(storage, QID1).exists()


def test_record_of_a_gone_location_stays_while_its_application_is_unknown(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    record = _registered(storage, _stream(tmp_path / "gone", app_id="app-unknown"))
    assert "still runs" in (store.forget_gone(record) or "")
    assert _record_file(storage, QID1).exists()


def test_record_of_a_gone_location_of_a_crashed_application_goes_after_its_last_heartbeat(
        tmp_path: Path, storage: Storage, apps: ApplicationRegistry, store: StreamStore,
        clock: Clock) -> None:
    _crashed_app(apps, clock)
    record = _registered(storage, _stream(tmp_path / "gone", heartbeat=T0 - GRACE + 1))
    assert "drop-grace" in (store.forget_gone(record) or "")
    clock.advance(1)
    assert store.forget_gone(record) is None
    assert not _record_file(storage, QID1).exists()


def test_a_storage_error_while_looking_for_the_location_keeps_the_record(
        tmp_path: Path, storage: Storage, store: StreamStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    record = _registered(storage, _stream(tmp_path / "gone", stopped=T0 - 5000))
    location = Location(record.location)
    location.storage, fs = failing_storage()
    fs.fail("info", None, PermissionError(13, "denied"))  # fsspec's exists() would say False
    monkeypatch.setattr(store, "location", lambda r: location)
    check, error = store.presence(record)
    assert check is LocationCheck.UNKNOWN and "denied" in (error or "")
    why = store.forget_gone(record)
    assert why is not None and "unknown" in why and "denied" in why
    report = collect_streams(store, dry_run=False)
    assert report.deleted == [] and _record_file(storage, QID1).exists()


def test_a_run_recorded_between_the_check_and_the_removal_keeps_its_record(
        tmp_path: Path, storage: Storage, store: StreamStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    record = _registered(storage, _stream(tmp_path / "gone", stopped=T0 - 5000))
    restarted = replace(record, run_id="run-2", started=T0, heartbeat=T0, stopped=None)
    looked = store.presence

    def presence_then_a_restart(r: StreamRecord) -> Any:
        found = looked(r)
        StreamRegistry(storage).write(restarted)  # the new run records itself meanwhile
        return found

    monkeypatch.setattr(store, "presence", presence_then_a_restart)
    assert "changed meanwhile" in (store.forget_gone(record) or "")
    assert StreamRegistry(storage).read(QID1) == restarted


def test_collect_streams_removes_the_record_of_a_gone_location_and_dry_run_only_reports_it(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    record = _registered(storage, _stream(tmp_path / "gone", stopped=T0 - 5000))
    dry = collect_streams(store, dry_run=True)
    assert [(d.app_id, d.files) for d in dry.deleted] == [(record.location, 1)]
    assert _record_file(storage, QID1).exists()
    done = collect_streams(store, dry_run=False)
    assert [d.app_id for d in done.deleted] == [record.location] and done.failed == []
    assert not _record_file(storage, QID1).exists()


def test_collect_streams_keeps_a_gone_locations_record_within_the_grace_and_says_why(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    _registered(storage, _stream(tmp_path / "gone", stopped=T0 - 5))
    report = collect_streams(store, dry_run=False)
    assert report.deleted == [] and len(report.skipped) == 1
    assert "drop-grace" in report.skipped[0].reason
    assert _record_file(storage, QID1).exists()


# -- locations in any spelling (issue 33) ----------------------------------------------------------


@pytest.mark.parametrize("spelling", ["{p}", "{p}/", "file://{p}", "file:{p}/", "file://{p}/",
                                      "file://localhost{p}", "{parent}/x/../q1",
                                      "{parent}/./q1"])
def test_a_location_is_found_by_any_spelling_of_its_url(
        tmp_path: Path, storage: Storage, spelling: str) -> None:
    for recorded in (f"file:{tmp_path}/q1", f"file://{tmp_path}/q1", f"file:{tmp_path}/q1/"):
        registry = StreamRegistry(storage)
        registry.write(replace(_stream(tmp_path / "q1"), location=recorded))
        typed = spelling.format(p=tmp_path / "q1", parent=tmp_path)
        assert registry.find(typed).query_id == QID1, (recorded, typed)


def test_a_location_is_not_found_by_another_locations_spelling(
        tmp_path: Path, streams: StreamRegistry) -> None:
    for typed in (f"{tmp_path}/ckpt/q", f"{tmp_path}/ckpt/q1x", f"s3a://b{tmp_path}/ckpt/q1",
                  "ckpt/q1"):
        with pytest.raises(StreamError, match="no streaming checkpoint location named"):
            streams.find(typed)


def test_cli_unpack_and_drop_find_a_location_recorded_in_hadoops_spelling(
        tmp_path: Path) -> None:
    location = tmp_path / "x"
    location.mkdir()
    storage = Storage.from_url((tmp_path / "storage").as_uri())
    StreamRegistry(storage).write(replace(_stream(location), stopped=T0))  # file:/.../x
    for command in ("unpack", "drop"):
        done = subprocess.run([sys.executable, "-m", "spark_steward.cli", "streams", command,
                               location.as_uri(), "--storage", storage.url, "--json"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["query_id"] == QID1
    assert not location.exists() and not _record_file(storage, QID1).exists()


def test_a_location_is_recorded_normalised_when_spark_announces_it(tmp_path: Path) -> None:
    from spark_steward.kernel.events import StreamLocation
    from spark_steward.streams.service import StreamService

    service = StreamService()
    service._on_event(StreamLocation(0, 0, f"file://{tmp_path}/a/../q1/", QID1))
    assert service._location_of(QID1) == f"file:{tmp_path}/q1"


# -- intents of files Spark wrote again (issue 33, point c) ----------------------------------------


def test_retry_intents_keeps_a_file_spark_wrote_again_after_its_delete_failed(
        tmp_path: Path) -> None:
    root = _spark_location(tmp_path / "q1")
    asked = int((T0 - 100) * 1000)
    target = _write(root / "offsets" / "7", b"v1\nnew\n", T0 - 50)  # rewritten after the ask
    sidecar = _write(root / "offsets" / ".7.crc", b"c", T0 - 50)
    intent = _intent(root, "offsets/7", raw=json.dumps({"path": "offsets/7",
                                                        "time": asked}).encode())
    assert Location(_url(root)).retry_intents() == 1
    assert target.read_bytes() == b"v1\nnew\n" and sidecar.exists() and not intent.exists()


@pytest.mark.parametrize("asked", [int((T0 - 50) * 1000), int((T0 - 50) * 1000) + 1, None, "x"])
def test_retry_intents_deletes_a_file_written_before_the_ask_or_of_unknown_time(
        tmp_path: Path, asked: Any) -> None:
    root = _spark_location(tmp_path / "q1")
    target = _write(root / "offsets" / "7", b"v1\n", T0 - 50)
    body: dict[str, Any] = {"path": "offsets/7"}
    if asked is not None:
        body["time"] = asked
    intent = _intent(root, "offsets/7", raw=json.dumps(body).encode())
    assert Location(_url(root)).retry_intents() == 1
    assert not target.exists() and not intent.exists()


def test_clean_of_an_idle_location_spares_young_temp_files_of_a_run_recorded_since(
        tmp_path: Path, storage: Storage, store: StreamStore) -> None:
    root = tmp_path / "q1"
    files = _dirty(root)
    idle = _registered(storage, _stream(root, stopped=T0 - 4000))
    StreamRegistry(storage).write(replace(idle, run_id="run-2", started=T0 - 1, heartbeat=T0 - 1,
                                          stopped=None))  # a new run, after gc read the record
    store.clean(idle, active=False)
    assert files["young_temp"].exists()  # the new run's write in flight
    assert not files["old_temp"].exists() and not files["target"].exists()
