"""``spark-steward gc --local-dir``: dead applications' host-local working dirs go, live ones
and ones without a readable record stay, a dry run touches nothing."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.cli import main
from spark_steward.storage import Storage

DEAD, LIVE, UNKNOWN = "app-dead-1", "app-live-2", "app-unknown-3"


@pytest.fixture
def world(tmp_path: Path) -> tuple[str, Path]:
    storage = Storage.from_url((tmp_path / "storage").as_uri())
    registry = ApplicationRegistry(storage, heartbeat_timeout=120)
    registry.finish(registry.new_record(DEAD, "done"))
    registry.write(registry.new_record(LIVE, "running"))  # this process, fresh heartbeat
    local = tmp_path / "local"
    for app in (DEAD, LIVE, UNKNOWN):
        (local / app / "state" / "models").mkdir(parents=True)
        (local / app / "state" / "models" / "ranker").write_bytes(b"x" * 100)
        (local / app / "manifest").mkdir()
        (local / app / "manifest" / "r.rec").write_bytes(b"{}")
    (local / "not an app id").mkdir()
    return storage.url, local


def _gc(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str]:
    code = main(["gc", "--storage", url, *args])
    return code, capsys.readouterr().out


def test_dead_applications_folders_go_and_nothing_else(capsys: pytest.CaptureFixture[str],
                                                       world: tuple[str, Path]) -> None:
    url, local = world
    code, out = _gc(capsys, url, "--local-dir", str(local))
    assert code == 0
    assert "local: deleted 2 files, 102 B of 1 application" in out
    assert f"  skipped {LIVE}: application is live" in out
    assert f"  skipped {UNKNOWN}: no application record" in out
    assert sorted(p.name for p in local.iterdir()) == sorted([LIVE, UNKNOWN, "not an app id"])
    assert (local / LIVE / "state" / "models" / "ranker").read_bytes() == b"x" * 100
    assert _gc(capsys, url, "--local-dir", str(local))[1].count("local: nothing to delete") == 1


def test_dry_run_and_json(capsys: pytest.CaptureFixture[str], world: tuple[str, Path]) -> None:
    url, local = world
    before = sorted(str(p) for p in local.rglob("*"))
    code, out = _gc(capsys, url, "--local-dir", str(local), "--dry-run", "--json")
    assert code == 0
    [collector] = [c for c in json.loads(out)["collectors"] if c["name"] == "local"]
    assert collector["deleted"] == [{"app_id": DEAD, "files": 2, "bytes": 102}]
    assert {s["app_id"] for s in collector["skipped"]} == {LIVE, UNKNOWN}
    assert sorted(str(p) for p in local.rglob("*")) == before


def test_without_local_dir_gc_does_not_look_at_any(capsys: pytest.CaptureFixture[str],
                                                   world: tuple[str, Path]) -> None:
    url, local = world
    code, out = _gc(capsys, url, "--json")
    assert code == 0 and "local" not in [c["name"] for c in json.loads(out)["collectors"]]
    assert (local / DEAD).exists()


def test_a_failed_removal_is_reported_and_exits_1(capsys: pytest.CaptureFixture[str],
                                                  world: tuple[str, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    url, local = world

    def refusing_rmtree(path: str, onerror: Any) -> None:
        onerror(os.unlink, path, (PermissionError, PermissionError(13, "denied"), None))

    monkeypatch.setattr("spark_steward.local.gc.shutil.rmtree", refusing_rmtree)
    code, out = _gc(capsys, url, "--local-dir", str(local))
    assert code == 1
    assert f"  FAILED {local / DEAD}: {local / DEAD}: [Errno 13] denied" in out
    assert (local / DEAD).exists()
