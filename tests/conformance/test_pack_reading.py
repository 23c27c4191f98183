"""Packed streaming checkpoint files (FLIP-306), one suite for both readers: the Python reader
of ``streams/packs.py`` and the JVM's checkpoint file manager (``StreamFiles``/``StreamPacks``)
must show Spark the same files with the same bytes.

* list = loose files plus live packed members (loose winning, the newest pack winning, members
  killed in the catalog or a tombstone left out, a compaction's copy losing what a tombstone
  named in its source), also for a state partition folder and a folder only in packs;
  exists/read agree with it, read returns the exact bytes;
* a pack that cannot be read (garbage, truncated, index checksum, an index naming a path that
  is not packable or bytes beyond the index), or a catalog that is not a regular file, fails
  every call naming it; a member failing its checksum fails its read only; names that are not
  pack names, files that are not regular, and tombstone lines that are not marks, are ignored;
* random layouts, and what two cycles of the real ``Packer`` leave, read as the vector's own
  record says.

What only the JVM does (Spark's createAtomic and delete, its cached view, seeks) is tested in
tests/spark/test_stream_packs_jvm.py.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Callable

import crc32c
import pytest

from spark_steward.streams.location import Location
from spark_steward.streams.packer import Packer
from spark_steward.streams.packs import TRAILER, encode
from tests.conformance.folder_views import (FolderView, JavaFolderView, Listed, MemberCorrupt,
                                            Missing, PythonFolderView, Unreadable)
from tests.conformance.jvm import JvmDriver
from tests.conformance.vectors.stream_packs import (FOLDERS, KNOWN_DISAGREEMENTS, NOT_MEMBERS,
                                                    PACKS_FOLDER, Layout, crc_hex, hand_pack,
                                                    pack_name, random_layout, spark_like_files)


def expect_agreement(request: pytest.FixtureRequest, view: FolderView, vector: str) -> None:
    """Marks the test an expected failure where the runtimes are known to disagree."""
    reason = KNOWN_DISAGREEMENTS.get((view.runtime, vector))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def assert_unreadable(view: FolderView, layout: Layout, pack: str, probe: str,
                      folder: str = "offsets") -> str:
    """list, exists and read of ``probe`` fail naming ``pack``; returns the message."""
    messages = []
    calls: list[Callable[[], object]] = [
        lambda: view.list(layout.root, folder), lambda: view.exists(layout.root, folder, probe),
        lambda: view.read(layout.root, folder, probe)]
    for call in calls:
        with pytest.raises(Unreadable) as info:
            call()
        message = str(info.value)
        assert f"{layout.root}/{PACKS_FOLDER}/{pack} is unreadable (" in message, message
        messages.append(message)
    return messages[0]


def assert_sees(view: FolderView, layout: Layout, folders: tuple[str, ...] = FOLDERS) -> None:
    """Every folder lists, finds and reads exactly what the layout's record says."""
    for folder in folders:
        expected = layout.expected(folder)
        if expected is None:
            with pytest.raises(Missing):
                view.list(layout.root, folder)
            continue
        assert view.names(layout.root, folder) == set(expected), folder
        for name, data in sorted(expected.items()):
            assert view.exists(layout.root, folder, name), f"{folder}/{name}"
            assert view.read(layout.root, folder, name) == data, f"{folder}/{name}"
        for pack, members in layout.packs:  # dead everywhere, and not loose: gone
            for rel, _, _ in members:
                parent, _, name = rel.rpartition("/")
                if parent == folder and name not in expected:
                    assert not view.exists(layout.root, folder, name), rel


class PackReadingSuite:
    """The suite; a concrete class provides the runtime's ``view`` (fsspec's tests/abstract)."""

    # -- list ------------------------------------------------------------------------------

    def test_list_is_loose_and_live_packed_members(self, view: FolderView,
                                                   tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        old = layout.pack(1, [("offsets/0", b"old-0", 1000), ("offsets/1", b"old-1", 1001),
                              ("offsets/2", b"old-2", 1002), ("offsets/3", b"old-3", 1003),
                              ("offsets/4", b"old-4", 1004), ("commits/0", b"c-0", 1005),
                              ("offsets/8", b"old-8", 1008)])
        new = layout.pack(2, [("offsets/1", b"newer-1", 2001), ("offsets/5", b"new-5", 2005),
                              ("offsets/6", b"new-6", 2006), ("offsets/8", b"new-8", 2008)])
        layout.write_loose("offsets/2", b"loose-2")
        layout.write_loose("offsets/7", b"loose-7")
        layout.catalog([f"settled\t{old}", f"dead\t{old}\toffsets/3", f"dead\t{new}\toffsets/8"])
        layout.tombstone("0123-1.txt", f"{old}\toffsets/4\n{new}\toffsets/6\n".encode(),
                         [(old, "offsets/4"), (new, "offsets/6")])

        listed = view.list(layout.root, "offsets")
        assert set(listed) == {"0", "1", "2", "5", "7", "8"}
        # A packed file is listed with its member's length and modification time.
        assert listed["0"] == Listed(5, 1000, False)
        assert listed["1"] == Listed(len(b"newer-1"), 2001, False)
        assert listed["5"] == Listed(5, 2005, False)
        assert listed["8"] == Listed(5, 1008, False), "the newest copy is dead: the older one"
        assert listed["2"].length == len(b"loose-2")
        # Newest pack wins, loose wins over any pack.
        assert view.read(layout.root, "offsets", "1") == b"newer-1"
        assert view.read(layout.root, "offsets", "2") == b"loose-2"
        assert view.read(layout.root, "offsets", "0") == b"old-0"
        assert view.read(layout.root, "offsets", "8") == b"old-8"
        assert view.names(layout.root, "commits") == {"0"}
        assert_sees(view, layout, ("offsets", "commits"))

    def test_list_of_state_partition_folders(self, view: FolderView, tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        layout.pack(1, [("state/0/0/1.delta", b"d1", 1), ("state/0/0/2.snapshot", b"s2", 2),
                        ("state/0/1/1.delta", b"p1-d1", 3), ("state/0/1/2.delta", b"p1-d2", 4),
                        ("state/0/1/left/1.delta", b"left", 5), ("state/1/3/7.delta", b"d7", 6)])
        layout.write_loose("state/0/0/3.delta", b"d3")
        layout.write_loose("state/0/1/3.delta", b"p1-d3")
        root = layout.root
        assert not (root / "state/1").exists()

        assert view.names(root, "state/0/1") == {"1.delta", "2.delta", "3.delta"}
        assert view.read(root, "state/0/1", "2.delta") == b"p1-d2"
        assert view.names(root, "state/0/0") == {"1.delta", "2.snapshot", "3.delta"}
        assert view.names(root, "state/0/1/left") == {"1.delta"}  # a store folder only packed
        assert view.read(root, "state/0/1/left", "1.delta") == b"left"
        assert view.names(root, "state/1/3") == {"7.delta"}  # the loose folder is missing
        assert view.exists(root, "state/1/3", "7.delta")
        assert view.read(root, "state/1/3", "7.delta") == b"d7"
        with pytest.raises(Missing):  # neither loose nor packed: missing, as without packs
            view.list(root, "state/1/4")

    # -- exists and read -------------------------------------------------------------------

    def test_exists_and_read(self, view: FolderView, tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        payload = bytes(range(256)) * 40 + b"\x00tail"
        first = layout.pack(1, [("offsets/0", b"zero", 10), ("offsets/1", payload, 11),
                                ("offsets/2", b"", 12), ("offsets/3", b"dead", 13)])
        layout.catalog([f"dead\t{first}\toffsets/3"])
        root = layout.root
        assert all(view.exists(root, "offsets", name) for name in ("0", "1", "2"))
        assert not view.exists(root, "offsets", "3"), "killed in the catalog"
        assert not view.exists(root, "offsets", "9"), "in no pack"
        assert view.read(root, "offsets", "1") == payload
        assert view.read(root, "offsets", "0") == b"zero"
        assert view.read(root, "offsets", "2") == b""
        for name in ("3", "9"):
            with pytest.raises(Missing):
                view.read(root, "offsets", name)

    def test_a_hand_built_pack_is_served(self, view: FolderView, tmp_path: Path) -> None:
        """Members may overlap and need not be in order: the index says where each is."""
        body = b"hello"
        layout = Layout.at(tmp_path)
        layout.raw(hand_pack(body, f"0\t5\t{crc_hex(body)}\t7\toffsets/1\n"
                                   f"1\t3\t{crc_hex(body[1:4])}\t8\toffsets/2\n"
                                   f"\n00000\t00003\t{crc_hex(body[:3])}\t9\toffsets/3\n"))
        assert view.list(layout.root, "offsets") == {
            "1": Listed(5, 7, False), "2": Listed(3, 8, False), "3": Listed(3, 9, False)}
        assert view.read(layout.root, "offsets", "1") == b"hello"
        assert view.read(layout.root, "offsets", "2") == b"ell"
        assert view.read(layout.root, "offsets", "3") == b"hel"

    # -- packs that cannot be read ---------------------------------------------------------

    @pytest.mark.parametrize("size", [0, 10, 24, 4096],
                             ids=["empty", "short", "trailer-sized", "garbage"])
    def test_garbage_under_a_pack_name_is_an_error_naming_it(
            self, view: FolderView, tmp_path: Path, size: int) -> None:
        layout = Layout.at(tmp_path)
        layout.pack(1, [("offsets/0", b"fine", 1)])
        bad = layout.raw(random.Random(size).randbytes(size), sequence=2)
        assert_unreadable(view, layout, bad, "0")

    @pytest.mark.parametrize("cut", ["tail", "trailer", "half"])
    def test_a_truncated_pack_is_an_error_naming_it(self, view: FolderView, tmp_path: Path,
                                                    cut: str) -> None:
        body, _ = encode([("offsets/0", b"zero" * 100, 1), ("offsets/1", b"one" * 100, 2)])
        drop = {"tail": 1, "trailer": TRAILER.size, "half": len(body) // 2}[cut]
        layout = Layout.at(tmp_path)
        pack = layout.raw(body[:-drop])
        message = assert_unreadable(view, layout, pack, "0")
        assert "no pack trailer" in message or "does not fit" in message, message

    @pytest.mark.parametrize("where", ["index-start", "index-second", "index-end", "trailer"])
    def test_an_index_checksum_mismatch_is_an_error_naming_the_pack(
            self, view: FolderView, tmp_path: Path, where: str) -> None:
        members = [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)]
        data, _ = encode(members)
        start = sum(len(m[1]) for m in members)
        at = {"index-start": start, "index-second": start + 1,
              "index-end": len(data) - TRAILER.size - 2,
              "trailer": len(data) - TRAILER.size + 12}[where]  # the trailer's copy of the crc
        flipped = bytearray(data)
        flipped[at] ^= 0x80 if where == "trailer" else 0x01
        layout = Layout.at(tmp_path)
        pack = layout.raw(bytes(flipped))
        assert "index checksum mismatch" in assert_unreadable(view, layout, pack, "0")

    @pytest.mark.parametrize("vector", list(NOT_MEMBERS))
    def test_an_index_naming_no_member_makes_the_pack_unreadable(
            self, view: FolderView, tmp_path: Path, vector: str,
            request: pytest.FixtureRequest) -> None:
        expect_agreement(request, view, vector)
        line = NOT_MEMBERS[vector]
        body = b"hello"
        good = f"0\t5\t{crc_hex(body)}\t0\toffsets/1\n"
        layout = Layout.at(tmp_path)
        layout.write_loose("offsets/7", b"loose")
        pack = layout.raw(hand_pack(body, good + line.format(crc=crc_hex(body)) + "\n"))
        message = assert_unreadable(view, layout, pack, "1")
        assert "index line 2" in message, message
        assert not (layout.root / "etc").exists()
        assert (layout.root / "metadata").read_text().startswith("{")

    def test_a_member_whose_offset_plus_length_overflows_is_refused(
            self, view: FolderView, tmp_path: Path) -> None:
        """offset + length past 2^63 once wrapped negative in the JVM and passed its bounds
        check (the read then allocated 2 GiB): the index is refused naming the pack."""
        body = b"hello"
        huge = f"{2**63 - 1}\t{2**31 - 1}\t{crc_hex(body)}\t0\toffsets/2\n"
        layout = Layout.at(tmp_path)
        pack = layout.raw(hand_pack(body, f"0\t5\t{crc_hex(body)}\t0\toffsets/1\n" + huge))
        assert "index line 2" in assert_unreadable(view, layout, pack, "1")

    def test_a_member_longer_than_256_mib_makes_the_pack_unreadable(
            self, view: FolderView, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        """A packed file is read whole into memory when opened: the JVM bounds a member at
        256 MiB (a sparse file here: nothing of it is read)."""
        expect_agreement(request, view, "member-over-256-mib")
        length = (256 << 20) + 1
        index = f"0\t{length}\t{crc_hex(b'')}\t0\toffsets/1\n".encode()
        layout = Layout.at(tmp_path)
        pack = layout.raw(b"")
        with open(layout.packs_folder / pack, "wb") as out:
            out.truncate(length)
            out.seek(length)
            out.write(index + TRAILER.pack(length, len(index), crc32c.crc32c(index), b"STWPACK1"))
        assert "index line 1" in assert_unreadable(view, layout, pack, "1")

    def test_a_member_failing_its_checksum_fails_its_read_only(
            self, view: FolderView, tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        layout.pack(1, [("offsets/0", b"good-0", 1), ("commits/0", b"good-c0", 2)])
        data, index = encode([("offsets/1", b"first", 3), ("offsets/2", b"second", 4),
                              ("state/0/0/1.delta", b"delta-one", 5)])
        flipped = bytearray(data)
        flipped[index[1].offset + 2] ^= 0x20  # inside offsets/2
        bad = layout.raw(bytes(flipped), sequence=2)
        root = layout.root
        assert view.names(root, "offsets") == {"0", "1", "2"}, "a listing reads no member"
        assert view.exists(root, "offsets", "2")
        with pytest.raises(MemberCorrupt) as info:
            view.read(root, "offsets", "2")
        message = str(info.value)
        assert "offsets/2" in message and f"{PACKS_FOLDER}/{bad}" in message, message
        assert view.read(root, "offsets", "1") == b"first", "the pack's other members are served"
        assert view.read(root, "offsets", "0") == b"good-0", "another pack is served"
        assert view.read(root, "commits", "0") == b"good-c0"
        assert view.read(root, "state/0/0", "1.delta") == b"delta-one"

    # -- what is not ours ------------------------------------------------------------------

    def test_names_that_are_not_packs_are_ignored(self, view: FolderView,
                                                  tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        layout.pack(5, [("offsets/0", b"zero", 1)])
        folder = layout.packs_folder
        rng = random.Random(7)
        junk = ["junk.pack", ".x.tmp", f".{pack_name(6)}.tmp", f"{pack_name(7)}.tmp",
                f"{pack_name(8)[:-5]}.PACK", "1-" + "a" * 32 + ".pack",
                "0" * 14 + "1-" + "a" * 32 + ".pack", "0" * 16 + "-" + "A" * 32 + ".pack",
                "0" * 16 + "-" + "a" * 31 + ".pack", "0" * 17 + "-" + "a" * 32 + ".pack",
                "x" + pack_name(9), "catalog.txt.tmp", "\u0661" * 16 + "-" + "a" * 32 + ".pack"]
        for name in junk:
            (folder / name).write_bytes(rng.randbytes(64))
        (folder / "subdir").mkdir()
        (folder / "subdir" / pack_name(10)).write_bytes(rng.randbytes(64))
        (folder / pack_name(11)).mkdir()  # a folder under a pack's name
        assert view.names(layout.root, "offsets") == {"0"}
        assert view.read(layout.root, "offsets", "0") == b"zero"

    def test_tombstones_that_are_not_marks_kill_nothing(self, view: FolderView,
                                                        tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        pack = layout.pack(1, [(f"offsets/{i}", f"v{i}".encode(), i) for i in range(6)]
                           + [("state/0/0/1.delta", b"d", 9)])
        other = pack_name(1)  # a pack that does not exist
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
        layout.tombstone("garbage.txt", garbage)
        layout.tombstone("empty.txt", b"")
        # Valid marks in files that are not tombstones: temporary or of another kind.
        layout.tombstone(".pending.txt", f"{pack}\toffsets/0\n".encode())
        layout.tombstone("marks.txt.tmp", f"{pack}\toffsets/1\n".encode())
        layout.tombstone("marks.log", f"{pack}\toffsets/2\n".encode())
        # The catalog's lines that are not dead marks kill nothing either.
        layout.catalog([f"settled\t{pack}", f"dead\t{other}\toffsets/5",
                        f"Dead\t{pack}\toffsets/5", f"dead {pack}\toffsets/5", "dead", "dead\t",
                        f"{pack}\toffsets/5"])
        assert view.names(layout.root, "offsets") == {str(i) for i in range(6)}
        assert all(view.read(layout.root, "offsets", str(i)) == f"v{i}".encode()
                   for i in range(6))
        assert view.names(layout.root, "state/0/0") == {"1.delta"}
        # A real mark among the garbage still kills.
        mixed = Layout.at(tmp_path, "with-mark")
        kept = mixed.pack(1, [("offsets/0", b"a", 1), ("offsets/1", b"b", 2)])
        mixed.tombstone("mixed.txt", rng.randbytes(500) + f"\n{kept}\toffsets/1\n".encode()
                        + rng.randbytes(500))
        assert view.names(mixed.root, "offsets") == {"0"}

    @pytest.mark.parametrize("where,line", [
        ("tombstone", "{pack}\toffsets/1\r\n"),
        ("tombstone", "garbage\x0c{pack}\toffsets/1\n"),
        ("catalog", "dead\t{pack}\toffsets/1\r\n"),
        ("catalog", "settled\tx\u2028dead\t{pack}\toffsets/1\n"),
    ], ids=["tombstone-crlf", "tombstone-form-feed", "catalog-crlf", "catalog-line-separator"])
    def test_line_breaks_other_than_newline_end_no_mark(self, view: FolderView, tmp_path: Path,
                                                        where: str, line: str) -> None:
        layout = Layout.at(tmp_path)
        pack = layout.pack(1, [("offsets/0", b"a", 1), ("offsets/1", b"b", 2)])
        data = line.format(pack=pack).encode()
        if where == "tombstone":
            layout.tombstone("marks.txt", data)
        else:
            (layout.packs_folder / "catalog.txt").write_bytes(data)
        assert view.names(layout.root, "offsets") == {"0", "1"}

    def test_a_catalog_over_16_mib_is_read_whole(self, view: FolderView,
                                                 tmp_path: Path) -> None:
        layout = Layout.at(tmp_path)
        pack = layout.pack(1, [("offsets/0", b"a", 1), ("offsets/1", b"b", 2)])
        filler = f"dead\t{pack}\tstate/0/0/1.delta\n".encode() * (17 << 20 >> 6)
        catalog = layout.packs_folder / "catalog.txt"
        catalog.write_bytes(f"dead\t{pack}\toffsets/1\n".encode() + filler)
        assert catalog.stat().st_size > 16 << 20
        assert view.names(layout.root, "offsets") == {"0"}

    def test_fifos_and_symlinks_under_pack_and_tombstone_names_are_skipped(
            self, view: FolderView, tmp_path: Path) -> None:
        """A neighbour's FIFO named like a pack would hang every open of it, and a tombstone
        symlinked to /dev/zero would never end: files that are not regular are skipped."""
        layout = Layout.at(tmp_path)
        pack = layout.pack(1, [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)])
        folder = layout.packs_folder
        os.mkfifo(folder / pack_name(2))
        (folder / pack_name(3)).symlink_to(folder / pack)
        (folder / "dead").mkdir()
        os.mkfifo(folder / "dead" / "fifo.txt")
        (folder / "dead" / "zero.txt").symlink_to("/dev/zero")
        assert view.names(layout.root, "offsets") == {"0", "1"}
        assert view.read(layout.root, "offsets", "1") == b"one"

    @pytest.mark.parametrize("kind", ["symlink", "fifo"])
    def test_a_catalog_that_is_not_a_regular_file_is_an_error_naming_it(
            self, view: FolderView, tmp_path: Path, kind: str) -> None:
        """The catalog cannot be skipped (its dead marks would come back)."""
        layout = Layout.at(tmp_path)
        layout.pack(1, [("offsets/0", b"zero", 1)])
        catalog = layout.packs_folder / "catalog.txt"
        if kind == "symlink":
            catalog.symlink_to("/dev/zero")
        else:
            os.mkfifo(catalog)
        with pytest.raises(Unreadable, match="catalog.txt is not a regular file"):
            view.names(layout.root, "offsets")

    # -- compaction lineage ----------------------------------------------------------------

    def test_a_tombstone_against_a_compacted_pack_kills_the_copy(
            self, view: FolderView, tmp_path: Path) -> None:
        """A JVM whose view predates a compaction names the old pack in its tombstone: it
        applies to the copy the catalog's ``moved`` line names, while the catalog's own dead
        marks of the old pack (all its members, copied or not) kill nothing in the copy."""
        for name, stale in (("copied", False), ("stale-tombstone", True)):
            layout = Layout.at(tmp_path, name)
            members = [("offsets/0", b"zero", 1), ("offsets/1", b"one", 2)]
            old, copy = layout.pack(1, members), layout.pack(2, members)
            layout.catalog([f"settled\t{old}", f"settled\t{copy}", f"moved\t{old}\t{copy}",
                            f"dead\t{old}\toffsets/0", f"dead\t{old}\toffsets/1"])
            if stale:
                layout.tombstone("stale-jvm-1.txt", f"{old}\toffsets/1\n".encode())
                assert view.names(layout.root, "offsets") == {"0"}
                with pytest.raises(Missing):
                    view.read(layout.root, "offsets", "1")
            else:
                assert view.names(layout.root, "offsets") == {"0", "1"}
                assert view.read(layout.root, "offsets", "1") == b"one"

    # -- whole locations -------------------------------------------------------------------

    @pytest.mark.parametrize("seed", range(6))
    def test_a_random_layout_reads_as_its_record_says(self, view: FolderView, tmp_path: Path,
                                                       seed: int) -> None:
        assert_sees(view, random_layout(tmp_path, seed))

    @pytest.mark.parametrize("stray", [None, "offsets/\u0661", "state/0/0/\u0663.delta"],
                             ids=["spark-files", "arabic-digit-offset", "arabic-digit-delta"])
    def test_the_packers_packs_serve_every_file_spark_wrote(
            self, view: FolderView, tmp_path: Path, stray: str | None) -> None:
        """Two cycles of the real packer (pack, then settle and remove the loose copies):
        Spark then sees exactly the files it wrote, through the packs. A name with non-ASCII
        digits is never packed."""
        layout = Layout.at(tmp_path)
        spark_like_files(layout, 6)
        if stray is not None:
            layout.write_loose(stray, b"not Spark's")
        packer = Packer(Location(f"file://{layout.root}"), keep=1, grace=0.0,
                        max_member=1 << 20)
        assert packer.cycle().packed > 0
        assert packer.cycle().removed > 0
        assert not (layout.root / "offsets/0").exists(), "the loose copy went"
        for folder in ("offsets", "commits", "state/0/0", "state/0/1"):
            files = {rel.rpartition("/")[2]: data for rel, data in layout.loose.items()
                     if rel.rpartition("/")[0] == folder}
            assert view.names(layout.root, folder) == set(files), folder
            for name, data in files.items():
                assert view.read(layout.root, folder, name) == data, f"{folder}/{name}"


class TestPythonPackReader(PackReadingSuite):
    @pytest.fixture
    def view(self) -> FolderView:
        return PythonFolderView()


class TestJavaPackReader(PackReadingSuite):
    @pytest.fixture
    def view(self, jvm: JvmDriver) -> FolderView:
        return JavaFolderView(jvm)
