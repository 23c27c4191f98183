"""Host-local stores of Spark Connect sessions: each session's stores are apart from the
application's and from other sessions' of the same name, and an ended session's go whole (its
records through the manifest, then its folder with the lock files), others untouched."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from spark_steward.local.stores import FOLDER, LocalState, session_folder, sweep_sessions
from spark_steward.local.working_dir import WorkingDir, entry_name

A, B = str(uuid.uuid4()), str(uuid.uuid4())


def _work(root: Path) -> WorkingDir:
    return WorkingDir(root, "app-1")


def _entries(work: WorkingDir) -> set[str]:
    return {r.entry for r in work.records()}


def test_a_session_s_store_is_apart_from_the_application_s_and_other_sessions(
        tmp_path: Path) -> None:
    work = _work(tmp_path)
    stores = {owner: LocalState(work, "shared", owner=owner) for owner in ("", A, B)}
    for owner, store in stores.items():
        store.put("who", (owner or "app").encode())
    # Each reads its own value back, from a fresh view too.
    for owner in ("", A, B):
        assert LocalState(_work(tmp_path), "shared", owner=owner).get("who") \
            == (owner or "app").encode()
    assert _entries(work) == {f"{FOLDER}/shared/who", f"{session_folder(A)}/shared/who",
                              f"{session_folder(B)}/shared/who"}


@pytest.mark.parametrize("name", [".connect", "%2Econnect", "connect", ".", ".."])
def test_no_application_store_name_reaches_the_sessions_folder(tmp_path: Path,
                                                               name: str) -> None:
    encoded = entry_name(name)
    assert not encoded.startswith(".")  # so never the sessions' ".connect" folder
    store = LocalState(_work(tmp_path), name)
    store.put("k", b"v")
    work = _work(tmp_path)
    sweep_sessions(work, [A])
    assert LocalState(work, name).get("k") == b"v"


def test_sweeping_an_ended_session_removes_its_stores_and_folder_only(tmp_path: Path) -> None:
    work = _work(tmp_path)
    for owner in ("", A, B):
        for name in ("one", "two"):
            store = LocalState(work, name, owner=owner)
            store.put("k", b"v")
            assert store.get("k") == b"v"  # leaves the lock files a reader makes
    assert sweep_sessions(work, [A]) == 2
    assert not work.path_of(session_folder(A)).exists()
    assert {e for e in _entries(work) if A in e} == set()
    assert LocalState(work, "one", owner=B).get("k") == b"v"
    assert LocalState(work, "one").get("k") == b"v"
    assert len(_entries(work)) == 4
    # Again, and for a session that never wrote here: nothing, nothing else touched.
    assert sweep_sessions(work, [A, str(uuid.uuid4())]) == 0
    assert sweep_sessions(work, []) == 0
    assert len(_entries(work)) == 4
    # The recovery of a later process finds nothing left over.
    assert _work(tmp_path).recover() == 0


def test_a_session_id_that_is_a_path_stays_inside_the_sessions_folder(tmp_path: Path) -> None:
    work = _work(tmp_path)
    LocalState(work, "x").put("k", b"v")
    hostile = "../../x"
    LocalState(work, "y", owner=hostile).put("k", b"w")
    assert work.path_of(session_folder(hostile)).parent == work.path_of(f"{FOLDER}/.connect")
    sweep_sessions(work, [hostile])
    assert LocalState(work, "x").get("k") == b"v"
    assert LocalState(work, "y", owner=hostile).get("k") is None
