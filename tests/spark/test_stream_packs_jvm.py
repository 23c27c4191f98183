"""What only the JVM's streaming checkpoint file manager does with packs (FLIP-306): Spark's
createAtomic and delete of packed files, its cached view of the packs, seeks in a packed file
and the statuses it lists. Called through py4j on the driver of the shared local-cluster
session (``StreamCheckpointFiles``: ``StreamFiles``/``StreamPacks``).

* createAtomic refuses to overwrite a live packed file unless asked to, and a loose rewrite then
  wins;
* a delete of a packed file hides it at once and is written as a tombstone for every pack
  holding it live, which the Python reader then applies; the view is read again once older
  than 2 s.

What Spark sees of packs (list, exists, open; unreadable packs; what is not ours) is the same
for the Python reader and the JVM: one suite for both, tests/conformance/test_pack_reading.py.

A JVM caches its view of a location's packs for 2 s, so every test uses fresh locations.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest
from py4j.protocol import Py4JJavaError

from spark_steward.storage import Storage
from spark_steward.streams.packs import Packs
from tests.conformance import java_names
from tests.conformance.vectors.stream_packs import PACKS_FOLDER, Layout

TOMBSTONE_WAIT = 3.0  # the flusher writes within ~0.5 s


def _packs(root: Path) -> Packs:
    return Packs(Storage.from_url("file://" + str(root)), str(root))


def _tombstone_text(root: Path) -> str:
    folder = root / PACKS_FOLDER / "dead"
    if not folder.is_dir():
        return ""
    return "".join(p.read_text() for p in sorted(folder.glob("*.txt"))
                   if not p.name.startswith("."))


def _java_class(jvm: Any, name: str) -> Any:
    """The py4j handle of the Java class ``name`` (tests/conformance/java_names.py)."""
    handle = jvm
    for part in name.split("."):
        handle = getattr(handle, part)
    return handle


class Manager:
    """Spark's checkpoint file manager of one folder of a location, through py4j."""

    def __init__(self, spark: Any, root: Path, folder: str) -> None:
        self.jvm = spark._jvm
        self.root = root
        self.folder = folder
        self.m = _java_class(self.jvm, java_names.stream_checkpoint_files())(
            self.path(""), spark._jsc.hadoopConfiguration())

    def path(self, name: str) -> Any:
        full = f"file:{self.root}/{self.folder}" + (f"/{name}" if name else "")
        return self.jvm.org.apache.hadoop.fs.Path(full)

    def statuses(self) -> dict[str, Any]:
        found = list(self.m.list(self.path("")))
        return {s.getPath().getName(): s for s in found}

    def names(self) -> set[str]:
        """The listing, without the checksum sidecars Hadoop's local file system adds."""
        return {n for n in self.statuses() if not n.endswith(".crc")}

    def exists(self, name: str) -> bool:
        return bool(self.m.exists(self.path(name)))

    def read(self, name: str) -> bytes:
        stream = self.m.open(self.path(name))
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def create(self, name: str, data: bytes, overwrite: bool) -> None:
        out = self.m.createAtomic(self.path(name), overwrite)
        out.write(bytearray(data))
        out.close()

    def delete(self, name: str) -> None:
        self.m.delete(self.path(name))


def _java_error(call: Callable[[], Any]) -> tuple[str, str]:
    """The class and message of the Java exception ``call`` raises."""
    with pytest.raises(Py4JJavaError) as info:
        call()
    exc = info.value.java_exception
    return str(exc.getClass().getName()), str(exc.getMessage())


# -- what Spark gets back ----------------------------------------------------------------------


def test_a_packed_file_is_a_seekable_stream_and_a_file_status(spark: Any,
                                                              tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    payload = bytes(range(256)) * 40
    layout.pack(1, [("offsets/0", b"zero", 10), ("offsets/1", payload, 11)])
    offsets = Manager(spark, layout.root, "offsets")
    status = offsets.statuses()["1"]
    assert str(status.getPath()) == f"file:{layout.root}/offsets/1"
    assert not status.isDirectory() and status.getLen() == len(payload)
    assert status.getModificationTime() == 11
    stream = offsets.m.open(offsets.path("1"))
    try:
        stream.seek(256)
        assert stream.read() == 0 and stream.getPos() == 257
    finally:
        stream.close()
    kind, _ = _java_error(lambda: offsets.read("9"))
    assert kind == "java.io.FileNotFoundException"


# -- createAtomic ------------------------------------------------------------------------------


def test_create_refused_over_a_live_packed_file(spark: Any, tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    root = layout.root
    pack = layout.pack(1, [("commits/0", b"packed-0", 1), ("commits/1", b"packed-1", 2)])
    layout.catalog([f"dead\t{pack}\tcommits/1"])

    commits = Manager(spark, root, "commits")
    kind, message = _java_error(lambda: commits.create("0", b"other", overwrite=False))
    assert kind == "org.apache.hadoop.fs.FileAlreadyExistsException", (kind, message)
    assert f"{root}/commits/0" in message
    assert not (root / "commits/0").exists(), "nothing written"
    assert commits.read("0") == b"packed-0"

    commits.create("0", b"rewritten", overwrite=True)
    assert (root / "commits/0").read_bytes() == b"rewritten"
    assert commits.read("0") == b"rewritten", "the loose file wins"
    assert commits.names() == {"0"}
    assert commits.statuses()["0"].getLen() == len(b"rewritten")

    commits.create("1", b"again", overwrite=False)  # its packed copy is dead
    assert commits.read("1") == b"again"
    assert commits.names() == {"0", "1"}


# -- delete ------------------------------------------------------------------------------------


def _wait_for_lines(root: Path, lines: set[str]) -> float:
    start = time.monotonic()
    while time.monotonic() - start < TOMBSTONE_WAIT:
        if lines <= set(_tombstone_text(root).splitlines()):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"no tombstone {sorted(lines)} within {TOMBSTONE_WAIT}s: "
                         f"{_tombstone_text(root)!r}")


def test_delete_of_packed_files_writes_tombstones(spark: Any, tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    root = layout.root
    old = layout.pack(1, [("offsets/0", b"o0", 1), ("offsets/1", b"o1", 2),
                          ("offsets/2", b"o2", 3), ("offsets/3", b"o3", 4)])
    new = layout.pack(2, [("offsets/1", b"n1", 5), ("offsets/3", b"n3", 6)])
    layout.catalog([f"dead\t{new}\toffsets/3"])  # only the old pack holds offsets/3 live
    layout.write_loose("offsets/2", b"loose-2")

    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {"0", "1", "2", "3"}
    offsets.delete("0")   # one pack
    offsets.delete("1")   # two packs
    offsets.delete("2")   # loose and packed
    offsets.delete("3")   # live in one of the two packs holding it
    offsets.delete("9")   # nowhere: nothing to record
    assert offsets.names() == set()
    assert not any(offsets.exists(n) for n in ("0", "1", "2", "3"))
    assert not (root / "offsets/2").exists()
    kind, _ = _java_error(lambda: offsets.read("1"))
    assert kind == "java.io.FileNotFoundException"

    expected = {f"{old}\toffsets/0", f"{old}\toffsets/1", f"{new}\toffsets/1",
                f"{old}\toffsets/2", f"{old}\toffsets/3"}
    _wait_for_lines(root, expected)
    folder = root / PACKS_FOLDER / "dead"
    assert set(_tombstone_text(root).splitlines()) == expected, "no other mark, none twice"
    assert all(p.name.endswith(".txt") and not p.name.startswith(".")
               for p in folder.iterdir()), sorted(p.name for p in folder.iterdir())
    assert _tombstone_text(root).count("\n") == len(expected)
    # The Python reader sees the deletes through the tombstones.
    assert set(_packs(root).read().live()) == set()
    # Deleting again records nothing more.
    offsets.delete("1")
    # Once its cached view is older than 2 s the JVM rereads the packs: the deleted files stay
    # deleted, and a pack written meanwhile is seen.
    newest = layout.pack(3, [("offsets/5", b"n5", 7), ("offsets/0", b"again-0", 8)])
    time.sleep(2.2)
    assert offsets.names() == {"0", "5"}
    assert offsets.read("0") == b"again-0", "a rewrite packed after the delete is served"
    assert _tombstone_text(root).count("\n") == len(expected)
    assert newest not in _tombstone_text(root)


def test_delete_in_a_state_partition(spark: Any, tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    pack = layout.pack(1, [("state/0/2/1.delta", b"a", 1), ("state/0/2/2.delta", b"b", 2)])
    part = Manager(spark, layout.root, "state/0/2")
    part.delete("1.delta")
    assert part.names() == {"2.delta"}
    _wait_for_lines(layout.root, {f"{pack}\tstate/0/2/1.delta"})
    assert set(_packs(layout.root).read().live()) == {"state/0/2/2.delta"}
