"""private.py on real files: what it creates is 0700/0600 whatever the umask, and a root another
user could have planted or written to is refused with one line naming it."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

import pytest

from spark_steward.errors import ConfigError
from spark_steward.private import (PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, ensure_private_root,
                                   make_dirs, open_new)

KEY = "spark.steward.local.dir"
OTHER_UID = 65534  # nobody


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The loosest umask: whatever stays private was made so by the mode, not the umask."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


# -- make_dirs -------------------------------------------------------------------------------

def test_make_dirs_creates_every_missing_level_0700(tmp_path: Path, open_umask: None) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert make_dirs(target) == target
    for level in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert mode(level) == PRIVATE_DIR_MODE, level


def test_make_dirs_leaves_existing_directories_as_they_are(tmp_path: Path,
                                                           open_umask: None) -> None:
    (tmp_path / "a").mkdir(mode=0o755)
    make_dirs(tmp_path / "a" / "b")
    make_dirs(tmp_path / "a" / "b")  # exist_ok
    assert mode(tmp_path / "a") == 0o755
    assert mode(tmp_path / "a" / "b") == PRIVATE_DIR_MODE


def test_make_dirs_fails_like_mkdir_where_a_file_is(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "f")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "f" / "below")


def test_make_dirs_accepts_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           open_umask: None) -> None:
    monkeypatch.chdir(tmp_path)
    make_dirs("x/y")
    assert mode(tmp_path / "x") == mode(tmp_path / "x" / "y") == PRIVATE_DIR_MODE


# -- open_new --------------------------------------------------------------------------------

def test_open_new_creates_a_0600_file_not_inherited_by_children(tmp_path: Path,
                                                               open_umask: None) -> None:
    with open_new(tmp_path / "f") as f:
        f.write(b"hello")
        assert not os.get_inheritable(f.fileno())
    assert (tmp_path / "f").read_bytes() == b"hello"
    assert mode(tmp_path / "f") == PRIVATE_FILE_MODE


def test_open_new_truncates_and_tightens_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old content")
    path.chmod(0o644)
    with open_new(path) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new"
    assert mode(path) == PRIVATE_FILE_MODE


def test_open_new_exclusive_refuses_an_existing_file(tmp_path: Path) -> None:
    with open_new(tmp_path / "f", exclusive=True) as f:
        f.write(b"1")
    with pytest.raises(FileExistsError):
        open_new(tmp_path / "f", exclusive=True)
    assert (tmp_path / "f").read_bytes() == b"1"


def test_open_new_never_writes_through_a_symbolic_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(OSError):
        open_new(tmp_path / "link")
    assert victim.read_bytes() == b"keep"


# -- ensure_private_root ---------------------------------------------------------------------

def test_a_missing_root_is_created_0700_with_its_parents(tmp_path: Path,
                                                         open_umask: None) -> None:
    root = tmp_path / "new" / "local"
    assert ensure_private_root(root, key=KEY) == root
    assert mode(root) == mode(root.parent) == PRIVATE_DIR_MODE
    assert ensure_private_root(root, key=KEY) == root  # and accepted the next time


def test_a_readable_root_of_ours_is_tightened(tmp_path: Path) -> None:
    root = tmp_path / "local"
    root.mkdir()
    root.chmod(0o755)
    ensure_private_root(root, key=KEY)
    assert mode(root) == PRIVATE_DIR_MODE


def refusal(root: Path | str) -> str:
    with pytest.raises(ConfigError) as caught:
        ensure_private_root(root, key=KEY)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{KEY}: ") and str(root) in message
    return message


@needs_root
def test_a_root_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "local"
    root.mkdir(mode=0o700)
    os.chown(root, OTHER_UID, OTHER_UID)
    message = refusal(root)
    assert f"owned by uid {OTHER_UID}, not this user (uid {os.geteuid()})" in message
    assert mode(root) == 0o700 and os.lstat(root).st_uid == OTHER_UID  # left as it was


@pytest.mark.parametrize("loose", [0o777, 0o770, 0o1777, 0o702])
def test_a_root_others_can_write_is_refused_not_tightened(tmp_path: Path, loose: int) -> None:
    root = tmp_path / "local"
    root.mkdir()
    root.chmod(loose)
    assert f"writable by other users (mode {loose:04o})" in refusal(root)
    assert mode(root) == loose


def test_a_symbolic_link_as_root_is_refused_even_to_a_good_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "local").symlink_to(real)
    assert "symbolic link" in refusal(tmp_path / "local")


def test_a_dangling_symbolic_link_as_root_is_refused_and_not_followed(tmp_path: Path) -> None:
    (tmp_path / "local").symlink_to(tmp_path / "elsewhere")
    assert "symbolic link" in refusal(tmp_path / "local")
    assert not (tmp_path / "elsewhere").exists()


def test_a_file_as_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "local").write_text("x")
    assert "not a directory" in refusal(tmp_path / "local")


def test_a_root_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert "cannot create" in refusal(tmp_path / "file" / "local")


@needs_root
def test_a_parent_another_user_planted_in_a_sticky_shared_dir_is_refused(tmp_path: Path) -> None:
    """The default <tmp>/spark-steward-<uid>/local: whoever owns spark-steward-<uid> could swap
    local for a directory of theirs, so a planted one is refused before anything is made in it."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / f"spark-steward-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, OTHER_UID, OTHER_UID)
    message = refusal(planted / "local")
    assert str(planted) in message and f"owned by uid {OTHER_UID}" in message
    assert not (planted / "local").exists()


def test_our_parent_in_a_sticky_shared_dir_is_fine(tmp_path: Path, open_umask: None) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    root = shared / f"spark-steward-{os.getuid()}" / "local"
    ensure_private_root(root, key=KEY)
    assert mode(root.parent) == mode(root) == PRIVATE_DIR_MODE


@needs_root
def test_an_executor_runtime_refuses_a_planted_local_dir_before_using_it(tmp_path: Path) -> None:
    """Executor hosts check the dir the driver named, as the driver does at attach."""
    from spark_steward.kernel.executor import ExecutorContext, ExecutorRuntime

    local = tmp_path / "local"
    local.mkdir(mode=0o700)
    os.chown(local, OTHER_UID, OTHER_UID)
    context = ExecutorContext(app_id="app-1", storage_url=(tmp_path / "s").as_uri(),
                              local_dir=str(local), auth_token="t")
    with pytest.raises(ConfigError) as caught:
        ExecutorRuntime(context)
    assert str(caught.value) == (f"{KEY}: {local} is owned by uid {OTHER_UID}, not this user "
                                 f"(uid {os.geteuid()}); use a directory of your own")
    assert os.listdir(local) == []


# -- the sites that write into the local dir and a local storage dir --------------------------

def test_a_local_storage_dir_gets_private_folders_and_files(tmp_path: Path,
                                                            open_umask: None) -> None:
    from spark_steward.storage import Storage

    storage = Storage.from_url(str(tmp_path / "root"))
    storage.write_record("a/b/record.json", {"x": 1})
    source = tmp_path / "source"
    source.write_bytes(b"payload")
    storage.upload("c/d/blob", str(source))
    everything = [p for p in (tmp_path / "root").rglob("*")] + [tmp_path / "root"]
    assert {p.name: mode(p) for p in everything} == {
        "root": 0o700, "a": 0o700, "b": 0o700, "record.json": 0o600,
        "c": 0o700, "d": 0o700, "blob": 0o600}


def test_the_working_dir_disk_makes_private_files_folders_and_locks(tmp_path: Path,
                                                                   open_umask: None) -> None:
    from spark_steward.local.fs import OS_FS

    OS_FS.makedirs(tmp_path / "w" / "x")
    OS_FS.write_new(tmp_path / "w" / "x" / "data", [b"abc"])
    OS_FS.touch(tmp_path / "w" / "use")
    lock = OS_FS.lock(tmp_path / "w" / "lock", exclusive=True, wait=True)
    assert lock is not None
    lock.release()
    assert {p.name: mode(p) for p in (tmp_path / "w").rglob("*")} == {
        "x": 0o700, "data": 0o600, "use": 0o600, "lock": 0o600}
    assert mode(tmp_path / "w") == 0o700


def test_unpacked_archives_keep_only_their_owners_bits(tmp_path: Path, open_umask: None) -> None:
    import io
    import tarfile

    from spark_steward.blob.archives import unpack_once

    archive = tmp_path / "tools.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, member_mode in (("bin/run.sh", 0o755), ("README", 0o644)):
            member = tarfile.TarInfo(name)
            member.size, member.mode = 2, member_mode
            tf.addfile(member, io.BytesIO(b"hi"))
    dest = unpack_once(archive, "tools.tgz", tmp_path / "files" / "k" / "tools.tgz")
    found = {str(p.relative_to(dest)): mode(p) for p in dest.rglob("*")}
    assert found == {"bin": 0o700, "bin/run.sh": 0o700, "README": 0o600}
    assert mode(dest) == mode(dest.parent) == mode(dest.parent.parent) == 0o700
    assert mode(dest.with_name(".tools.tgz.unpack")) == 0o600
