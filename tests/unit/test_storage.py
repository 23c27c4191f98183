"""storage.py against memory:// and a local directory: atomic writes, listing, delete, errors."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from fsspec.registry import known_implementations

from spark_steward import records
from spark_steward.errors import (
    OutcomeUnknown,
    RecordCorrupt,
    StorageBackendMissing,
    StorageError,
)
from spark_steward.storage import FileEntry, Storage

# -- basic IO on both backends -----------------------------------------------------------------


def test_write_atomic_then_read_bytes(storage: Storage) -> None:
    storage.write_atomic("a/b/c.bin", b"\x00\x01payload")
    assert storage.read_bytes("a/b/c.bin") == b"\x00\x01payload"
    assert storage.exists("a/b/c.bin") and storage.exists("a/b")
    storage.write_atomic("a/b/c.bin", b"second")
    assert storage.read_bytes("a/b/c.bin") == b"second"


def test_write_empty_object(storage: Storage) -> None:
    storage.write_atomic("empty", b"")
    assert storage.read_bytes("empty") == b""
    assert list(storage.walk_files()) == [FileEntry("empty", 0)]


def test_read_missing_raises_file_not_found(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("no/such/object")
    assert not storage.exists("no/such/object")


def test_record_round_trip(storage: Storage) -> None:
    body = {"app_id": "app-1", "n": [1, 2, 3], "text": "\u2603"}
    storage.write_record("applications/app-1.json", body)
    assert storage.read_record("applications/app-1.json") == body
    raw = storage.read_bytes("applications/app-1.json")
    assert records.decode_record(raw, "x") == body


def test_corrupt_record_names_its_url(storage: Storage) -> None:
    storage.write_atomic("applications/x.json", b'{"format": 1, "body": ')
    with pytest.raises(RecordCorrupt) as info:
        storage.read_record("applications/x.json")
    assert storage.url_of("applications/x.json") in str(info.value)


def test_missing_record_raises_file_not_found(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_record("applications/none.json")


def test_list_names_direct_children_sorted(storage: Storage) -> None:
    for rel in ("d/zeta", "d/alpha.json", "d/mid/deep/file", "d/mid/other", "d/.hidden",
                "elsewhere/x"):
        storage.write_atomic(rel, b"1")
    assert storage.list_names("d") == [".hidden", "alpha.json", "mid", "zeta"]
    assert storage.list_names("d/mid") == ["deep", "other"]
    assert storage.list_names() == ["d", "elsewhere"]
    assert storage.list_names("") == storage.list_names("/") == storage.list_names(".")


def test_list_names_of_missing_dir_is_empty(storage: Storage) -> None:
    assert storage.list_names("missing") == []
    assert storage.list_names() == []


def test_walk_files_reports_relative_paths_and_sizes(storage: Storage) -> None:
    storage.write_atomic("apps/a/one", b"x" * 10)
    storage.write_atomic("apps/a/sub/two", b"y" * 3)
    storage.write_atomic("apps/b/three", b"z" * 7)
    storage.write_atomic("top", b"")
    assert list(storage.walk_files()) == [
        FileEntry("apps/a/one", 10), FileEntry("apps/a/sub/two", 3),
        FileEntry("apps/b/three", 7), FileEntry("top", 0)]
    assert list(storage.walk_files("apps/a")) == [FileEntry("apps/a/one", 10),
                                                   FileEntry("apps/a/sub/two", 3)]
    assert list(storage.walk_files("missing")) == []


def test_usage(storage: Storage) -> None:
    assert storage.usage() == (0, 0)
    storage.write_atomic("u/a", b"12345")
    storage.write_atomic("u/b/c", b"123")
    storage.write_atomic("v", b"1")
    assert storage.usage("u") == (2, 8)
    assert storage.usage() == (3, 9)
    assert storage.usage("nothing-here") == (0, 0)


def test_delete_is_idempotent(storage: Storage) -> None:
    storage.write_atomic("gone/a", b"1")
    storage.write_atomic("gone/sub/b", b"2")
    storage.write_atomic("kept/c", b"3")
    assert storage.delete("gone") is True
    assert storage.delete("gone") is False
    assert not storage.exists("gone") and storage.list_names("gone") == []
    assert storage.list_names() == ["kept"]
    assert storage.read_bytes("kept/c") == b"3"


def test_delete_single_file(storage: Storage) -> None:
    storage.write_atomic("f/one", b"1")
    storage.write_atomic("f/two", b"2")
    assert storage.delete("f/one") is True
    assert storage.delete("f/one") is False
    assert storage.list_names("f") == ["two"]


@pytest.mark.parametrize("rel", ["", ".", "/", "./", "//"])
def test_delete_of_root_is_refused(storage: Storage, rel: str) -> None:
    storage.write_atomic("precious", b"1")
    with pytest.raises(StorageError) as info:
        storage.delete(rel)
    assert storage.url in str(info.value) and "root" in str(info.value)
    assert storage.read_bytes("precious") == b"1"


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "a/..", "..", "a\\..\\..\\x", "./../x"])
@pytest.mark.parametrize("op", ["write_atomic", "read_bytes", "delete", "list_names", "path",
                                "url_of", "exists"])
def test_path_traversal_is_rejected(storage: Storage, rel: str, op: str) -> None:
    call: Callable[..., Any] = getattr(storage, op)
    args = (rel, b"x") if op == "write_atomic" else (rel,)
    with pytest.raises(StorageError) as info:
        call(*args)
    assert repr(rel) in str(info.value)


def test_leading_slash_stays_under_the_root(storage: Storage) -> None:
    assert storage.path("/etc/passwd") == storage.root + "/etc/passwd"
    assert storage.path("a//b/./c") == storage.root + "/a/b/c"
    assert storage.url_of("a/b") == storage.url.rstrip("/") + "/a/b"
    assert storage.path() == storage.root and storage.url_of() == storage.url


# -- backends ------------------------------------------------------------------------------------


def test_memory_is_an_object_store_and_local_is_local(memory_storage: Storage,
                                                      local_storage: Storage) -> None:
    assert memory_storage.is_object_store and not memory_storage.is_local
    assert local_storage.is_local and not local_storage.is_object_store
    assert local_storage.protocol == "file"


def test_plain_path_becomes_a_file_url(tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path))
    assert storage.url == tmp_path.as_uri() and storage.root == str(tmp_path)
    storage.write_atomic("x", b"1")
    assert (tmp_path / "x").read_bytes() == b"1"
    assert Storage.from_url(tmp_path.as_uri()).read_bytes("x") == b"1"


def test_memory_roots_are_isolated(memory_storage: Storage) -> None:
    memory_storage.write_atomic("x", b"1")
    other = Storage.from_url(memory_storage.url + "-other")
    assert other.list_names() == [] and not other.exists("x")


def _uninstalled_protocol() -> str:
    """A protocol fsspec knows of whose backend package is not installed here."""
    for protocol in ("gs", "abfs", "hf", "oci", "webdav", "box", "dropbox", "lakefs", "adl"):
        spec = known_implementations.get(protocol)
        if spec is None:
            continue
        module = spec["class"].split(".", 1)[0]
        if importlib.util.find_spec(module) is None:
            return protocol
    raise AssertionError("every candidate fsspec backend is installed; extend the list")


def test_missing_backend_names_the_url_and_what_to_install() -> None:
    protocol = _uninstalled_protocol()
    url = f"{protocol}://bucket/x"
    with pytest.raises(StorageBackendMissing) as info:
        Storage.from_url(url)
    message = str(info.value)
    assert url in message and f"{protocol}://" in message
    hint = known_implementations[protocol].get("err", "")
    if hint:
        assert hint in message


def test_unknown_protocol_names_the_url() -> None:
    with pytest.raises(StorageError) as info:
        Storage.from_url("nosuchproto://bucket/x")
    assert not isinstance(info.value, StorageBackendMissing)
    assert "nosuchproto://bucket/x" in str(info.value)
    assert "\n" not in str(info.value)


# -- local atomicity -------------------------------------------------------------------------------


def test_local_failed_rename_keeps_old_content_and_no_temp(local_storage: Storage,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    local_storage.write_atomic("dir/target", b"old")
    directory = Path(local_storage.root) / "dir"

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StorageError) as info:
        local_storage.write_atomic("dir/target", b"new")
    assert not isinstance(info.value, OutcomeUnknown)
    assert local_storage.url_of("dir/target") in str(info.value)
    assert "No space left on device" in str(info.value)
    monkeypatch.undo()
    assert (directory / "target").read_bytes() == b"old"
    assert sorted(os.listdir(directory)) == ["target"]


def test_local_failed_first_write_leaves_nothing(local_storage: Storage,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StorageError, match="Input/output error") as info:
        local_storage.write_atomic("dir/new", b"data")
    assert local_storage.url_of("dir/new") in str(info.value)
    monkeypatch.undo()
    assert os.listdir(Path(local_storage.root) / "dir") == []
    assert not local_storage.exists("dir/new")


def test_local_write_leaves_no_temp_files(local_storage: Storage) -> None:
    for i in range(5):
        local_storage.write_atomic("d/x", str(i).encode())
    assert os.listdir(Path(local_storage.root) / "d") == ["x"]
    assert local_storage.read_bytes("d/x") == b"4"


# -- a filesystem that fails on command ---------------------------------------------------------------


class FailSwitch:
    """Makes chosen methods of a (cached, shared) fsspec instance raise until lifted."""

    def __init__(self, fs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fs = fs
        self.monkeypatch = monkeypatch
        self.failures: dict[str, BaseException] = {}
        self.calls: list[str] = []

    def fail(self, method: str, exc: BaseException) -> None:
        if method not in self.failures:
            original = getattr(self.fs, method)

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(method)
                if method in self.failures and self.failures[method] is not None:
                    raise self.failures[method]
                return original(*args, **kwargs)

            self.monkeypatch.setattr(self.fs, method, wrapper)
        self.failures[method] = exc

    def lift(self, method: str) -> None:
        self.failures[method] = None  # type: ignore[assignment]


@pytest.fixture
def switch(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> FailSwitch:
    return FailSwitch(storage.fs, monkeypatch)


def test_delete_failure_is_a_storage_error_then_succeeds(storage: Storage, switch: FailSwitch
                                                         ) -> None:
    storage.write_atomic("victim/a", b"1")
    switch.fail("rm", PermissionError(13, "Permission denied"))
    with pytest.raises(StorageError) as info:
        storage.delete("victim")
    assert storage.url_of("victim") in str(info.value)
    assert "Permission denied" in str(info.value)
    assert "rm" in switch.calls
    assert storage.read_bytes("victim/a") == b"1"
    switch.lift("rm")
    assert storage.delete("victim") is True
    assert storage.delete("victim") is False
    assert not storage.exists("victim")


def test_read_failure_is_a_storage_error(storage: Storage, switch: FailSwitch) -> None:
    storage.write_atomic("r", b"1")
    switch.fail("cat_file", PermissionError(13, "Permission denied"))
    with pytest.raises(StorageError) as info:
        storage.read_bytes("r")
    assert storage.url_of("r") in str(info.value)
    switch.lift("cat_file")
    assert storage.read_bytes("r") == b"1"


def test_object_store_write_failure_is_outcome_unknown(memory_storage: Storage,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    switch = FailSwitch(memory_storage.fs, monkeypatch)
    switch.fail("pipe_file", ConnectionResetError(104, "Connection reset by peer"))
    with pytest.raises(OutcomeUnknown) as info:
        memory_storage.write_atomic("w", b"1")
    assert memory_storage.url_of("w") in str(info.value)
    switch.lift("pipe_file")
    memory_storage.write_atomic("w", b"2")
    assert memory_storage.read_bytes("w") == b"2"


def test_listing_failure_is_a_storage_error(storage: Storage, switch: FailSwitch) -> None:
    storage.write_atomic("applications/a.json", b"1")
    switch.fail("ls", PermissionError(13, "Permission denied"))
    with pytest.raises(StorageError) as info:
        storage.list_names("applications")
    assert storage.url_of("applications") in str(info.value)
