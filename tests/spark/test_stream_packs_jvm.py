"""Packed streaming checkpoint files as the JVM's checkpoint file manager serves them (FLIP-306).

The packs are written by Python (``streams/packs.py``) or byte by byte in the tests; Spark's
view of them is the shim's ``StreamCheckpointFiles`` (``StreamFiles``/``StreamPacks``), called
through py4j on the driver of the shared local-cluster session. The file proves:

* list = loose files plus live packed members (loose winning, the newest pack winning, members
  killed in the catalog or a tombstone left out), also for a state partition folder and for a
  folder that exists only in packs; exists/open agree with it, open returns the exact bytes;
* createAtomic refuses to overwrite a live packed file unless asked to, and a loose rewrite then
  wins;
* a delete of a packed file hides it at once and is written as a tombstone for every pack
  holding it live;
* a pack that cannot be read (garbage, truncated, index checksum, index naming a path that is
  not packable or bytes beyond the index) fails list/exists/open naming it; a member failing
  its checksum fails its open only; names that are not pack names, and tombstone lines that are
  not marks, are ignored;
* for random layouts, and for what two cycles of the real ``Packer`` leave, the JVM lists and
  reads exactly what the Python reader (``Packs.read().live()``) says plus the loose files.

The last tests pin cases where the Python reader and the JVM once disagreed: file names with
non-ASCII digits, line breaks other than ``\n`` in marks, and catalogs over 16 MiB.

A JVM caches its view of a location's packs for 2 s, so every test uses fresh locations.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import crc32c
import pytest
from py4j.protocol import Py4JJavaError

from spark_steward.streams.lifecycle.packs import PACKS_FOLDER, packable
from spark_steward.storage import Storage
from spark_steward.streams.location import Location
from spark_steward.streams.packer import Packer
from spark_steward.streams.packs import MAGIC, TRAILER, Packs, encode

pytestmark = pytest.mark.spark

QUERY_ID = "3d94f916-43d2-424b-a782-501d70a96801"
TOMBSTONE_WAIT = 3.0  # the flusher writes within ~0.5 s

Members = Iterable[tuple[str, bytes, int]]


# -- locations and packs ---------------------------------------------------------------------


def _location(base: Path, name: str = "ckpt") -> Path:
    """A checkpoint location laid out as Spark leaves it (metadata, offsets, commits, state)."""
    root = base / name
    for folder in ("offsets", "commits", "state/0/0"):
        (root / folder).mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": QUERY_ID}))
    return root


def _packs(root: Path) -> Packs:
    return Packs(Storage.from_url("file://" + str(root)), str(root))


def _pack_name(sequence: int) -> str:
    return f"{sequence:016d}-{uuid.uuid4().hex}.pack"


def _write_pack(root: Path, sequence: int, members: Members) -> str:
    name = _pack_name(sequence)
    body, _ = encode(list(members))
    _packs(root).write_pack(name, body)
    return name


def _raw_pack(root: Path, data: bytes, sequence: int = 1) -> str:
    """Puts ``data`` under a valid pack name, bypassing any check."""
    name = _pack_name(sequence)
    folder = root / PACKS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return name


def _hand_pack(body: bytes, lines: str) -> bytes:
    """A pack built byte by byte: ``body``, the index ``lines`` and a trailer whose checksum
    matches them (so only what the lines say can make it unreadable)."""
    index = lines.encode()
    return body + index + TRAILER.pack(len(body), len(index), crc32c.crc32c(index), MAGIC)


def _catalog(root: Path, lines: Iterable[str]) -> None:
    folder = root / PACKS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "catalog.txt").write_text("".join(line + "\n" for line in lines))


def _tombstone(root: Path, name: str, data: bytes) -> None:
    folder = root / PACKS_FOLDER / "dead"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def _tombstone_text(root: Path) -> str:
    folder = root / PACKS_FOLDER / "dead"
    if not folder.is_dir():
        return ""
    return "".join(p.read_text() for p in sorted(folder.glob("*.txt"))
                   if not p.name.startswith("."))


def _loose(root: Path, rel: str, data: bytes) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


# -- the JVM's manager -----------------------------------------------------------------------


class Manager:
    """Spark's checkpoint file manager of one folder of a location, through py4j."""

    def __init__(self, spark: Any, root: Path, folder: str) -> None:
        self.jvm = spark._jvm
        self.root = root
        self.folder = folder
        self.m = self.jvm.io.sparksteward.shim.streams.StreamCheckpointFiles(
            self.path(""), spark._jsc.hadoopConfiguration())

    def path(self, name: str) -> Any:
        full = f"file:{self.root}/{self.folder}" + (f"/{name}" if name else "")
        return self.jvm.org.apache.hadoop.fs.Path(full)

    def statuses(self) -> dict[str, Any]:
        found = list(self.m.list(self.path("")))
        names = [s.getPath().getName() for s in found]
        assert len(names) == len(set(names)), f"a name listed twice: {sorted(names)}"
        return dict(zip(names, found))

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


def _assert_unreadable(manager: Manager, pack: str, probe: str) -> str:
    """list, exists and open of ``probe`` (packed in no readable pack) fail naming ``pack``."""
    messages = []
    for call in (manager.statuses, lambda: manager.exists(probe), lambda: manager.read(probe)):
        kind, message = _java_error(call)
        assert kind == "java.io.IOException", (kind, message)
        assert f"the pack file:{manager.root}/{PACKS_FOLDER}/{pack} is unreadable (" in message, \
            message
        messages.append(message)
    return messages[0]


# -- 1. list ---------------------------------------------------------------------------------


def test_list_is_loose_and_live_packed_members(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    old = _write_pack(root, 1, [("offsets/0", b"old-0", 1000), ("offsets/1", b"old-1", 1001),
                                ("offsets/2", b"old-2", 1002), ("offsets/3", b"old-3", 1003),
                                ("offsets/4", b"old-4", 1004), ("commits/0", b"c-0", 1005),
                                ("offsets/8", b"old-8", 1008)])
    new = _write_pack(root, 2, [("offsets/1", b"newer-1", 2001), ("offsets/5", b"new-5", 2005),
                                ("offsets/6", b"new-6", 2006), ("offsets/8", b"new-8", 2008)])
    _loose(root, "offsets/2", b"loose-2")
    _loose(root, "offsets/7", b"loose-7")
    _catalog(root, [f"settled\t{old}", f"dead\t{old}\toffsets/3", f"dead\t{new}\toffsets/8"])
    _tombstone(root, "0123-1.txt", f"{old}\toffsets/4\n{new}\toffsets/6\n".encode())

    offsets = Manager(spark, root, "offsets")
    statuses = offsets.statuses()
    assert set(statuses) == {"0", "1", "2", "5", "7", "8"}
    # A packed file is listed with its member's length and modification time.
    assert statuses["0"].getLen() == 5 and statuses["0"].getModificationTime() == 1000
    assert not statuses["0"].isDirectory()
    assert statuses["1"].getLen() == len(b"newer-1") and statuses["1"].getModificationTime() == 2001
    assert statuses["5"].getLen() == 5 and statuses["5"].getModificationTime() == 2005
    assert str(statuses["5"].getPath()) == f"file:{root}/offsets/5"
    # Newest pack wins, loose wins over any pack.
    assert offsets.read("1") == b"newer-1"
    assert offsets.read("2") == b"loose-2"
    assert offsets.read("0") == b"old-0"
    assert offsets.read("8") == b"old-8", "the newest pack's copy is dead: the older one is live"
    assert statuses["8"].getModificationTime() == 1008
    assert Manager(spark, root, "commits").names() == {"0"}


def test_list_of_state_partition_folders(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    _write_pack(root, 1, [("state/0/0/1.delta", b"d1", 1), ("state/0/0/2.snapshot", b"s2", 2),
                          ("state/0/1/1.delta", b"p1-d1", 3), ("state/0/1/2.delta", b"p1-d2", 4),
                          ("state/0/1/left/1.delta", b"left", 5),
                          ("state/1/3/7.delta", b"op1-d7", 6)])
    _loose(root, "state/0/0/3.delta", b"d3")
    _loose(root, "state/0/1/3.delta", b"p1-d3")
    assert not (root / "state/1").exists()

    part = Manager(spark, root, "state/0/1")
    assert part.names() == {"1.delta", "2.delta", "3.delta"}  # the store folder is not a file
    assert part.read("2.delta") == b"p1-d2"
    assert Manager(spark, root, "state/0/0").names() == {"1.delta", "2.snapshot", "3.delta"}
    store = Manager(spark, root, "state/0/1/left")  # a store folder only in packs
    assert store.names() == {"1.delta"}
    assert store.read("1.delta") == b"left"
    only_packed = Manager(spark, root, "state/1/3")  # the loose folder is missing
    assert only_packed.names() == {"7.delta"}
    assert only_packed.exists("7.delta")
    assert only_packed.read("7.delta") == b"op1-d7"
    # A folder neither loose nor packed is still missing, as without packs.
    kind, _ = _java_error(Manager(spark, root, "state/1/4").statuses)
    assert kind == "java.io.FileNotFoundException"


# -- 2. exists and open ----------------------------------------------------------------------


def test_exists_and_open(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    payload = bytes(range(256)) * 40 + b"\x00tail"
    first = _write_pack(root, 1, [("offsets/0", b"zero", 10), ("offsets/1", payload, 11),
                                  ("offsets/2", b"", 12), ("offsets/3", b"dead", 13)])
    _catalog(root, [f"dead\t{first}\toffsets/3"])

    offsets = Manager(spark, root, "offsets")
    assert offsets.exists("0") and offsets.exists("1") and offsets.exists("2")
    assert not offsets.exists("3"), "killed in the catalog"
    assert not offsets.exists("9"), "in no pack"
    assert offsets.read("1") == payload
    assert offsets.read("0") == b"zero"
    assert offsets.read("2") == b""
    for name in ("3", "9"):
        kind, message = _java_error(lambda: offsets.read(name))
        assert kind == "java.io.FileNotFoundException", (kind, message)
    # A seek within a packed file works as on a loose one.
    stream = offsets.m.open(offsets.path("1"))
    try:
        stream.seek(256)
        assert stream.read() == 0 and stream.getPos() == 257
    finally:
        stream.close()


# -- 3. createAtomic -------------------------------------------------------------------------


def test_create_refused_over_a_live_packed_file(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    pack = _write_pack(root, 1, [("commits/0", b"packed-0", 1), ("commits/1", b"packed-1", 2)])
    _catalog(root, [f"dead\t{pack}\tcommits/1"])

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


# -- 4. delete -------------------------------------------------------------------------------


def _wait_for_lines(root: Path, lines: set[str]) -> float:
    start = time.monotonic()
    while time.monotonic() - start < TOMBSTONE_WAIT:
        if lines <= set(_tombstone_text(root).splitlines()):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"no tombstone {sorted(lines)} within {TOMBSTONE_WAIT}s: "
                         f"{_tombstone_text(root)!r}")


def test_delete_of_packed_files_writes_tombstones(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    old = _write_pack(root, 1, [("offsets/0", b"o0", 1), ("offsets/1", b"o1", 2),
                                ("offsets/2", b"o2", 3), ("offsets/3", b"o3", 4)])
    new = _write_pack(root, 2, [("offsets/1", b"n1", 5), ("offsets/3", b"n3", 6)])
    _catalog(root, [f"dead\t{new}\toffsets/3"])  # only the old pack holds offsets/3 live
    _loose(root, "offsets/2", b"loose-2")

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
    newest = _write_pack(root, 3, [("offsets/5", b"n5", 7), ("offsets/0", b"again-0", 8)])
    time.sleep(2.2)
    assert offsets.names() == {"0", "5"}
    assert offsets.read("0") == b"again-0", "a rewrite packed after the delete is served"
    assert _tombstone_text(root).count("\n") == len(expected)
    assert newest not in _tombstone_text(root)


def test_delete_in_a_state_partition(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    pack = _write_pack(root, 1, [("state/0/2/1.delta", b"a", 1), ("state/0/2/2.delta", b"b", 2)])
    part = Manager(spark, root, "state/0/2")
    part.delete("1.delta")
    assert part.names() == {"2.delta"}
    _wait_for_lines(root, {f"{pack}\tstate/0/2/1.delta"})
    assert set(_packs(root).read().live()) == {"state/0/2/2.delta"}


# -- 5. adversarial packs --------------------------------------------------------------------


def test_garbage_under_a_pack_name_is_an_error_naming_it(spark: Any, tmp_path: Path) -> None:
    rng = random.Random(5)
    for size, case in ((0, "empty"), (10, "short"), (24, "trailer-sized"), (4096, "garbage")):
        root = _location(tmp_path, case)
        _write_pack(root, 1, [("offsets/0", b"fine", 1)])
        bad = _raw_pack(root, rng.randbytes(size), sequence=2)
        _assert_unreadable(Manager(spark, root, "offsets"), bad, "0")


def test_truncated_pack_is_an_error_naming_it(spark: Any, tmp_path: Path) -> None:
    body, _ = encode([("offsets/0", b"zero" * 100, 1), ("offsets/1", b"one" * 100, 2)])
    for cut, case in ((1, "tail"), (TRAILER.size, "trailer"), (len(body) // 2, "half")):
        root = _location(tmp_path, case)
        pack = _raw_pack(root, body[:-cut])
        message = _assert_unreadable(Manager(spark, root, "offsets"), pack, "0")
        assert "no pack trailer" in message or "does not fit" in message, message


def test_index_checksum_mismatch(spark: Any, tmp_path: Path) -> None:
    members = [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)]
    data, _ = encode(members)
    start = sum(len(m[1]) for m in members)
    for at in (start, start + 1, len(data) - TRAILER.size - 2):  # inside the index lines
        root = _location(tmp_path, f"at-{at}")
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        pack = _raw_pack(root, bytes(flipped))
        message = _assert_unreadable(Manager(spark, root, "offsets"), pack, "0")
        assert "index checksum mismatch" in message, message
    # ...and in the trailer's own copy of the checksum.
    root = _location(tmp_path, "trailer-crc")
    flipped = bytearray(data)
    flipped[-TRAILER.size + 12] ^= 0x80
    pack = _raw_pack(root, bytes(flipped))
    assert "index checksum mismatch" in _assert_unreadable(
        Manager(spark, root, "offsets"), pack, "0")


@pytest.mark.parametrize("line", [
    "0\t5\t{crc}\t0\t../../etc/passwd",
    "0\t5\t{crc}\t0\tmetadata",
    "0\t5\t{crc}\t0\toffsets/../metadata",
    "0\t5\t{crc}\t0\t/offsets/0",
    "0\t5\t{crc}\t0\toffsets/0.crc",
    "0\t5\t{crc}\t0\tstate/0/0/..\t1.delta",
    "0\t5\t{crc}\t0\tstate/0/0/../1.delta",
    "0\t5\t{crc}\t0\tsources/0/0",
    "0\t5\t{crc}\t0\t_steward/packs/catalog.txt",
    "0\t6\t{crc}\t0\toffsets/0",        # one byte into the index
    "3\t5\t{crc}\t0\toffsets/0",        # ends beyond the body
    "-1\t5\t{crc}\t0\toffsets/0",
    "0\t-5\t{crc}\t0\toffsets/0",
    "0\t5\t{crc}\toffsets/0",           # four fields
    "0\t5\tzz\t0\toffsets/0",
    "0\t5\t{crc}\tnow\toffsets/0",
])
def test_index_naming_no_member_is_refused(spark: Any, tmp_path: Path, line: str) -> None:
    body = b"hello"
    good = f"0\t5\t{crc32c.crc32c(body):08x}\t0\toffsets/1\n"
    bad = line.format(crc=f"{crc32c.crc32c(body):08x}") + "\n"
    root = _location(tmp_path)
    _loose(root, "offsets/7", b"loose")
    pack = _raw_pack(root, _hand_pack(body, good + bad))
    message = _assert_unreadable(Manager(spark, root, "offsets"), pack, "1")
    assert "index line 2" in message, message
    # The Python reader refuses the same pack.
    with pytest.raises(Exception, match="is unreadable"):
        _packs(root).read()
    assert not (root / "etc").exists() and (root / "metadata").read_text().startswith("{")


def test_hand_built_pack_is_served(spark: Any, tmp_path: Path) -> None:
    """The control of the test above: the same bytes with a packable name are served."""
    body = b"hello"
    root = _location(tmp_path)
    _raw_pack(root, _hand_pack(body, f"0\t5\t{crc32c.crc32c(body):08x}\t7\toffsets/1\n"
                                     f"1\t3\t{crc32c.crc32c(body[1:4]):08x}\t8\toffsets/2\n"))
    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {"1", "2"}
    assert offsets.read("1") == b"hello" and offsets.read("2") == b"ell"


def test_member_failing_its_checksum_fails_its_open_only(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    good = _write_pack(root, 1, [("offsets/0", b"good-0", 1), ("commits/0", b"good-c0", 2)])
    data, index = encode([("offsets/1", b"first", 3), ("offsets/2", b"second", 4),
                          ("state/0/0/1.delta", b"delta-one", 5)])
    flipped = bytearray(data)
    flipped[index[1].offset + 2] ^= 0x20  # inside offsets/2
    bad = _raw_pack(root, bytes(flipped), sequence=2)

    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {"0", "1", "2"}, "a listing does not read members"
    assert offsets.exists("2")
    kind, message = _java_error(lambda: offsets.read("2"))
    assert kind == "java.io.IOException", (kind, message)
    assert "offsets/2" in message and f"{PACKS_FOLDER}/{bad}" in message, message
    assert "checksum" in message
    assert offsets.read("1") == b"first", "the pack's other members are served"
    assert offsets.read("0") == b"good-0", "another pack is served"
    assert Manager(spark, root, "commits").read("0") == b"good-c0"
    assert Manager(spark, root, "state/0/0").read("1.delta") == b"delta-one"
    assert good != bad


def test_names_that_are_not_packs_are_ignored(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    pack = _write_pack(root, 5, [("offsets/0", b"zero", 1)])
    folder = root / PACKS_FOLDER
    rng = random.Random(7)
    junk = ["junk.pack", ".x.tmp", f".{_pack_name(6)}.tmp", f"{_pack_name(7)}.tmp",
            f"{_pack_name(8)[:-5]}.PACK", "1-" + "a" * 32 + ".pack", "0" * 14 + "1-" + "a" * 32
            + ".pack", "0" * 16 + "-" + "A" * 32 + ".pack", "0" * 16 + "-" + "a" * 31 + ".pack",
            "0" * 17 + "-" + "a" * 32 + ".pack", "x" + _pack_name(9), "catalog.txt.tmp"]
    for name in junk:
        (folder / name).write_bytes(rng.randbytes(64))
    (folder / "subdir").mkdir()
    (folder / "subdir" / _pack_name(10)).write_bytes(rng.randbytes(64))

    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {"0"}
    assert offsets.read("0") == b"zero"
    assert _packs(root).pack_names() == [pack], "the Python reader ignores them too"


def test_tombstones_that_are_not_marks_kill_nothing(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    pack = _write_pack(root, 1, [(f"offsets/{i}", f"v{i}".encode(), i) for i in range(6)]
                       + [("state/0/0/1.delta", b"d", 9)])
    other = _pack_name(1)  # a pack that does not exist
    rng = random.Random(11)
    garbage = (rng.randbytes(2000) + b"\n\t\t\n\t\n" + b"nonsense\n"
               + f"{pack} offsets/0\n".encode()           # a space, not a tab
               + f"{pack}\toffsets/1\textra\n".encode()   # three fields
               + f"{other}\toffsets/2\n".encode()         # an unknown pack
               + f"\t{pack}\toffsets/3\n".encode()        # a leading tab
               + f"{pack}\toffsets/99\n".encode()         # an unknown member
               + f"{pack}\tstate/0/0/1.delta.crc\n".encode()
               + f"{pack}/offsets/4\n".encode()
               + b"\xff\xfe\x00\t\x80\n")
    _tombstone(root, "garbage.txt", garbage)
    _tombstone(root, "empty.txt", b"")
    # Valid marks in files that are not tombstones: temporary or of another kind.
    _tombstone(root, ".pending.txt", f"{pack}\toffsets/0\n".encode())
    _tombstone(root, "marks.txt.tmp", f"{pack}\toffsets/1\n".encode())
    _tombstone(root, "marks.log", f"{pack}\toffsets/2\n".encode())
    # The catalog's lines that are not dead marks kill nothing either.
    _catalog(root, [f"settled\t{pack}", f"dead\t{other}\toffsets/5", f"Dead\t{pack}\toffsets/5",
                    f"dead {pack}\toffsets/5", "dead", "dead\t", f"{pack}\toffsets/5"])

    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {str(i) for i in range(6)}
    assert all(offsets.read(str(i)) == f"v{i}".encode() for i in range(6))
    assert Manager(spark, root, "state/0/0").names() == {"1.delta"}
    assert set(_packs(root).read().live()) == {f"offsets/{i}" for i in range(6)} | {
        "state/0/0/1.delta"}
    # A real mark among the garbage still kills.
    root2 = _location(tmp_path, "with-mark")
    pack2 = _write_pack(root2, 1, [("offsets/0", b"a", 1), ("offsets/1", b"b", 2)])
    _tombstone(root2, "mixed.txt", rng.randbytes(500) + f"\n{pack2}\toffsets/1\n".encode()
               + rng.randbytes(500))
    assert Manager(spark, root2, "offsets").names() == {"0"}
    assert set(_packs(root2).read().live()) == {"offsets/0"}


# -- 6. the Python reader and the JVM agree --------------------------------------------------


FOLDERS = ("offsets", "commits", "state/0/0", "state/0/1", "state/1/0", "state/1/0/left",
           "state/2/3")


def _random_layout(root: Path, rng: random.Random) -> None:
    """A few packs over overlapping files, dead marks in the catalog and tombstones, and loose
    files (some also packed, with other bytes)."""
    def rel_in(folder: str) -> str:
        if folder.startswith("state/"):
            return f"{folder}/{rng.randint(0, 12)}.{rng.choice(['delta', 'delta', 'snapshot'])}"
        return f"{folder}/{rng.randint(0, 12)}"

    names: list[str] = []
    for sequence in sorted(rng.sample(range(1, 40), rng.randint(1, 4))):
        members = {rel_in(rng.choice(FOLDERS)): None for _ in range(rng.randint(1, 25))}
        name = _write_pack(root, sequence, [
            (rel, rng.randbytes(rng.randint(0, 300)), rng.randint(0, 2**41)) for rel in members])
        names.append(name)
    live_marks = [(m.pack, m.rel) for m in
                  (member for pack in _packs(root).read().packs for member in pack.members)]
    marks = rng.sample(live_marks, len(live_marks) // 3)
    split = len(marks) // 2
    _catalog(root, [f"settled\t{n}" for n in names if rng.random() < 0.5]
             + [f"dead\t{p}\t{r}" for p, r in marks[:split]])
    for number in range(rng.randint(0, 2)):
        chunk = marks[split:][number::2]
        _tombstone(root, f"{uuid.uuid4().hex}-{number}.txt",
                   "".join(f"{p}\t{r}\n" for p, r in chunk).encode())
    for _ in range(rng.randint(0, 10)):
        folder = rng.choice(FOLDERS[:4])  # folders Spark made; packed-only ones stay missing
        _loose(root, rel_in(folder), rng.randbytes(rng.randint(0, 50)))


@pytest.mark.parametrize("seed", range(6))
def test_jvm_and_python_reader_agree(spark: Any, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = _location(tmp_path)
    _random_layout(root, rng)
    packs = _packs(root)
    live = packs.read().live()
    every_packed = {m.rel for p in packs.read().packs for m in p.members}

    for folder in FOLDERS:
        loose = {p.name for p in (root / folder).iterdir() if p.is_file()} \
            if (root / folder).is_dir() else set()
        packed = {rel.rsplit("/", 1)[1] for rel in live if rel.rsplit("/", 1)[0] == folder}
        manager = Manager(spark, root, folder)
        if not loose and not packed and not (root / folder).is_dir():
            kind, _ = _java_error(manager.statuses)
            assert kind == "java.io.FileNotFoundException"
            continue
        assert manager.names() == loose | packed, folder
        for name in sorted(loose | packed):
            rel = f"{folder}/{name}"
            expected = (root / rel).read_bytes() if name in loose \
                else packs.member_bytes(live[rel])
            assert manager.exists(name), rel
            assert manager.read(name) == expected, rel
        for rel in every_packed - set(live):  # dead everywhere, and not loose: gone
            parent, name = rel.rsplit("/", 1)
            if parent == folder and name not in loose:
                assert not manager.exists(name), rel
    assert all(packable(rel) is not None for rel in live)



def _assert_agree(spark: Any, root: Path, folders: Iterable[str]) -> None:
    """Per folder, the JVM lists and reads what the Python reader says is live, plus the loose
    files."""
    packs = _packs(root)
    live = packs.read().live()
    for folder in folders:
        loose = {p.name for p in (root / folder).iterdir() if p.is_file()}
        packed = {rel.rsplit("/", 1)[1] for rel in live if rel.rsplit("/", 1)[0] == folder}
        manager = Manager(spark, root, folder)
        assert manager.names() == loose | packed, folder
        for name in packed - loose:
            assert manager.read(name) == packs.member_bytes(live[f"{folder}/{name}"])


# -- the real packer's output ----------------------------------------------------------------


def _spark_like_files(root: Path, batches: int) -> None:
    for batch in range(batches):
        _loose(root, f"offsets/{batch}", f"v1\n{{\"batch\":{batch}}}".encode())
        _loose(root, f"commits/{batch}", f"v1\n{{\"nextBatchWatermarkMs\":{batch}}}".encode())
        for part in (0, 1):
            _loose(root, f"state/0/{part}/{batch + 1}.delta", bytes([batch, part]) * 30)
    _loose(root, "state/0/1/4.snapshot", b"snapshot-4")


@pytest.mark.parametrize("stray", [
    None,
    "offsets/\u0661",         # non-ASCII digits: never packed (the JVM would refuse the pack)
    "state/0/0/\u0663.delta",
])
def test_the_packers_packs_are_served(spark: Any, tmp_path: Path, stray: str | None) -> None:
    """Two cycles of the real packer (pack, then settle and remove the loose copies): Spark
    then sees exactly the files it wrote, through the packs."""
    root = _location(tmp_path)
    _spark_like_files(root, 6)
    if stray is not None:
        _loose(root, stray, b"not Spark's")
    before = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    packer = Packer(Location("file://" + str(root)), keep=1, grace=0.0, max_member=1 << 20)
    assert packer.cycle().packed > 0
    assert packer.cycle().removed > 0
    assert not (root / "offsets/0").exists(), "the loose copy went"

    folders = ("offsets", "commits", "state/0/0", "state/0/1")
    _assert_agree(spark, root, folders)
    for rel, data in before.items():
        if rel != "metadata":
            folder, name = rel.rsplit("/", 1)
            assert Manager(spark, root, folder).read(name) == data, rel


# -- disagreements between the Python reader and the JVM -------------------------------------


@pytest.mark.parametrize("where, line", [
    ("tombstone", "{pack}\toffsets/1\r\n"),
    ("tombstone", "garbage\x0c{pack}\toffsets/1\n"),
    ("catalog", "dead\t{pack}\toffsets/1\r\n"),
    ("catalog", "settled\tx\u2028dead\t{pack}\toffsets/1\n"),
])
def test_odd_line_breaks_in_marks_are_read_alike(spark: Any, tmp_path: Path, where: str,
                                                 line: str) -> None:
    root = _location(tmp_path)
    pack = _write_pack(root, 1, [("offsets/0", b"a", 1), ("offsets/1", b"b", 2)])
    data = line.format(pack=pack).encode()
    if where == "tombstone":
        _tombstone(root, "marks.txt", data)
    else:
        (root / PACKS_FOLDER / "catalog.txt").write_bytes(data)
    _assert_agree(spark, root, ["offsets"])


def test_a_large_catalog_is_read_alike(spark: Any, tmp_path: Path) -> None:
    root = _location(tmp_path)
    pack = _write_pack(root, 1, [("offsets/0", b"a", 1), ("offsets/1", b"b", 2)])
    filler = "".join(f"dead\t{pack}\tstate/0/{n % 200}/{n}.delta\n" for n in range(17 << 20 >> 5))
    (root / PACKS_FOLDER / "catalog.txt").write_text(f"dead\t{pack}\toffsets/1\n" + filler)
    assert (root / PACKS_FOLDER / "catalog.txt").stat().st_size > 16 << 20
    _assert_agree(spark, root, ["offsets"])


# -- found by review: overflow, compaction lineage, files that are not regular --------------


def test_a_member_whose_offset_plus_length_overflows_is_refused(spark: Any, tmp_path: Path) -> None:
    """offset + length past 2^63 once wrapped negative and passed the bounds check, and the
    read then allocated 2 GiB (an OutOfMemoryError, past every catch): now the index is refused
    naming the pack, in both readers."""
    body = b"hello"
    huge = f"{2**63 - 1}\t{2**31 - 1}\t{crc32c.crc32c(body):08x}\t0\toffsets/2\n"
    root = _location(tmp_path)
    pack = _raw_pack(root, _hand_pack(body, f"0\t5\t{crc32c.crc32c(body):08x}\t0\toffsets/1\n"
                                            + huge))
    message = _assert_unreadable(Manager(spark, root, "offsets"), pack, "1")
    assert "index line 2" in message, message
    with pytest.raises(Exception, match="is unreadable"):
        _packs(root).read()


def test_a_tombstone_against_a_compacted_pack_kills_the_copy(spark: Any, tmp_path: Path) -> None:
    """A JVM whose view predates a compaction names the old pack in its tombstone; every JVM
    (and unpack) applies it to the copy the catalog's ``moved`` line names, and the catalog's
    own dead marks of the old pack (all its members, copied or not) kill nothing in the copy."""
    root = _location(tmp_path)
    old = _write_pack(root, 1, [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)])
    copy = _write_pack(root, 2, [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)])
    _catalog(root, [f"settled\t{old}", f"settled\t{copy}", f"moved\t{old}\t{copy}",
                    f"dead\t{old}\toffsets/0", f"dead\t{old}\toffsets/1"])
    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {"0", "1"}, "the copy serves what the old pack held"
    assert offsets.read("1") == b"one"

    again = _location(tmp_path, "again")
    old = _write_pack(again, 1, [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)])
    copy = _write_pack(again, 2, [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)])
    _catalog(again, [f"settled\t{old}", f"settled\t{copy}", f"moved\t{old}\t{copy}",
                     f"dead\t{old}\toffsets/0", f"dead\t{old}\toffsets/1"])
    _tombstone(again, "stale-jvm-1.txt", f"{old}\toffsets/1\n".encode())
    assert Manager(spark, again, "offsets").names() == {"0"}
    marks = set().union(*_packs(again).read().tombstones.values())
    assert marks == {(old, "offsets/1")}


def test_fifos_and_symlinks_under_pack_and_tombstone_names_are_skipped(
        spark: Any, tmp_path: Path) -> None:
    """A neighbour's FIFO named like a pack would hang every open of it, and a tombstone
    symlinked to /dev/zero would never end: both readers skip files that are not regular."""
    import os

    root = _location(tmp_path)
    pack = _write_pack(root, 1, [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)])
    folder = root / PACKS_FOLDER
    os.mkfifo(folder / _pack_name(2))
    (folder / _pack_name(3)).symlink_to(folder / pack)
    (folder / "dead").mkdir()
    os.mkfifo(folder / "dead" / "fifo.txt")
    (folder / "dead" / "zero.txt").symlink_to("/dev/zero")
    offsets = Manager(spark, root, "offsets")
    assert offsets.names() == {"0", "1"}
    assert offsets.read("1") == b"one"
    state = _packs(root).read()
    assert [p.name for p in state.packs] == [pack] and state.tombstones == {}
    # The catalog cannot be skipped (its dead marks would come back): one that is not a
    # regular file is an error naming it, in both readers (a FIFO hung every JVM's view).
    (folder / "catalog.txt").symlink_to("/dev/zero")
    with pytest.raises(Exception, match="catalog.txt is not a regular file"):
        _packs(root).read()
    other = _location(tmp_path, "fifo-catalog")
    _write_pack(other, 1, [("offsets/0", b"zero", 1)])
    os.mkfifo(other / PACKS_FOLDER / "catalog.txt")
    kind, message = _java_error(lambda: Manager(spark, other, "offsets").names())
    assert kind == "java.io.IOException", (kind, message)
    assert "catalog.txt is not a regular file" in message, message
