"""Spark Connect artifacts owned per session (blob/connect_artifacts.py): which folders may be
deleted (checked against a ground truth of our own), the shim's reports parsed, and ``take()``
end to end on real folders with a fake service and drain: no Spark, no JVM."""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Iterator

import pytest

from spark_steward.blob import connect_artifacts
from spark_steward.blob.connect_artifacts import (ArtifactAdded, ConnectArtifacts, SessionEnded,
                                                  _remove, deletable, parse_reports)
from spark_steward.cleaner import RetryingCleaner
from spark_steward.errors import StewardError
from spark_steward.lifecycle.retry import RetryStrategy

LOGGER = "spark_steward.blob.connect_artifacts"

# -- deletable: a differential test against a ground truth ---------------------------------------

ROOT = "/var/spark/artifacts"
OTHER = "/tmp/spark-1a2b/userFiles-3c4d"
U1 = "3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c"
U2 = "0b0f6a3e-3c1b-4d5e-9f00-1a2b3c4d5e6f"
U3 = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4"  # a Spark session id no report names


def _segments(path: str) -> list[str] | None:
    """The segments of an absolute POSIX path ('' and '.' dropped); None when relative."""
    if not path.startswith("/"):
        return None
    return [s for s in path.split("/") if s not in ("", ".")]


def _canonical_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def truth(folder: str, roots: Iterable[str], uuids: Iterable[str]) -> bool:
    """Deletable: the folder's parent is exactly one of the absolute roots (not '/'), its name
    is one of ``uuids`` and a lowercase canonical UUID; no '..' anywhere (string level only)."""
    segments = _segments(folder)
    if not segments or ".." in segments:
        return False
    name, parent = segments[-1], segments[:-1]
    if name not in set(uuids) or not _canonical_uuid(name):
        return False
    for root in roots:
        root_segments = _segments(root)
        if root_segments and ".." not in root_segments and root_segments == parent:
            return True
    return False


#: label -> (folder, whether it is deletable with the good roots and every name as a uuid)
FOLDERS: dict[str, tuple[str, bool]] = {
    "good": (f"{ROOT}/{U1}", True),
    "in the other root": (f"{OTHER}/{U2}", True),
    "trailing slash": (f"{ROOT}/{U1}/", True),
    "trailing dot": (f"{ROOT}/{U1}/.", True),
    "dot segment": (f"{ROOT}/./{U1}", True),
    "doubled slash": (f"/var//spark/artifacts/{U1}", True),
    "relative": (f"var/spark/artifacts/{U1}", False),
    "dot relative": (f"./{U1}", False),
    "bare name": (U1, False),
    "home": (f"~/{U1}", False),
    "leading space": (f" {ROOT}/{U1}", False),
    "dotdot back into the root": (f"{ROOT}/x/../{U1}", False),
    "dotdot through the root": (f"{ROOT}/../artifacts/{U1}", False),
    "dotdot after the name": (f"{ROOT}/{U1}/..", False),
    "dotdot as the name": (f"{ROOT}/{U1}/../..", False),
    "the root itself": (ROOT, False),
    "nested two levels": (f"{ROOT}/{U2}/{U1}", False),
    "in the root's parent": (f"/var/spark/{U1}", False),
    "in the file system's root": (f"/{U1}", False),
    "root name as a prefix": (f"{ROOT}-evil/{U1}", False),
    "through a link's name": (f"/var/spark/link-to-artifacts/{U1}", False),
    "not in the report": (f"{ROOT}/{U3}", False),
    "uppercase": (f"{ROOT}/{U1.upper()}", False),
    "suffix": (f"{ROOT}/{U1}x", False),
    "prefix": (f"{ROOT}/x{U1}", False),
    "newline": (f"{ROOT}/{U1}\n", False),
    "trailing space": (f"{ROOT}/{U1} ", False),
    "braces": (f"{ROOT}/{{{U1}}}", False),
    "urn": (f"{ROOT}/urn:uuid:{U1}", False),
    "no hyphens": (f"{ROOT}/{U1.replace('-', '')}", False),
    "non-ASCII digit": (f"{ROOT}/{U1.replace('3', chr(0x663), 1)}", False),
    "wildcard": (f"{ROOT}/*", False),
    "empty": ("", False),
}

#: label -> (roots, whether the good folder is deletable under them)
ROOTS: dict[str, tuple[tuple[str, ...], bool]] = {
    "good": ((ROOT, OTHER), True),
    "only its root": ((ROOT,), True),
    "its root last": ((OTHER, "/", ROOT), True),
    "only the other": ((OTHER,), False),
    "trailing slash": ((f"{ROOT}/",), True),
    "two trailing slashes": ((f"{ROOT}//",), True),
    "trailing dot": ((f"{ROOT}/.",), True),
    "doubled slash inside": (("/var//spark/artifacts",), True),
    "file system root": (("/",), False),
    "file system root, three slashes": (("///",), False),
    "relative": (("var/spark/artifacts",), False),
    "dot relative": (("./var/spark/artifacts",), False),
    "empty string": (("",), False),
    "dotdot": (("/var/spark/x/../artifacts",), False),
    "ending in dotdot": ((f"{ROOT}/x/..",), False),  # literally the parent of a folder above
    "the parent": (("/var/spark",), False),
    "deeper": ((f"{ROOT}/{U1}",), False),
    "a link's name": (("/var/spark/link-to-artifacts",), False),
    "prefix of it": (("/var/spark/art",), False),
    "none": ((), False),
}

#: label -> (uuids, whether the good folder is deletable with them)
UUIDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "good": ((U1, U2), True),
    "only it": ((U1,), True),
    "only another": ((U2,), False),
    "uppercase": ((U1.upper(),), False),
    "with a suffix": ((U1 + "x",), False),
    "hyphenless": ((U1.replace("-", ""),), False),
    "none": ((), False),
    # Every folder's name: only the UUID check itself tells the odd names apart.
    "every name": (tuple({(_segments(f) or [""])[-1] for f, _ in FOLDERS.values()} - {U3}),
                   True),
}


def test_the_ground_truth_says_what_the_tables_say() -> None:
    """The tables' verdicts are the brief, the ground truth must follow them (else the
    differential below compares with nonsense)."""
    every = UUIDS["every name"][0]
    good_folder, good_roots, good_uuids = FOLDERS["good"][0], ROOTS["good"][0], UUIDS["good"][0]
    wrong = [("folder", k) for k, (f, want) in FOLDERS.items()
             if truth(f, good_roots, every) != want]
    wrong += [("roots", k) for k, (r, want) in ROOTS.items()
              if truth(good_folder, r, good_uuids) != want]
    wrong += [("uuids", k) for k, (u, want) in UUIDS.items()
              if truth(good_folder, good_roots, u) != want]
    assert wrong == []


@pytest.mark.parametrize("axis, label", [("folder", k) for k in FOLDERS]
                         + [("roots", k) for k in ROOTS] + [("uuids", k) for k in UUIDS])
def test_one_change_from_a_deletable_folder(axis: str, label: str) -> None:
    folder, roots, uuids = FOLDERS["good"][0], ROOTS["good"][0], UUIDS["good"][0]
    if axis == "folder":
        folder, want = FOLDERS[label]
        uuids = UUIDS["every name"][0]
    elif axis == "roots":
        roots, want = ROOTS[label]
    else:
        uuids, want = UUIDS[label]
    assert deletable(folder, roots, uuids) is want


def test_deletable_agrees_with_the_ground_truth_over_every_combination() -> None:
    cases = list(itertools.product(FOLDERS.items(), ROOTS.items(), UUIDS.items()))
    differ = [(fk, rk, uk, truth(f, r, u)) for (fk, (f, _)), (rk, (r, _)), (uk, (u, _)) in cases
              if deletable(f, r, u) is not truth(f, r, u)]
    assert differ == []
    # Both verdicts are well represented, so the agreement says something.
    yes = sum(truth(f, r, u) for (_, (f, _)), (_, (r, _)), (_, (u, _)) in cases)
    assert len(cases) > 5000 and 100 < yes < len(cases) - 100


def test_deletable_takes_one_shot_iterables() -> None:
    assert deletable(f"{ROOT}/{U1}", iter([OTHER, ROOT]), (u for u in [U2, U1])) is True
    assert deletable(f"{ROOT}/{U1}", iter([]), iter([U1])) is False


def test_deletable_judges_the_string_never_the_disk(tmp_path: Path) -> None:
    """A root reached through a link is another root; a uuid-named link in a root is the folder
    (what is deleted is the link), whatever it points at, and whether the folder exists."""
    real = tmp_path / "real"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real, target_is_directory=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (real / U2).symlink_to(outside, target_is_directory=True)
    assert deletable(str(alias / U1), [str(alias)], [U1]) is True  # U1 does not exist
    assert deletable(str(alias / U1), [str(real)], [U1]) is False
    assert deletable(str(real / U1), [str(alias)], [U1]) is False
    assert deletable(str(real / U2), [str(real)], [U2]) is True
    assert deletable(str(outside), [str(tmp_path)], [U2]) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias", "outside", "real"]


# -- parse_reports ---------------------------------------------------------------------------------


def added(session: str, path: str, name: str, size: int) -> dict[str, Any]:
    return {"kind": "added", "session": session, "path": path, "name": name, "size": size}


def ended(session: str, uuids: Iterable[str], folders: Iterable[str],
          roots: Iterable[str]) -> dict[str, Any]:
    return {"kind": "ended", "session": session, "uuids": list(uuids), "folders": list(folders),
            "roots": list(roots)}


GOOD_ADDED = added("s1", "/d/files/x.txt", "files/x.txt", 12)
GOOD_ENDED = ended("s1", [U1], [f"{ROOT}/{U1}"], [ROOT])


def changed(report: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``report`` with ``fields`` replaced (a field set to ... is dropped)."""
    out = {**report, **fields}
    return {k: v for k, v in out.items() if v is not ...}


@pytest.mark.parametrize("text", ["", "nope", "[", "[1,]", "{'a': 1}", "[{]", "\x00",
                                  "{}", "null", "1", '"[]"', "true", json.dumps(GOOD_ADDED),
                                  None])
def test_what_is_no_json_array_is_one_malformed_batch(text: Any) -> None:
    assert parse_reports(text) == ([], 1)


MALFORMED: list[Any] = [
    1, "added", None, [], [GOOD_ADDED], True,
    changed(GOOD_ADDED, kind=...), changed(GOOD_ADDED, kind="removed"),
    changed(GOOD_ADDED, kind="Added"), changed(GOOD_ADDED, kind=None),
    changed(GOOD_ADDED, session=...), changed(GOOD_ADDED, session=7),
    changed(GOOD_ADDED, session=None), changed(GOOD_ADDED, session=["s1"]),
    changed(GOOD_ADDED, path=...), changed(GOOD_ADDED, path=3),
    changed(GOOD_ADDED, name=...), changed(GOOD_ADDED, name=None),
    changed(GOOD_ADDED, size=...), changed(GOOD_ADDED, size="12"),
    changed(GOOD_ADDED, size=12.0), changed(GOOD_ADDED, size=None),
    changed(GOOD_ENDED, uuids=...), changed(GOOD_ENDED, uuids=[U1, 5]),
    changed(GOOD_ENDED, uuids=U1), changed(GOOD_ENDED, uuids=None),
    changed(GOOD_ENDED, folders=...), changed(GOOD_ENDED, folders=[None]),
    changed(GOOD_ENDED, folders={"a": 1}), changed(GOOD_ENDED, roots=...),
    changed(GOOD_ENDED, roots=[[ROOT]]), changed(GOOD_ENDED, session=1),
    # An ended report's fields on an added one and the reverse.
    changed(GOOD_ENDED, kind="added"), changed(GOOD_ADDED, kind="ended"),
]


def test_each_malformed_report_is_counted_and_the_good_ones_kept_in_order() -> None:
    good = [GOOD_ADDED, GOOD_ENDED, added("s2", "/p", "", 0),
            ended("s3", [], [], []), changed(GOOD_ADDED, extra={"later": "fields"})]
    items: list[Any] = []
    for i, bad in enumerate(MALFORMED):
        items += [bad, good[i % len(good)]]
    reports, bad_count = parse_reports(json.dumps(items))
    assert bad_count == len(MALFORMED)
    assert reports == [_expected(good[i % len(good)]) for i in range(len(MALFORMED))]


def _expected(item: dict[str, Any]) -> ArtifactAdded | SessionEnded:
    if item["kind"] == "added":
        return ArtifactAdded(item["session"], item["path"], item["name"], item["size"])
    return SessionEnded(item["session"], tuple(item["uuids"]), tuple(item["folders"]),
                        tuple(item["roots"]))


def test_ten_thousand_reports_keep_their_order_and_their_count_of_malformed() -> None:
    items: list[Any] = []
    want: list[ArtifactAdded | SessionEnded] = []
    for i in range(10_000):
        if i % 7 == 3:
            items.append(MALFORMED[i % len(MALFORMED)])
        elif i % 2:
            items.append(added(f"s{i}", f"/d/{i}", f"files/{i}", i))
            want.append(ArtifactAdded(f"s{i}", f"/d/{i}", f"files/{i}", i))
        else:
            items.append(ended(f"s{i}", [str(i)], [f"/r/{i}"], ["/r"]))
            want.append(SessionEnded(f"s{i}", (str(i),), (f"/r/{i}",), ("/r",)))
    reports, bad = parse_reports(json.dumps(items))
    assert bad == sum(1 for i in range(10_000) if i % 7 == 3) == 1429
    assert reports == want


def test_an_empty_array_is_nothing_and_nothing_malformed() -> None:
    assert parse_reports("[]") == ([], 0)
    assert parse_reports(" [ ] \n") == ([], 0)


# -- take(): the reports acted on ------------------------------------------------------------------


class FakeDepot:
    """Records each put (with the content read at that moment); fails the names in ``fail``."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, str, str, bytes]] = []
        self.fail: dict[str, Exception] = {}

    def put_file(self, source: str, *, scope: str, name: str = "") -> object:
        if name in self.fail:
            raise self.fail[name]
        self.puts.append((str(source), scope, name, Path(source).read_bytes()))
        return object()


class FakeService:
    """BlobService as ConnectArtifacts uses it: a scope per session, opened at its first use."""

    def __init__(self) -> None:
        self.depot = FakeDepot()
        self.scopes: dict[str, str] = {}
        self.closed: list[str] = []
        self._numbers = itertools.count(1)

    def require_depot(self) -> FakeDepot:
        return self.depot

    def session_scope(self, session_id: str, *, open_it: bool = True) -> str:
        if session_id not in self.scopes:
            self.scopes[session_id] = f"connect.{next(self._numbers)}"
        return self.scopes[session_id]

    def session_closed(self, session_id: str) -> None:
        self.closed.append(session_id)
        self.scopes.pop(session_id, None)


class Drain:
    """The shim's drain: each call hands the next queued text (or raises it), then '[]'."""

    def __init__(self) -> None:
        self.queued: list[str | Exception] = []

    def push(self, *reports: dict[str, Any]) -> None:
        self.queued.append(json.dumps(list(reports)))

    def __call__(self) -> str:
        item = self.queued.pop(0) if self.queued else "[]"
        if isinstance(item, Exception):
            raise item
        return item


class Rig:
    def __init__(self, tmp_path: Path, cleaner: RetryingCleaner[str]) -> None:
        self.tmp = tmp_path
        self.roots = [tmp_path / "artifacts", tmp_path / "userFiles"]
        for root in self.roots:
            root.mkdir()
        self.service = FakeService()
        self.drain = Drain()
        self.cleaner = cleaner
        self.owner = ConnectArtifacts(self.service, self.drain, cleaner)  # type: ignore[arg-type]

    @property
    def puts(self) -> list[tuple[str, str, str, bytes]]:
        return self.service.depot.puts

    def session(self) -> tuple[list[str], list[Path]]:
        """A session's Spark session ids and their folders (one per root, with files)."""
        uuids = [str(uuid.uuid4()) for _ in self.roots]
        folders = [root / u for root, u in zip(self.roots, uuids)]
        for folder in folders:
            (folder / "files").mkdir(parents=True)
            (folder / "files" / "data.txt").write_text(f"of {folder.name}")
        return uuids, folders

    def ended(self, session: str, uuids: Iterable[str], folders: Iterable[Path]
              ) -> dict[str, Any]:
        return ended(session, uuids, [str(f) for f in folders], [str(r) for r in self.roots])

    def take(self) -> None:
        self.owner.take()
        assert self.cleaner.wait_idle(3.0), self.cleaner.stats()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    cleaner: RetryingCleaner[str] = RetryingCleaner(RetryStrategy.fixed(0.001, retries=20),
                                                    threads=1, name="t")
    yield Rig(tmp_path, cleaner)
    cleaner.close(0)


def artifact(rig: Rig, folder: Path, name: str, data: bytes) -> dict[str, Any]:
    """A file Spark stored for the session in ``folder``, and its ``added`` report."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return added("", str(path), name, len(data))


def of(session: str, report: dict[str, Any]) -> dict[str, Any]:
    return {**report, "session": session}


def test_added_then_ended_keeps_blobs_then_closes_the_session_and_deletes_its_folders(
        rig: Rig) -> None:
    uuids, folders = rig.session()
    first = of("sA", artifact(rig, folders[0], "files/x.txt", b"12345"))
    second = of("sA", artifact(rig, folders[0], "pyfiles/lib.py", b"print(1)\n"))
    rig.drain.push(first, second)
    rig.take()
    assert rig.puts == [(first["path"], "connect.1", "files/x.txt", b"12345"),
                        (second["path"], "connect.1", "pyfiles/lib.py", b"print(1)\n")]
    assert rig.owner.session_owns("sA") == {"artifacts": (2, 5 + 9)}
    assert rig.owner.session_owns("sB") == {}
    assert rig.service.closed == [] and all(f.is_dir() for f in folders)

    rig.drain.push(rig.ended("sA", uuids, folders))
    rig.take()
    assert rig.service.closed == ["sA"]
    assert [f.exists() for f in folders] == [False, False]
    assert all(r.is_dir() for r in rig.roots)
    assert rig.owner.session_owns("sA") == {}
    assert len(rig.puts) == 2 and rig.owner.malformed == 0


def test_an_artifact_added_again_under_its_name_counts_once_at_its_last_size(rig: Rig) -> None:
    _, folders = rig.session()
    rig.drain.push(of("sA", artifact(rig, folders[0], "files/x.txt", b"1")))
    rig.take()
    rig.drain.push(of("sA", artifact(rig, folders[0], "files/x.txt", b"4444")))
    rig.take()
    assert [p[3] for p in rig.puts] == [b"1", b"4444"]
    assert rig.owner.session_owns("sA") == {"artifacts": (1, 4)}


def test_added_and_ended_in_one_drain_keep_no_blob_but_end_the_session(rig: Rig) -> None:
    uuids, folders = rig.session()
    _, other_folders = rig.session()
    rig.drain.push(of("sA", artifact(rig, folders[0], "files/x.txt", b"x")),
                   of("sB", artifact(rig, other_folders[0], "files/y.txt", b"yy")),
                   rig.ended("sA", uuids, folders))
    rig.take()
    assert [(p[1], p[2]) for p in rig.puts] == [("connect.1", "files/y.txt")]
    assert "sA" not in rig.service.scopes  # no scope opened for a session already gone
    assert rig.service.closed == ["sA"]
    assert [f.exists() for f in folders + other_folders] == [False, False, True, True]
    assert rig.owner.session_owns("sA") == {}
    assert rig.owner.session_owns("sB") == {"artifacts": (1, 2)}


def test_an_artifact_reported_after_its_session_ended_is_ignored(rig: Rig) -> None:
    uuids, folders = rig.session()
    rig.drain.push(rig.ended("sA", uuids, folders))
    late = of("sA", artifact(rig, rig.tmp / "late", "files/late.txt", b"late"))
    rig.drain.push(late)
    rig.take()
    rig.take()
    assert rig.puts == [] and rig.service.scopes == {}
    assert rig.owner.session_owns("sA") == {}
    assert Path(late["path"]).read_bytes() == b"late"  # Spark's copy is not ours to delete
    assert rig.service.closed == ["sA"]


def test_only_the_latest_ended_sessions_are_remembered(rig: Rig,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_artifacts, "ENDED_KEPT", 2)
    rig.drain.push(*(ended(s, [], [], []) for s in ("s1", "s2", "s3")))
    rig.take()
    source = rig.tmp / "x.bin"
    source.write_bytes(b"abc")
    rig.drain.push(added("s1", str(source), "x", 3), added("s3", str(source), "x", 3))
    rig.take()
    assert [(p[1], p[2]) for p in rig.puts] == [("connect.1", "x")]
    assert rig.owner.session_owns("s1") == {"artifacts": (1, 3)}
    assert rig.owner.session_owns("s3") == {}


def test_folders_a_report_may_not_delete_are_left_alone_and_said(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    uuids, folders = rig.session()
    root = rig.roots[0]
    stranger = str(uuid.uuid4())
    (root / "x").mkdir()
    #: label -> (the folder as reported, the folder on disk)
    spared = {
        "outside the roots": rig.tmp / "outside" / uuids[0],
        "not named by its ids": root / stranger,
        "nested": folders[1] / uuids[0],
        "a root": root,
        "uppercase id": root / uuids[1].upper(),
        "dotdot": root / "x" / ".." / uuids[1],
    }
    for folder in spared.values():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "keep.txt").write_text("keep")
    rig.drain.push(ended("sA", uuids + [uuids[1].upper()],
                         [str(f) for f in spared.values()] + [str(folders[0])],
                         [str(r) for r in rig.roots]))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rig.take()
    assert not folders[0].exists()  # the one deletable folder of the report
    kept = {k: (f / "keep.txt").read_text() for k, f in spared.items()}
    assert kept == {k: "keep" for k in spared}
    said = [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(said) == len(spared)
    for folder in spared.values():
        assert any(str(folder) in m and "session sA" in m for m in said), folder
    assert rig.cleaner.stats()["attempts"] == 1
    assert rig.service.closed == ["sA"]


def test_a_uuid_named_link_in_a_root_is_removed_not_followed(rig: Rig) -> None:
    outside = rig.tmp / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("mine")
    to_dir, to_file = str(uuid.uuid4()), str(uuid.uuid4())
    (rig.roots[0] / to_dir).symlink_to(outside, target_is_directory=True)
    (rig.roots[1] / to_file).symlink_to(outside / "precious.txt")
    rig.drain.push(ended("sA", [to_dir, to_file], [str(rig.roots[0] / to_dir),
                                                    str(rig.roots[1] / to_file)],
                         [str(r) for r in rig.roots]))
    rig.take()
    assert not os.path.lexists(rig.roots[0] / to_dir)
    assert not os.path.lexists(rig.roots[1] / to_file)
    assert [p.name for p in outside.iterdir()] == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "mine"


def test_a_failing_drain_is_no_report_and_the_next_take_goes_on(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    uuids, folders = rig.session()
    rig.drain.queued.append(RuntimeError("py4j: the JVM is gone"))
    rig.drain.push(rig.ended("sA", uuids, folders))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rig.owner.take()  # returns quietly
    assert rig.service.closed == [] and rig.owner.malformed == 0
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    rig.take()
    assert rig.service.closed == ["sA"] and not any(f.exists() for f in folders)


def test_a_malformed_drain_is_counted_and_said(rig: Rig, caplog: pytest.LogCaptureFixture
                                              ) -> None:
    uuids, folders = rig.session()
    rig.drain.queued.append("]not json[")
    rig.drain.queued.append(json.dumps([1, changed(GOOD_ADDED, size="7"),
                                        rig.ended("sA", uuids, folders)]))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rig.take()
        rig.take()
    assert rig.owner.malformed == 3
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "spark-steward skipped 1 malformed Connect artifact report(s)",
        "spark-steward skipped 2 malformed Connect artifact report(s)"]
    assert rig.service.closed == ["sA"] and not any(f.exists() for f in folders)


def test_a_deeply_nested_drain_is_one_malformed_batch(rig: Rig) -> None:
    # Was a bug (fixed): json.loads raises RecursionError (a RuntimeError) on deep nesting, which
    # parse_reports does not catch (only ValueError/TypeError): parse_reports raises instead of
    # returning ([], 1), take() lets it out (parse_reports is outside its try) against its "a
    # failure is logged; the next call goes on", and ConnectArtifacts._run has no guard, so the
    # drain thread ends for good: no later report is ever taken.
    nested = "[" * 100_000
    assert parse_reports(nested) == ([], 1)
    rig.drain.queued.append(nested)
    rig.owner.take()
    assert rig.owner.malformed == 1


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   StewardError("spark-steward: the depot refused it")])
def test_an_artifact_the_depot_cannot_keep_is_said_and_not_owned(
        rig: Rig, caplog: pytest.LogCaptureFixture, error: Exception) -> None:
    uuids, folders = rig.session()
    bad = of("sA", artifact(rig, folders[0], "files/big.bin", b"b" * 10))
    good = of("sA", artifact(rig, folders[0], "files/small.txt", b"s"))
    rig.service.depot.fail["files/big.bin"] = error
    rig.drain.push(bad, good)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rig.take()
    assert [p[2] for p in rig.puts] == ["files/small.txt"]
    assert rig.owner.session_owns("sA") == {"artifacts": (1, 1)}
    said = [r for r in caplog.records if r.name == LOGGER]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "files/big.bin" in said[0].getMessage() and str(error) in said[0].getMessage()
    assert Path(bad["path"]).read_bytes() == b"b" * 10
    rig.drain.push(rig.ended("sA", uuids, folders))
    rig.take()
    assert rig.service.closed == ["sA"] and not any(f.exists() for f in folders)


def test_an_unexpected_failure_on_one_report_spares_the_others(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    uuids, folders = rig.session()
    rig.service.depot.fail["files/a"] = KeyError("bug")
    rig.drain.push(of("sA", artifact(rig, folders[0], "files/a", b"a")),
                   of("sB", artifact(rig, folders[1], "files/b", b"b")),
                   rig.ended("sC", uuids, folders))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rig.take()
    assert [p[2] for p in rig.puts] == ["files/b"]
    said = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.levelno, r.exc_info is not None) for r in said] == [(logging.ERROR, True)]
    assert "session sA" in said[0].getMessage()
    assert rig.service.closed == ["sC"] and not any(f.exists() for f in folders)
    assert rig.owner.session_owns("sA") == {}
    assert rig.owner.session_owns("sB") == {"artifacts": (1, 1)}


def test_a_deletion_that_fails_is_retried_until_the_folder_is_gone(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    uuids, folders = rig.session()
    tried: list[str] = []

    def rmtree_failing_once(path: Any, *args: Any, **kwargs: Any) -> None:
        tried.append(str(path))
        if len(tried) == 1:
            raise OSError(16, "Device or resource busy")
        shutil.rmtree(path, *args, **kwargs)

    monkeypatch.setattr(connect_artifacts, "shutil", SimpleNamespace(rmtree=rmtree_failing_once))
    rig.drain.push(rig.ended("sA", uuids[:1], folders[:1]))
    rig.take()
    assert tried == [str(folders[0])] * 2
    assert not folders[0].exists()
    assert folders[1].is_dir()  # the report did not name it
    assert rig.cleaner.stats() == {"attempts": 2, "failures": 1, "outstanding": 0,
                                   "given_up": 0}


def test_stop_takes_the_last_reports_and_waits_for_their_deletions(rig: Rig) -> None:
    uuids, folders = rig.session()
    rig.drain.push(rig.ended("sA", uuids, folders))
    rig.owner.stop(timeout=3.0)
    assert rig.service.closed == ["sA"] and not any(f.exists() for f in folders)
    assert rig.cleaner.submit("later", lambda: None) is False  # closed


# -- _remove ---------------------------------------------------------------------------------------


def test_remove_deletes_a_tree_a_file_a_link_and_is_done_when_gone(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    file = tmp_path / "file"
    file.write_text("x")
    target = tmp_path / "target"
    target.mkdir()
    (target / "t").write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for path in (tree, file, link, dangling, tmp_path / "never"):
        _remove(str(path))
        _remove(str(path))  # again: already gone is done
        assert not os.path.lexists(path)
    assert (target / "t").read_text() == "kept"
