"""cli.py ``blobs ls``, ``blobs du`` and ``gc`` over blob folders of live, finished, crashed and
unknown applications, on a local directory and on memory://."""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_steward import cli
from spark_steward.applications import ApplicationRegistry
from spark_steward.blob.gc import (StoredBlob, TempFile, collect_garbage, scan_blobs,
                                   usage_by_application)
from spark_steward.cli import ProgressBar, main
from spark_steward.commands import Collector
from spark_steward.storage import Storage
from tests.unit.conftest import FakeClock, break_delete
from tests.unit.test_cli import _assert_one_error_line, _run

LIVE, DONE, STALE, ORPHAN, TORN = "app-live", "app-done", "app-stale", "app-orphan", "app-torn"
DEAD = (DONE, STALE)
KEPT = (LIVE, ORPHAN, TORN)


def list_stored_blobs(storage: Storage, app_id: str | None = None) -> list[StoredBlob]:
    """Every blob in the storage dir (temp files skipped), sorted by application, scope, key."""
    return scan_blobs(storage, app_id).blobs


def list_temp_files(storage: Storage, app_id: str | None = None) -> list[TempFile]:
    """Temp files of interrupted writes below ``apps/*/blobs``."""
    return scan_blobs(storage, app_id).temp_files



def _put(storage: Storage, app: str, scope: str, content: bytes) -> StoredBlob:
    key = hashlib.sha256(content).hexdigest()
    path = f"apps/{app}/blobs/{scope}/{key}"
    storage.write_atomic(path, content)
    return StoredBlob(app, scope, key, len(content), path)


def _put_temp(storage: Storage, app: str, scope: str, size: int) -> str:
    name = f".{'0' * 64}.tmp-{uuid.uuid4().hex}"
    storage.fs.pipe_file(storage.path(f"apps/{app}/blobs/{scope}/{name}"), b"t" * size)
    return f"apps/{app}/blobs/{scope}/{name}"


@dataclass
class World:
    storage: Storage
    blobs: list[StoredBlob]
    temps: list[str]

    @property
    def url(self) -> str:
        return self.storage.url

    def of(self, app: str) -> list[StoredBlob]:
        return [b for b in self.blobs if b.app_id == app]

    def snapshot(self, app: str) -> dict[str, bytes]:
        """Every file below apps/<app>, byte for byte."""
        return {e.path: self.storage.read_bytes(e.path)
                for e in self.storage.walk_files(f"apps/{app}")}


@pytest.fixture
def world(storage: Storage, clock: FakeClock) -> World:
    """Blobs of a live, a finished, a crashed (stale heartbeat on another host) application,
    one without a record and one with a torn record; plus another capability's files."""
    here = ApplicationRegistry(storage, heartbeat_timeout=120.0)
    clock.now = time.time() - 3600
    an_hour_ago = ApplicationRegistry(storage, heartbeat_timeout=120.0, this_host="far-away",
                                      clock=clock)
    here.write(here.new_record(LIVE, "streaming"))  # this test process: alive
    here.finish(here.new_record(DONE, "batch"))
    an_hour_ago.write(an_hour_ago.new_record(STALE, "silent"))
    storage.write_atomic(f"applications/{TORN}.json", b'{"format": 1, "bo')

    blobs = [
        _put(storage, LIVE, "_app", b"live-1"),
        _put(storage, LIVE, "etl.1", b"L" * 1024),
        _put(storage, DONE, "_app", b"done-1"),
        _put(storage, DONE, "_app", b"done-2" * 10),
        _put(storage, DONE, "etl.2", b"done-3"),
        _put(storage, STALE, "_app", b"stale-1"),
        _put(storage, STALE, "etl.1", b"stale-2"),
        _put(storage, STALE, "etl.3", b"S" * 3000),
        _put(storage, ORPHAN, "_app", b"orphan-1"),
        _put(storage, TORN, "_app", b"torn-1"),
    ]
    temps = [_put_temp(storage, STALE, "etl.1", 11), _put_temp(storage, LIVE, "_app", 5)]
    # Other capabilities of a dead application are not gc's business (yet).
    storage.write_atomic(f"apps/{DONE}/shuffle/part-0", b"keep me")
    return World(storage, sorted(blobs, key=lambda b: b.path), temps)


# -- the inventory API -------------------------------------------------------------------------


def test_list_stored_blobs_skips_temp_files(world: World) -> None:
    assert list_stored_blobs(world.storage) == world.blobs
    assert list_stored_blobs(world.storage, DONE) == world.of(DONE)
    assert sorted(t.path for t in list_temp_files(world.storage)) == sorted(world.temps)
    assert {(t.app_id, t.scope, t.size) for t in list_temp_files(world.storage)} == {
        (STALE, "etl.1", 11), (LIVE, "_app", 5)}


def test_usage_by_application(world: World) -> None:
    registry = ApplicationRegistry(world.storage, heartbeat_timeout=120.0)
    usage = {u.app_id: u for u in usage_by_application(registry)}
    assert list(usage) == sorted(usage) == sorted([LIVE, DONE, STALE, ORPHAN, TORN])
    assert {a: u.liveness for a, u in usage.items()} == {
        LIVE: "live", DONE: "finished", STALE: "crashed", ORPHAN: "unknown", TORN: "unknown"}
    stale = usage[STALE]
    assert (stale.scopes, stale.blobs, stale.bytes, stale.temp_files, stale.temp_bytes) == (
        3, 3, 7 + 7 + 3000, 1, 11)
    assert (usage[DONE].scopes, usage[DONE].blobs, usage[DONE].bytes) == (2, 3, 6 + 60 + 6)


# -- blobs ls ----------------------------------------------------------------------------------


def test_ls_text(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "blobs", "ls", "--storage", world.url)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["APPLICATION", "SCOPE", "KEY", "SIZE", "STATE"]
    rows = lines[1:-1]
    assert len(rows) == len(world.blobs)
    state = {LIVE: "live", DONE: "finished", STALE: "crashed", ORPHAN: "unknown",
             TORN: "unknown"}
    for row, blob in zip(rows, world.blobs):
        cells = row.split()
        assert cells[:3] == [blob.app_id, blob.scope, blob.key[:12]]
        assert cells[-1] == state[blob.app_id]
        assert blob.key not in row  # shortened
    big = next(r for r in rows if r.split()[1] == "etl.1" and r.startswith(LIVE))
    assert "1.0 KiB" in big
    assert "2.9 KiB" in next(r for r in rows if r.split()[1] == "etl.3")
    assert lines[-1].startswith("total: 10 blobs in 9 scopes of 5 applications, ")
    assert "2 temp files not listed" in lines[-1]


def test_ls_json(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "blobs", "ls", "--storage", world.url, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["storage"] == world.url
    assert [(b["app_id"], b["scope"], b["key"], b["size"], b["path"]) for b in data["blobs"]] == [
        (b.app_id, b.scope, b.key, b.size, b.path) for b in world.blobs]
    assert {b["app_id"]: b["liveness"] for b in data["blobs"]} == {
        LIVE: "live", DONE: "finished", STALE: "crashed", ORPHAN: "unknown", TORN: "unknown"}
    assert data["totals"] == {"applications": 5, "scopes": 9, "blobs": 10,
                              "bytes": sum(b.size for b in world.blobs), "temp_files": 2}


def test_ls_one_application(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, _ = _run(capsys, "blobs", "ls", "--storage", world.url, "--json", "--app", STALE)
    assert code == 0
    data = json.loads(out)
    assert [b["key"] for b in data["blobs"]] == [b.key for b in world.of(STALE)]
    assert data["totals"]["temp_files"] == 1
    code, out, _ = _run(capsys, "blobs", "ls", "--storage", world.url, "--app", "app-nothing")
    assert code == 0 and out == f"no blobs of app-nothing in {world.url}\n"


def test_ls_rejects_an_unsafe_app_id(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "blobs", "ls", "--storage", world.url, "--app", "../etc")
    _assert_one_error_line(code, out, err, "'../etc'")


def test_ls_and_du_of_an_empty_storage(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    missing = tmp_path / "not-yet"
    code, out, _ = _run(capsys, "blobs", "ls", "--storage", str(missing))
    assert code == 0 and out == f"no blobs in {missing.as_uri()}\n"
    code, out, _ = _run(capsys, "blobs", "du", "--storage", str(missing), "--json")
    assert code == 0 and json.loads(out)["applications"] == []
    assert not missing.exists()


# -- blobs du ----------------------------------------------------------------------------------


def test_du_json(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "blobs", "du", "--storage", world.url, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    apps = {a["app_id"]: a for a in data["applications"]}
    assert apps[LIVE] == {"app_id": LIVE, "liveness": "live", "scopes": 2, "blobs": 2,
                          "bytes": 6 + 1024, "temp_files": 1, "temp_bytes": 5}
    assert apps[ORPHAN]["liveness"] == "unknown" and apps[ORPHAN]["blobs"] == 1
    assert data["totals"] == {"applications": 5, "scopes": 9, "blobs": 10,
                              "bytes": sum(b.size for b in world.blobs), "temp_files": 2,
                              "temp_bytes": 16}


def test_du_text(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "blobs", "du", "--storage", world.url)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["APPLICATION", "STATE", "SCOPES", "BLOBS", "SIZE", "TEMP"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[STALE] == [STALE, "crashed", "3", "3", "2.9", "KiB", "1"]
    assert rows[DONE] == [DONE, "finished", "2", "3", "72", "B", "0"]
    assert rows[LIVE][:4] == [LIVE, "live", "2", "2"]
    assert rows["total"][:3] == ["total", "9", "10"] and rows["total"][-1] == "2"


# -- gc ----------------------------------------------------------------------------------------


def _gc(capsys: pytest.CaptureFixture[str], world: World, *extra: str) -> tuple[int, Any, str]:
    code, out, err = _run(capsys, "gc", "--storage", world.url, "--json", *extra)
    return code, json.loads(out), err


def _expected_deleted(world: World) -> list[dict[str, Any]]:
    sizes = {STALE: 11, DONE: 0}  # the stale app's temp file goes with its folder
    return [{"app_id": app, "files": len(world.of(app)) + (1 if app == STALE else 0),
             "bytes": sum(b.size for b in world.of(app)) + sizes[app]} for app in sorted(DEAD)]


def test_gc_dry_run_deletes_nothing(capsys: pytest.CaptureFixture[str], world: World) -> None:
    before = {app: world.snapshot(app) for app in (*DEAD, *KEPT)}
    code, data, err = _gc(capsys, world, "--dry-run")
    assert code == 0 and err == ""
    assert data["dry_run"] is True and data["ok"] is True
    blobs = data["collectors"][0]
    assert blobs["name"] == "blobs"
    assert blobs["name"] == "blobs"
    assert blobs["deleted"] == _expected_deleted(world)
    assert {s["app_id"] for s in blobs["skipped"]} == set(KEPT)
    assert blobs["failed"] == []
    assert {app: world.snapshot(app) for app in (*DEAD, *KEPT)} == before

    code, out, _ = _run(capsys, "gc", "--storage", world.url, "--dry-run")
    assert code == 0
    assert f"would delete {DONE}: 3 files, 72 B" in out
    assert f"would delete {STALE}: 4 files, 3.0 KiB" in out
    assert "deleted " not in out
    assert {app: world.snapshot(app) for app in (*DEAD, *KEPT)} == before


def test_gc_deletes_exactly_the_dead_applications_blobs(capsys: pytest.CaptureFixture[str],
                                                        world: World) -> None:
    kept = {app: world.snapshot(app) for app in KEPT}
    records = sorted(world.storage.list_names("applications"))
    code, data, err = _gc(capsys, world)
    assert code == 0 and err == ""
    blobs = data["collectors"][0]
    assert blobs["name"] == "blobs"
    assert blobs["deleted"] == _expected_deleted(world)
    assert blobs["failed"] == []
    reasons = {s["app_id"]: s["reason"] for s in blobs["skipped"]}
    assert reasons[LIVE] == "application is live"
    assert reasons[ORPHAN] == "no application record"
    assert reasons[TORN].startswith("application record unreadable: ") and TORN in reasons[TORN]

    for app in DEAD:
        assert not world.storage.exists(f"apps/{app}/blobs")
    assert {app: world.snapshot(app) for app in KEPT} == kept  # byte for byte
    assert world.storage.read_bytes(f"apps/{DONE}/shuffle/part-0") == b"keep me"
    assert sorted(world.storage.list_names("applications")) == records
    assert {b.app_id for b in list_stored_blobs(world.storage)} == set(KEPT)


def test_gc_text_summary(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "gc", "--storage", world.url)
    assert code == 0 and err == ""  # stderr is no TTY: no progress bar
    assert out.splitlines()[0] == "blobs: deleted 7 files, 3.0 KiB of 2 applications"
    assert f"  deleted {DONE}: 3 files, 72 B" in out
    assert f"  skipped {LIVE}: application is live" in out
    assert f"  skipped {ORPHAN}: no application record" in out
    assert "would" not in out and "FAILED" not in out


def test_second_gc_is_a_no_op(capsys: pytest.CaptureFixture[str], world: World) -> None:
    assert _gc(capsys, world)[0] == 0
    after_first = {app: world.snapshot(app) for app in (*DEAD, *KEPT)}
    code, data, _ = _gc(capsys, world)
    assert code == 0
    blobs = data["collectors"][0]
    assert blobs["name"] == "blobs"
    assert blobs["deleted"] == [] and blobs["failed"] == []
    assert {s["app_id"] for s in blobs["skipped"]} == set(KEPT)
    assert {app: world.snapshot(app) for app in (*DEAD, *KEPT)} == after_first
    code, out, _ = _run(capsys, "gc", "--storage", world.url)
    assert out.splitlines()[0] == "blobs: nothing to delete"


def test_a_failing_delete_exits_1_and_the_rest_is_deleted(
        capsys: pytest.CaptureFixture[str], world: World,
        monkeypatch: pytest.MonkeyPatch) -> None:
    broken = f"apps/{DONE}/blobs/_app"
    allow_delete = break_delete(monkeypatch, broken)
    code, data, _ = _gc(capsys, world)
    assert code == 1 and data["ok"] is False
    blobs = data["collectors"][0]
    assert blobs["name"] == "blobs"
    assert blobs["failed"] == [{"path": broken,
                                "message": f"could not delete {world.storage.url_of(broken)}: "
                                           "injected"}]
    deleted = {d["app_id"]: d for d in blobs["deleted"]}
    assert deleted[STALE] == _expected_deleted(world)[1]
    assert deleted[DONE] == {"app_id": DONE, "files": 1, "bytes": 6}  # etl.2 only
    assert not world.storage.exists(f"apps/{STALE}/blobs")
    assert not world.storage.exists(f"apps/{DONE}/blobs/etl.2")
    assert list_stored_blobs(world.storage, DONE) == [
        b for b in world.of(DONE) if b.scope == "_app"]

    code, out, _ = _run(capsys, "gc", "--storage", world.url)
    assert code == 1
    assert f"FAILED {broken}: " in out and "1 delete failed" in out

    allow_delete()
    code, data, _ = _gc(capsys, world)  # the retry finishes the job
    assert code == 0
    assert data["collectors"][0]["deleted"] == [{"app_id": DONE, "files": 2, "bytes": 66}]
    assert not world.storage.exists(f"apps/{DONE}/blobs")


def test_heartbeat_timeout_override_keeps_a_slow_application(
        capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, data, _ = _gc(capsys, world, "--heartbeat-timeout", "2h")
    assert code == 0
    blobs = data["collectors"][0]
    assert blobs["name"] == "blobs"
    assert [d["app_id"] for d in blobs["deleted"]] == [DONE]
    assert {s["app_id"]: s["reason"] for s in blobs["skipped"]}[STALE] == "application is live"
    assert list_stored_blobs(world.storage, STALE) == world.of(STALE)


def test_collectors_run_in_order(capsys: pytest.CaptureFixture[str], world: World,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_steward.gc import GcReport

    seen: list[str] = []

    def later(registry: ApplicationRegistry, args: object, progress: object) -> GcReport:
        seen.append("later")
        assert not world.storage.exists(f"apps/{DONE}/blobs")  # blobs ran first
        return GcReport(dry_run=False)

    declared = cli.gc_collectors()
    monkeypatch.setattr(cli, "gc_collectors", lambda: [*declared, Collector("later", later)])
    code, data, _ = _gc(capsys, world)
    assert code == 0 and seen == ["later"]
    assert [c["name"] for c in data["collectors"]] == ["blobs", "checkpoints", "caches", "streams",
                                                     "later"]


# -- progress ----------------------------------------------------------------------------------


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


_BAR = re.compile(r"\[([#.]{20})\] (\d+)/(\d+) (\S+)")


def test_progress_bar_on_a_tty(capsys: pytest.CaptureFixture[str], world: World,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    tty = FakeTty()
    monkeypatch.setattr("sys.stderr", tty)
    code, out, _ = _run(capsys, "gc", "--storage", world.url)
    assert code == 0 and out.startswith("blobs: deleted")
    text = tty.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    frames = [_BAR.match(f.strip()) for f in text.rstrip("\n").split("\r")[1:]]
    assert all(frames), text
    steps = [(int(m.group(2)), int(m.group(3)), m.group(4)) for m in frames if m]
    dead_scopes = sorted({(b.app_id, b.scope) for b in world.blobs if b.app_id in DEAD})
    assert [s[:2] for s in steps] == [(i, len(dead_scopes)) for i in
                                     range(1, len(dead_scopes) + 1)]
    assert [s[2] for s in steps] == [f"apps/{a}/blobs/{s}" for a, s in dead_scopes]
    assert frames[-1] is not None and frames[-1].group(1) == "#" * 20


def test_no_progress_bar_without_a_tty(capsys: pytest.CaptureFixture[str], world: World,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    plain = io.StringIO()
    monkeypatch.setattr("sys.stderr", plain)
    code, out, _ = _run(capsys, "gc", "--storage", world.url)
    assert code == 0 and "deleted" in out
    assert plain.getvalue() == ""


def test_progress_bar_skips_small_runs_and_fits_the_line() -> None:
    tty = FakeTty()
    bar = ProgressBar(tty, min_items=4)
    for i in range(1, 4):
        bar(i, 3, "apps/a/blobs/_app")
    bar.close()
    assert tty.getvalue() == ""

    bar(1, 4, "apps/a-long-application-id/blobs/" + "x" * 200)
    bar(2, 4, "short")
    bar.close()
    first, second = tty.getvalue().split("\r")[1:]
    assert len(first) <= 79 and first.startswith("[#####...............] 1/4 ...")
    assert second.rstrip("\n").rstrip() == "[##########..........] 2/4 short"
    assert len(second.rstrip("\n")) == len(first)  # the longer frame is overwritten
    assert tty.getvalue().endswith("\n")


def test_collect_garbage_reports_progress_per_scope(world: World) -> None:
    registry = ApplicationRegistry(world.storage, heartbeat_timeout=120.0)
    calls: list[tuple[int, int, str]] = []
    dry = collect_garbage(registry, dry_run=True, progress=lambda *a: calls.append(a))
    assert calls == [] and dry.dry_run and [d.app_id for d in dry.deleted] == sorted(DEAD)
    report = collect_garbage(registry, dry_run=False, progress=lambda *a: calls.append(a))
    assert report.ok and not report.dry_run
    assert [c[:2] for c in calls] == [(i, 5) for i in range(1, 6)]
    assert report.deleted == [(DONE, 3, 72), (STALE, 4, 3025)]
    assert collect_garbage(registry, dry_run=False).deleted == []


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["blobs", "ls"], ["blobs", "du"], ["gc"], ["gc", "--dry-run"]])
def test_bad_storage_url_is_one_error_line(capsys: pytest.CaptureFixture[str],
                                           argv: list[str]) -> None:
    code, out, err = _run(capsys, *argv, "--storage", "nosuchproto://bucket/x")
    _assert_one_error_line(code, out, err, "nosuchproto://bucket/x")


def test_bad_heartbeat_timeout_is_one_error_line(capsys: pytest.CaptureFixture[str],
                                                 world: World) -> None:
    code, out, err = _run(capsys, "gc", "--storage", world.url, "--heartbeat-timeout", "soon")
    _assert_one_error_line(code, out, err, "spark.steward.heartbeat.timeout", "'soon'")
    assert list_stored_blobs(world.storage) == world.blobs


def test_bad_option_is_one_error_line(capsys: pytest.CaptureFixture[str], world: World) -> None:
    code, out, err = _run(capsys, "gc", "--storage", world.url, "--option", "nope")
    _assert_one_error_line(code, out, err, "'nope'")


def test_blobs_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["blobs"])
    assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err
