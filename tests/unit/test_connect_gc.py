"""What crashed Spark Connect servers left in Spark's own folders, collected by ``spark-steward
gc`` (blob/connect_gc.py): the safety verdict ``refusal`` checked against a ground truth of our
own on real nodes, and ``collect_spark_folders`` end to end on real folders, a real local
storage and real application records (an injected clock and process probe): no Spark, no JVM."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import pytest

from spark_steward.applications import ApplicationRecord, ApplicationRegistry, this_place
from spark_steward.blob import connect_gc
from spark_steward.blob.connect_gc import collect_spark_folders, refusal, spark_folders_path
from spark_steward.gc import Deleted, GcReport, Skipped
from spark_steward.storage import Storage
from tests.unit.conftest import FakeClock, break_delete

U1 = "3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c"
U2 = "0b0f6a3e-3c1b-4d5e-9f00-1a2b3c4d5e6f"
U3 = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4"
U4 = "5c6d7e8f-0a1b-4c2d-8e3f-4a5b6c7d8e9f"
ME = os.getuid()
STRANGER = 4242 if ME != 4242 else 4243  # a uid that owns nothing here
TIMEOUT = 120.0

# -- refusal: a differential test against a ground truth -----------------------------------------


def _canonical_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def truth(folder: str, uid: int) -> bool:
    """Deletable: an absolute path without '..' whose last name is ``artifacts-`` or
    ``userFiles-`` and a canonical lowercase UUID, naming a real folder (not a link, not a file)
    that ``uid`` owns, or nothing at all."""
    if not folder.startswith("/") or ".." in folder.split("/"):
        return False
    name = os.path.basename(folder.rstrip("/"))
    prefix, dash, rest = name.partition("-")
    if prefix not in ("artifacts", "userFiles") or not dash or not _canonical_uuid(rest):
        return False
    try:
        info = os.lstat(folder.rstrip("/"))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode)
            and info.st_uid == uid)


def _dir(path: Path) -> str:
    path.mkdir(parents=True)
    (path / "jar.jar").write_bytes(b"PK")
    return str(path)


def _file(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a folder")
    return str(path)


def _link(path: Path, target: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target, target_is_directory=True)
    return str(path)


def _fifo(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return str(path)


def _foreign(path: Path) -> str:
    folder = _dir(path)
    os.chown(folder, STRANGER, -1)
    return folder


def _parent_link(base: Path) -> str:
    real = base / "real-parent"
    _dir(real / f"artifacts-{U1}")
    return _link(base / "link-parent", real) + f"/artifacts-{U1}"


def _outside(base: Path) -> Path:
    outside = base / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "precious").write_bytes(b"keep me")
    return outside


GOOD = f"artifacts-{U1}"

#: label -> (makes the node in a fresh base folder and returns the path to judge, deletable by
#: its owner). Each is the good folder changed in one way.
KINDS: dict[str, tuple[Callable[[Path], str], bool]] = {
    "good artifacts": (lambda b: _dir(b / GOOD), True),
    "good userFiles": (lambda b: _dir(b / f"userFiles-{U1}"), True),
    "empty good folder": (lambda b: (b / GOOD).mkdir() or str(b / GOOD), True),
    "missing": (lambda b: str(b / GOOD), True),
    "missing parent": (lambda b: str(b / "nowhere" / GOOD), True),
    "trailing slash": (lambda b: _dir(b / GOOD) + "/", True),
    "dot segment": (lambda b: str(b) + "/./" + Path(_dir(b / GOOD)).name, True),
    "doubled slash": (lambda b: str(b) + "//" + Path(_dir(b / GOOD)).name, True),
    "nested in a badly named parent": (lambda b: _dir(b / "blockmgr-x" / GOOD), True),
    "nested in a Spark folder": (lambda b: _dir(b / f"userFiles-{U2}" / GOOD), True),
    "reached through a linked parent": (_parent_link, True),
    "relative (to a cwd holding it)": (lambda b: os.path.relpath(_dir(b / GOOD), b), False),
    "dot relative": (lambda b: "./" + os.path.relpath(_dir(b / GOOD), b), False),
    "bare name": (lambda b: Path(_dir(b / GOOD)).name, False),
    "dotdot back to it": (lambda b: (b / "x").mkdir() or f"{b}/x/../{Path(_dir(b / GOOD)).name}",
                          False),
    "dotdot after it": (lambda b: _dir(b / GOOD) + "/sub/..", False),
    "dotdot as the path's end": (lambda b: _dir(b / "p" / GOOD) + "/..", False),
    "uppercase uuid": (lambda b: _dir(b / f"artifacts-{U1.upper()}"), False),
    "capitalised prefix": (lambda b: _dir(b / f"Artifacts-{U1}"), False),
    "lowercase userfiles": (lambda b: _dir(b / f"userfiles-{U1}"), False),
    "spark- prefix": (lambda b: _dir(b / f"spark-{U1}"), False),
    "blockmgr- prefix": (lambda b: _dir(b / f"blockmgr-{U1}"), False),
    "artifacts_ prefix": (lambda b: _dir(b / f"artifacts_{U1}"), False),
    "userFiles_ prefix": (lambda b: _dir(b / f"userFiles_{U1}"), False),
    "no prefix": (lambda b: _dir(b / U1), False),
    "prefix only": (lambda b: _dir(b / "artifacts-"), False),
    "leading junk": (lambda b: _dir(b / f"x{GOOD}"), False),
    "trailing junk": (lambda b: _dir(b / f"{GOOD}x"), False),
    "trailing .bak": (lambda b: _dir(b / f"{GOOD}.bak"), False),
    "trailing space": (lambda b: _dir(b / f"{GOOD} "), False),
    "trailing newline": (lambda b: _dir(b / f"{GOOD}\n"), False),
    "hyphenless uuid": (lambda b: _dir(b / f"artifacts-{U1.replace('-', '')}"), False),
    "braced uuid": (lambda b: _dir(b / f"artifacts-{{{U1}}}"), False),
    "short uuid": (lambda b: _dir(b / f"artifacts-{U1[:-1]}"), False),
    "non-hex uuid": (lambda b: _dir(b / f"artifacts-{U1[:-1]}g"), False),
    "non-ASCII digit": (lambda b: _dir(b / f"artifacts-{U1.replace('3', chr(0x663), 1)}"), False),
    "link to a good folder": (lambda b: _link(b / f"artifacts-{U2}", Path(_dir(b / GOOD))), False),
    "link to outside": (lambda b: _link(b / GOOD, _outside(b)), False),
    "link to a file": (lambda b: _link(b / GOOD, Path(_file(b / "a-file"))), False),
    "dangling link": (lambda b: _link(b / GOOD, b / "gone"), False),
    "link, trailing slash": (lambda b: _link(b / GOOD, _outside(b)) + "/", False),
    "regular file": (lambda b: _file(b / GOOD), False),
    "fifo": (lambda b: _fifo(b / GOOD), False),
    "owned by another uid": (lambda b: _foreign(b / GOOD), False),
    "below a regular file": (lambda b: _file(b / "a-file") + f"/{GOOD}", False),
    "empty string": (lambda b: "", False),
    "file system root": (lambda b: "/", False),
}


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder, also the working directory (so relative paths name real folders)."""
    folder = tmp_path / "base"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes | str | None]]:
    """Every node below ``root``: its mode, owner and content (or link target)."""
    out: dict[str, tuple[int, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            content: bytes | str | None = None
            if stat.S_ISLNK(info.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = Path(path).read_bytes()
            out[os.path.relpath(path, root)] = (info.st_mode, info.st_uid, content)
    return out


def test_the_ground_truth_says_what_the_table_says(base: Path) -> None:
    """The table is the brief; the ground truth must follow it, else the differential compares
    with nonsense."""
    wrong = []
    for label, (make, want) in KINDS.items():
        case = base / re.sub(r"\W", "_", label)
        case.mkdir()
        os.chdir(case)
        if truth(make(case), ME) is not want:
            wrong.append(label)
    assert wrong == []


@pytest.mark.parametrize("label", list(KINDS))
def test_one_change_from_a_good_folder(base: Path, label: str) -> None:
    make, want = KINDS[label]
    folder = make(base)
    before = _snapshot(base)
    verdict = refusal(folder, ME)
    if want:
        assert verdict is None
    else:
        assert isinstance(verdict, str) and verdict  # a reason to show
    assert _snapshot(base) == before  # a verdict never touches the disk


@pytest.mark.parametrize("label", list(KINDS))
@pytest.mark.parametrize("uid", [ME, STRANGER, ME + 1000], ids=["owner", "stranger", "another"])
def test_refusal_agrees_with_the_ground_truth_for_every_uid(base: Path, label: str,
                                                            uid: int) -> None:
    folder = KINDS[label][0](base)
    assert (refusal(folder, uid) is None) is truth(folder, uid)


def test_the_uid_is_the_one_change_that_refuses_a_good_folder(base: Path) -> None:
    good = _dir(base / GOOD)
    assert refusal(good, ME) is None
    reason = refusal(good, STRANGER)
    assert reason is not None and str(ME) in reason and str(STRANGER) in reason
    # A folder that is gone is gone for everyone.
    assert refusal(str(base / f"userFiles-{U2}"), STRANGER) is None


def test_both_verdicts_are_well_represented() -> None:
    """So that agreeing with the ground truth says something."""
    yes = sum(want for _, want in KINDS.values())
    assert 8 <= yes <= len(KINDS) - 25


# -- collect_spark_folders: the world ---------------------------------------------------------


class World:
    """A local storage dir, a registry over it with a hand-driven clock and a probe that says a
    driver lives when its pid is in ``alive``, and the host's folders Spark would use."""

    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "store").mkdir()
        self.store = tmp_path / "store"
        self.storage = Storage.from_url(self.store.as_uri())
        self.clock = FakeClock()
        self.alive: set[int] = set()
        self.registry = ApplicationRegistry(self.storage, heartbeat_timeout=TIMEOUT,
                                            clock=self.clock,
                                            probe=lambda pid, start: pid in self.alive)
        self.tmp = tmp_path / "jvm-tmp"  # java.io.tmpdir
        self.local = tmp_path / "local-dir"  # spark.local.dir
        self.tmp.mkdir()
        self.local.mkdir()
        self._pids = iter(range(3_900_001, 3_999_999))

    def record(self, app: str, **changes: Any) -> ApplicationRecord:
        """A record of ``app`` on this host whose driver (a pid of its own) is gone, its
        heartbeat long stale: crashed, whatever the probe could say."""
        record = self.registry.new_record(app, "connect", driver_pid=next(self._pids))
        return replace(record, heartbeat_at=self.clock() - 10 * TIMEOUT, **changes)

    def crashed(self, app: str, **changes: Any) -> ApplicationRecord:
        record = self.record(app, **changes)
        self.registry.write(record)
        assert self.registry.liveness(record).value == "crashed"
        return record

    def finished(self, app: str, **changes: Any) -> ApplicationRecord:
        record = self.registry.finish(self.record(app, **changes))
        assert self.registry.liveness(record).value == "finished"
        return record

    def live(self, app: str) -> ApplicationRecord:
        record = self.registry.new_record(app, "connect", driver_pid=next(self._pids))
        self.alive.add(record.pid)
        self.registry.write(record)
        assert self.registry.liveness(record).value == "live"
        return record

    def manifest(self, app: str, folders: list[Any]) -> None:
        self.storage.write_record(spark_folders_path(app), {"folders": folders})

    def has_manifest(self, app: str) -> bool:
        return (self.store / spark_folders_path(app)).is_file()

    def has_connect_folder(self, app: str) -> bool:
        return (self.store / "apps" / app / "connect").exists()

    def collect(self, *, dry_run: bool = False, uid: int | None = None) -> GcReport:
        self.progress: list[tuple[int, int, str]] = []
        return collect_spark_folders(self.registry, dry_run=dry_run, uid=uid,
                                     progress=lambda *a: self.progress.append(a))


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def spark_folder(parent: Path, name: str, files: dict[str, bytes]) -> tuple[str, int, int]:
    """A real folder ``parent/name`` holding ``files`` (relative paths, '/' makes subfolders);
    its path, file count and byte count."""
    folder = parent / name
    folder.mkdir()
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return str(folder), len(files), sum(len(d) for d in files.values())


ARTIFACTS = {"jars/a.jar": b"a" * 1000, "jars/b.jar": b"b" * 234,
             "pyfiles/deep/er/m.py": b"print(1)\n", "files/empty.txt": b""}
USER_FILES = {"a.jar": b"a" * 1000, "archive.zip": b"z" * 4096}


def two_folders(world: World, a: str = U1, b: str = U2) -> tuple[list[str], int, int]:
    """The artifact store in the JVM's temp dir and the driver's copies in the local dir."""
    art, f1, b1 = spark_folder(world.tmp, f"artifacts-{a}", ARTIFACTS)
    (Path(art) / "empty-subfolder").mkdir()
    usr, f2, b2 = spark_folder(world.local, f"userFiles-{b}", USER_FILES)
    return [art, usr], f1 + f2, b1 + b2


def _gone(path: str) -> bool:
    return not os.path.lexists(path)


# -- collect_spark_folders: what is deleted ----------------------------------------------------


@pytest.mark.parametrize("state", ["crashed", "finished"])
def test_a_dead_application_on_this_host_loses_its_spark_folders(world: World,
                                                                 state: str) -> None:
    getattr(world, state)("app-1")
    folders, files, size = two_folders(world)
    assert (files, size) == (6, 1000 + 234 + 9 + 0 + 1000 + 4096)
    world.manifest("app-1", folders)
    # Beside them: a folder of another server that no manifest names, and what app-1 owns in
    # the storage dir besides its manifest.
    other, _, _ = spark_folder(world.tmp, f"artifacts-{U3}", {"x": b"x"})
    world.storage.write_atomic("apps/app-1/blobs/k", b"blob")

    report = world.collect()

    assert report == GcReport(dry_run=False, deleted=[Deleted("app-1", files, size)])
    assert report.ok and report.files == 6 and report.bytes == size
    assert all(_gone(f) for f in folders)
    assert world.tmp.is_dir() and world.local.is_dir() and Path(other, "x").read_bytes() == b"x"
    assert not world.has_manifest("app-1") and not world.has_connect_folder("app-1")
    assert world.storage.read_bytes("apps/app-1/blobs/k") == b"blob"
    assert world.registry.read("app-1") is not None  # the record is not this collector's
    assert world.progress == [(1, 1, spark_folders_path("app-1"))]


def test_a_second_run_after_success_finds_nothing(world: World) -> None:
    world.crashed("app-1")
    folders, _, _ = two_folders(world)
    world.manifest("app-1", folders)
    assert world.collect().deleted != []
    again = world.collect()
    assert again == GcReport(dry_run=False)
    assert world.progress == []


def test_a_dry_run_reports_the_same_and_deletes_nothing(world: World) -> None:
    world.crashed("app-1")
    folders, files, size = two_folders(world)
    world.manifest("app-1", folders)
    before = _snapshot(world.tmp.parent)

    dry = world.collect(dry_run=True)

    assert dry == GcReport(dry_run=True, deleted=[Deleted("app-1", files, size)])
    assert _snapshot(world.tmp.parent) == before  # the folders, the manifest, everything
    assert world.has_manifest("app-1")
    real = world.collect()
    assert real.deleted == dry.deleted and all(_gone(f) for f in folders)


def test_many_applications_each_their_own(world: World) -> None:
    """Each dead application's folders and counts are its own; the live one is left; progress
    counts the applications that have a manifest, in order."""
    world.crashed("app-a")
    world.finished("app-b")
    world.live("app-c")
    world.crashed("app-d")  # a Connect server that never named a folder: no manifest
    a, _, _ = spark_folder(world.tmp, f"artifacts-{U1}", {"1": b"1"})
    b, _, _ = spark_folder(world.tmp, f"artifacts-{U2}", {"22": b"22", "x/333": b"333"})
    c, _, _ = spark_folder(world.tmp, f"artifacts-{U3}", {"4444": b"4444"})
    world.manifest("app-a", [a])
    world.manifest("app-b", [b])
    world.manifest("app-c", [c])

    report = world.collect()

    assert report.deleted == [Deleted("app-a", 1, 1), Deleted("app-b", 2, 5)]
    assert report.skipped == [Skipped("app-c", "application is live")] and report.ok
    assert _gone(a) and _gone(b) and Path(c, "4444").is_file()
    assert [p[:2] for p in world.progress] == [(1, 3), (2, 3), (3, 3)]
    assert [p[2] for p in world.progress] == [spark_folders_path(x)
                                              for x in ("app-a", "app-b", "app-c")]


def test_links_inside_a_spark_folder_are_removed_not_followed(world: World) -> None:
    world.crashed("app-1")
    folder, _, _ = spark_folder(world.tmp, f"artifacts-{U1}", {"a": b"a"})
    outside = world.tmp.parent / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    (Path(folder) / "to-outside").symlink_to(outside, target_is_directory=True)
    (Path(folder) / "to-precious").symlink_to(outside / "precious")
    world.manifest("app-1", [folder])

    report = world.collect()

    assert report.ok and [d.app_id for d in report.deleted] == ["app-1"]
    assert _gone(folder)
    assert (outside / "precious").read_bytes() == b"keep me"


def test_folders_already_gone_leave_no_deleted_entry_and_the_manifest_goes(world: World) -> None:
    world.crashed("app-1")
    world.manifest("app-1", [str(world.tmp / f"artifacts-{U1}"),
                             str(world.local / f"userFiles-{U2}")])
    report = world.collect()
    assert report == GcReport(dry_run=False)
    assert not world.has_manifest("app-1") and not world.has_connect_folder("app-1")


def test_one_folder_gone_the_other_counted(world: World) -> None:
    world.crashed("app-1")
    present, files, size = spark_folder(world.local, f"userFiles-{U2}", USER_FILES)
    world.manifest("app-1", [str(world.tmp / f"artifacts-{U1}"), present, present])
    report = world.collect()
    assert report == GcReport(dry_run=False, deleted=[Deleted("app-1", files, size)])
    assert _gone(present) and not world.has_manifest("app-1")


def test_an_empty_manifest_is_removed(world: World) -> None:
    world.crashed("app-1")
    world.manifest("app-1", [])
    assert world.collect() == GcReport(dry_run=False)
    assert not world.has_manifest("app-1") and not world.has_connect_folder("app-1")


def test_a_record_without_a_boot_id_on_this_host_is_this_host(world: World) -> None:
    """A record of a version before boot ids names only its host: the host decides."""
    world.crashed("app-1", boot_id="", pid_ns="", identity_format=0)
    folders, files, size = two_folders(world)
    world.manifest("app-1", folders)
    assert world.collect().deleted == [Deleted("app-1", files, size)]
    assert all(_gone(f) for f in folders)


# -- collect_spark_folders: what is left alone -------------------------------------------------


def test_a_live_application_keeps_its_folders_until_it_dies(world: World) -> None:
    record = world.live("app-1")
    folders, files, size = two_folders(world)
    world.manifest("app-1", folders)
    before = _snapshot(world.tmp.parent)

    report = world.collect()

    assert report == GcReport(dry_run=False, skipped=[Skipped("app-1", "application is live")])
    assert _snapshot(world.tmp.parent) == before and world.has_manifest("app-1")
    world.alive.discard(record.pid)  # the server dies
    assert world.collect().deleted == [Deleted("app-1", files, size)]
    assert all(_gone(f) for f in folders)


PLACES = {
    "another host": {"host": "far-away.example"},
    "another host, same boot": {"host": "far-away.example", "boot_id": this_place().boot_id},
    "another boot of this host": {"boot_id": "00000000-0000-4000-8000-000000000000"},
    "another host and boot": {"host": "far-away.example",
                              "boot_id": "00000000-0000-4000-8000-000000000000"},
}


def test_this_host_has_a_boot_id() -> None:
    """Else the boot cases below would not test the boot rule."""
    assert this_place().boot_id


@pytest.mark.parametrize("state", ["crashed", "finished"])
@pytest.mark.parametrize("place", list(PLACES))
def test_another_hosts_folders_are_not_here_to_delete(world: World, place: str,
                                                      state: str) -> None:
    record = getattr(world, state)("app-1", **PLACES[place])
    folders, _, _ = two_folders(world)  # same paths exist here: they are not that server's
    world.manifest("app-1", folders)
    before = _snapshot(world.tmp.parent)

    report = world.collect()

    assert report.deleted == [] and report.ok
    assert report.skipped == [Skipped("app-1", f"its Spark folders are on host {record.host}")]
    assert _snapshot(world.tmp.parent) == before and world.has_manifest("app-1")


@pytest.mark.parametrize("problem", ["no record", "corrupt record", "record of another app",
                                     "unknown identity format"])
def test_without_proof_of_death_nothing_is_touched(world: World, problem: str) -> None:
    if problem == "corrupt record":
        world.storage.write_atomic(ApplicationRegistry.record_path("app-1"), b'{"format": 1, "b')
    elif problem == "record of another app":
        world.storage.write_record(ApplicationRegistry.record_path("app-1"),
                                   asdict(world.record("app-2")))
    elif problem == "unknown identity format":
        world.registry.finish(world.record("app-1", identity_format=99))
    folders, _, _ = two_folders(world)
    world.manifest("app-1", folders)
    before = _snapshot(world.tmp.parent)

    report = world.collect()

    assert report.deleted == [] and report.ok
    assert [s.app_id for s in report.skipped] == ["app-1"]
    if problem == "no record":
        assert report.skipped[0].reason == "no application record"
    assert _snapshot(world.tmp.parent) == before and world.has_manifest("app-1")


def test_folders_failing_the_verdict_are_left_alone_the_others_deleted(world: World) -> None:
    world.crashed("app-1")
    good, files, size = spark_folder(world.tmp, f"artifacts-{U1}", ARTIFACTS)
    outside = world.tmp.parent / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    link = world.tmp / f"artifacts-{U2}"
    link.symlink_to(outside, target_is_directory=True)
    misnamed, _, _ = spark_folder(world.tmp, f"spark-{U3}", {"x": b"x"})
    a_file = world.local / f"userFiles-{U4}"
    a_file.write_bytes(b"a file")
    foreign, _, _ = spark_folder(world.local, f"userFiles-{U1}", {"y": b"y"})
    os.chown(foreign, STRANGER, -1)
    relative = os.path.relpath(good, os.getcwd())
    refused = [str(link), misnamed, str(a_file), foreign, relative, str(link) + "/",
               f"{world.tmp}/x/../artifacts-{U3}"]
    world.manifest("app-1", refused[:3] + [good] + refused[3:])

    report = world.collect()

    assert report.deleted == [Deleted("app-1", files, size)] and report.ok
    assert _gone(good)
    assert [s.app_id for s in report.skipped] == ["app-1"] * len(refused)
    assert [s.reason.split(" left alone: ")[0] for s in report.skipped] == refused
    assert link.is_symlink() and (outside / "precious").read_bytes() == b"keep me"
    assert Path(misnamed, "x").is_file() and a_file.read_bytes() == b"a file"
    assert Path(foreign, "y").is_file() and os.stat(foreign).st_uid == STRANGER


def test_the_uid_given_decides_whose_folders_go(world: World) -> None:
    world.crashed("app-1")
    folders, _, _ = two_folders(world)
    world.manifest("app-1", folders)
    report = world.collect(uid=STRANGER)
    assert report.deleted == [] and report.ok
    assert [s.reason for s in report.skipped] == [
        f"{f} left alone: owned by uid {ME}, not {STRANGER}" for f in folders]
    assert all(Path(f).is_dir() for f in folders)


CORRUPT: dict[str, Callable[[str], bytes]] = {
    "not JSON": lambda good: b"not json at all",
    "torn record": lambda good: b'{"format": 1, "crc32c": "00", "body": {"folders": ["',
    "checksum mismatch": lambda good: (
        b'{"format": 1, "crc32c": "00000000", "body": {"folders": ["' + good.encode() + b'"]}}'),
}
CORRUPT_BODIES: dict[str, Callable[[str], Any]] = {
    "a list": lambda good: [good],
    "a string": lambda good: good,
    "null": lambda good: None,
    "no folders": lambda good: {"paths": [good]},
    "folders a string": lambda good: {"folders": good},
    "folders a dict": lambda good: {"folders": {good: True}},
    "folders null": lambda good: {"folders": None},
    "a number among them": lambda good: {"folders": [good, 3]},
    "a list among them": lambda good: {"folders": [good, [good]]},
    "null among them": lambda good: {"folders": [None, good]},
}


@pytest.mark.parametrize("kind", list(CORRUPT) + list(CORRUPT_BODIES))
def test_a_corrupt_manifest_fails_deletes_nothing_and_is_kept(world: World, kind: str) -> None:
    world.crashed("app-1")
    world.crashed("app-2")
    folders, _, _ = two_folders(world)
    path = spark_folders_path("app-1")
    if kind in CORRUPT:
        world.storage.write_atomic(path, CORRUPT[kind](folders[0]))
    else:
        world.storage.write_record(path, CORRUPT_BODIES[kind](folders[0]))
    healthy, files, size = spark_folder(world.tmp, f"artifacts-{U3}", {"z": b"zz"})
    world.manifest("app-2", [healthy])

    report = world.collect()

    assert [f.path for f in report.failed] == [path] and report.failed[0].message
    assert report.deleted == [Deleted("app-2", 1, 2)] and _gone(healthy)  # the next app goes on
    assert all(Path(f).is_dir() for f in folders) and world.has_manifest("app-1")


# -- collect_spark_folders: when deleting fails ------------------------------------------------


def _failing_rmtree(monkeypatch: pytest.MonkeyPatch, doomed: str, *, say: bool = True) -> None:
    """``shutil.rmtree`` as the module calls it leaves ``doomed`` there (reporting a denied
    removal when ``say``); every other folder is removed for real."""
    real = shutil.rmtree

    def rmtree(path: str, ignore_errors: bool = False, onerror: Any = None) -> None:
        if str(path) != doomed:
            return real(path, ignore_errors, onerror)
        if say and onerror is not None:
            error = PermissionError(errno.EACCES, "Permission denied", path)
            onerror(os.rmdir, path, (PermissionError, error, None))
        return None

    monkeypatch.setattr(connect_gc.shutil, "rmtree", rmtree)


@pytest.mark.parametrize("say", [True, False], ids=["error reported", "silently left"])
def test_a_folder_that_will_not_go_fails_and_the_manifest_stays_for_the_next_run(
        world: World, monkeypatch: pytest.MonkeyPatch, say: bool) -> None:
    world.crashed("app-1")
    (stuck, gone), _, _ = two_folders(world)
    stuck_files, stuck_size = len(ARTIFACTS), sum(map(len, ARTIFACTS.values()))
    _failing_rmtree(monkeypatch, stuck, say=say)
    world.manifest("app-1", [stuck, gone])

    report = world.collect()

    assert [f.path for f in report.failed] == [stuck]
    message = report.failed[0].message
    assert ("Permission denied" in message) if say else (message == "still there after removal")
    assert report.deleted == [Deleted("app-1", len(USER_FILES),
                                      sum(map(len, USER_FILES.values())))]
    assert Path(stuck, "jars", "a.jar").is_file() and _gone(gone)
    assert world.has_manifest("app-1")

    monkeypatch.undo()  # the next run can remove it
    again = world.collect()
    assert again == GcReport(dry_run=False, deleted=[Deleted("app-1", stuck_files, stuck_size)])
    assert _gone(stuck) and not world.has_manifest("app-1")


def test_a_manifest_that_cannot_be_deleted_fails_after_the_folders_went(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.crashed("app-1")
    folders, files, size = two_folders(world)
    world.manifest("app-1", folders)
    break_delete(monkeypatch, spark_folders_path("app-1"))

    report = world.collect()

    assert report.deleted == [Deleted("app-1", files, size)] and all(_gone(f) for f in folders)
    assert [f.path for f in report.failed] == [spark_folders_path("app-1")]
    assert "injected" in report.failed[0].message and world.has_manifest("app-1")


# -- what these tests found (fixed) ----------------------------------------------------------


def test_a_folder_whose_removal_failed_is_not_reported_deleted(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.crashed("app-1")
    stuck, _, _ = spark_folder(world.tmp, f"artifacts-{U1}", ARTIFACTS)
    _failing_rmtree(monkeypatch, stuck)
    world.manifest("app-1", [stuck])

    report = world.collect()

    assert [f.path for f in report.failed] == [stuck] and Path(stuck).is_dir()
    # Was a bug (fixed): nothing of app-1 was deleted, yet the report listed it as deleted
    # (0 files, 0 B) beside the FAILED line.
    assert report.deleted == []


def test_a_nul_in_a_manifest_path_is_a_refusal_not_an_exception(base: Path) -> None:
    folder = f"{base}/a\x00b/{GOOD}"
    # Was a bug (fixed): refusal() raised ValueError ("embedded null byte", from os.lstat)
    # instead of returning a reason.
    assert refusal(folder, ME) is not None


def test_a_nul_in_one_manifest_does_not_stop_gc(world: World) -> None:
    world.crashed("app-1")
    world.crashed("app-2")
    bad = f"{world.tmp}/a\x00b/artifacts-{U1}"
    mine, _, _ = spark_folder(world.tmp, f"artifacts-{U2}", {"a": b"a"})
    theirs, _, _ = spark_folder(world.tmp, f"artifacts-{U3}", {"b": b"b"})
    world.manifest("app-1", [bad, mine])
    world.manifest("app-2", [theirs])
    # Was a bug (fixed): a manifest entry with a NUL (a corrupt or tampered manifest) made
    # collect_spark_folders raise out of refusal(), ending the whole `gc` run.
    report = world.collect()
    assert [s.reason.startswith(f"{bad} left alone") for s in report.skipped] == [True]
    assert _gone(mine) and _gone(theirs)


def test_a_trailing_dot_is_refused_or_deleted_never_a_failure_forever(world: World) -> None:
    world.crashed("app-1")
    folder, _, _ = spark_folder(world.tmp, f"artifacts-{U1}", ARTIFACTS)
    world.manifest("app-1", [folder + "/."])
    assert truth(folder + "/.", ME) is False  # its last name is '.', not a Spark folder's
    # Was a bug (fixed): refusal() judged Path(folder) (no trailing '.') but rmtree got the raw
    # string, whose rmdir("…/.") fails with EINVAL on every run.
    first = world.collect()
    second = world.collect()
    assert (first.failed, second.failed) == ([], [])
    assert not world.has_manifest("app-1")


def test_a_run_by_another_user_leaves_the_folders_to_their_owner(world: World) -> None:
    """Ownership depends on who runs gc, not on the folder: the owner's run must still find
    them."""
    world.crashed("app-1")
    folders, files, size = two_folders(world)
    world.manifest("app-1", folders)
    assert world.collect(uid=STRANGER).deleted == []
    assert all(Path(f).is_dir() for f in folders)
    # Was a bug (fixed): a run by another user refused every folder ("owned by uid …") yet
    # deleted the manifest, so the owner's own `gc` found nothing. The same for "cannot be read".
    assert world.has_manifest("app-1")
    assert world.collect(uid=ME).deleted == [Deleted("app-1", files, size)]
    assert all(_gone(f) for f in folders)
