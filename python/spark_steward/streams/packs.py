"""The packs of a streaming checkpoint location: their file format, and reading them whole.

A pack (``<location>/_steward/packs/<seq>-<uuid>.pack``) is the members' bytes one after the
other, then an index of text lines ``offset<TAB>length<TAB>crc32c hex<TAB>mtime ms<TAB>path``,
then a 24-byte trailer: the index's offset (8 bytes, big-endian), its length (4), its crc32c
(4) and ``STWPACK1``. Any tool can take one apart; ``StreamPacks.java`` reads the same bytes.

Dead members are listed in ``catalog.txt`` (``dead<TAB>pack<TAB>path``, ``settled<TAB>pack``
once the packer decided on a pack, ``moved<TAB>pack<TAB>copy`` after a compaction copied a
pack's live members) and in tombstone files ``dead/<id>.txt``
(``pack<TAB>path``) that JVMs write when Spark deletes a packed file; the packer folds those
into the catalog. A pack that cannot be read is an error naming it, never skipped: its loose
copies are gone.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterable

import crc32c as _crc32c

from spark_steward.errors import StorageError
from spark_steward.streams.errors import StreamError
from spark_steward.streams.lifecycle.packs import (CATALOG, PACK_NAME, PACKS_FOLDER,
                                                   TOMBSTONES_FOLDER, Member, Pack, forward,
                                                   live_members, packable)
from spark_steward.storage import Storage

MAGIC = b"STWPACK1"
TRAILER = struct.Struct(">QII8s")
#: Index and catalog lines are short; a larger index or tombstone is not ours.
MAX_INDEX_BYTES = 64 << 20
#: A packed file is read whole into memory when Spark opens it (the JVM's bound).
MAX_MEMBER_BYTES = 256 << 20
#: Index numbers are 64-bit signed in the JVM: a larger one is not a number of ours.
_MAX_NUMBER = (1 << 63) - 1
MAX_TOMBSTONE_BYTES = 16 << 20
MAX_CATALOG_BYTES = 256 << 20
_NUMBER = re.compile(r"^[0-9]{1,19}$")
_CRC = re.compile(r"^[0-9a-f]{8}$")


def lines(data: bytes) -> list[str]:
    """The non-empty ``\n``-separated lines (as the JVM splits them: no other line breaks)."""
    return [line for line in data.decode("utf-8", "replace").split("\n") if line]


def crc32c(data: bytes) -> int:
    """The crc32c of ``data``."""
    return _crc32c.crc32c(data)


def encode(members: Iterable[tuple[str, bytes, int]]) -> tuple[bytes, tuple[Member, ...]]:
    """A pack of ``(path, bytes, mtime ms)`` members; returns its bytes and index."""
    body = bytearray()
    index: list[Member] = []
    for rel, data, mtime_ms in members:
        if packable(rel) is None:
            raise ValueError(f"{rel!r} is not a file a pack may hold")
        index.append(Member("", rel, len(body), len(data), crc32c(data), int(mtime_ms)))
        body += data
    lines = "".join(f"{m.offset}\t{m.length}\t{m.crc32c:08x}\t{m.mtime_ms}\t{m.rel}\n"
                    for m in index).encode()
    trailer = TRAILER.pack(len(body), len(lines), crc32c(lines), MAGIC)
    return bytes(body) + lines + trailer, tuple(index)


def decode_index(name: str, data_tail: bytes, size: int,
                 read_at: Callable[[int, int], bytes]) -> Pack:
    """The index of pack ``name`` (``size`` bytes; ``data_tail`` its last 24 bytes;
    ``read_at(offset, length)`` reads more). ValueError says what is wrong."""
    if size < TRAILER.size or len(data_tail) != TRAILER.size:
        raise ValueError(f"{size} bytes, shorter than its trailer")
    offset, length, crc, magic = TRAILER.unpack(data_tail)
    if magic != MAGIC:
        raise ValueError("no pack trailer (wrong magic)")
    if length > MAX_INDEX_BYTES or offset + length + TRAILER.size != size:
        raise ValueError(f"index at {offset}+{length} does not fit {size} bytes")
    raw = read_at(offset, length)
    if len(raw) != length or crc32c(raw) != crc:
        raise ValueError("index checksum mismatch")
    members = []
    for number, line in enumerate(raw.decode("utf-8").split("\n"), 1):
        if not line:
            continue
        fields = line.split("\t", 4)
        if len(fields) != 5:
            raise ValueError(f"index line {number} has {len(fields)} fields")
        start, count, crc_hex, mtime, rel = fields
        if not (_NUMBER.fullmatch(start) and _NUMBER.fullmatch(count)
                and _CRC.fullmatch(crc_hex) and _NUMBER.fullmatch(mtime)
                and int(mtime) <= _MAX_NUMBER):
            raise ValueError(f"index line {number} is malformed")
        member = Member(name, rel, int(start), int(count), int(crc_hex, 16), int(mtime))
        if (packable(rel) is None or member.offset < 0 or member.length < 0
                or member.length > MAX_MEMBER_BYTES or member.offset + member.length > offset):
            raise ValueError(f"index line {number} names {rel[:200]!r} at "
                             f"{start}+{count}, not a member of this pack")
        members.append(member)
    return Pack(name, tuple(members))


@dataclass
class PackState:
    """One reading of a location's packs: every pack, the dead members and settled packs of
    the catalog, and the tombstones (with the files they came from, for folding)."""

    packs: list[Pack] = field(default_factory=list)
    catalog_dead: set[tuple[str, str]] = field(default_factory=set)
    settled: set[str] = field(default_factory=set)
    tombstones: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    moved: dict[str, set[str]] = field(default_factory=dict)  # compacted pack -> its copies

    @property
    def dead(self) -> set[tuple[str, str]]:
        """Every ``(pack, member)`` no longer live: in the catalog or in a tombstone."""
        out = set(self.catalog_dead)
        for marks in self.tombstones.values():
            out |= marks
        return out

    def live(self) -> dict[str, Member]:
        """The live members by file name, as a JVM serves them: a tombstone also kills the
        copy a compaction made of its pack."""
        return live_members(self.packs, self.forwarded_dead())

    def forwarded_dead(self) -> set[tuple[str, str]]:
        """The catalog's dead marks and the tombstones, these also applied to the copies a
        compaction made (the catalog's own marks of a compacted pack are not: its copied
        members live on in the copy)."""
        marks: set[tuple[str, str]] = set()
        for found in self.tombstones.values():
            marks |= found
        return set(self.catalog_dead) | forward(marks, self.moved, self.packs)


class Packs:
    """Reads and writes the packs of one location (a Storage rooted at it)."""

    def __init__(self, storage: Storage, location: str) -> None:
        self.storage = storage
        self.location = location
        self._indexes: dict[str, Pack] = {}  # packs never change: read once

    def pack_names(self) -> list[str]:
        """The pack files, oldest first (a folder of a pack's name is not one)."""
        try:
            entries = self.storage.fs.ls(self.storage.path(PACKS_FOLDER), detail=True)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"could not list {self.location}/{PACKS_FOLDER}: {exc}") from exc
        # Regular files only: a FIFO would hang the reader, a symlink lead outside.
        names = (str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in entries
                 if e.get("type") == "file" and not e.get("islink"))
        return sorted(n for n in names if PACK_NAME.fullmatch(n))

    def has_packs(self) -> bool:
        """True when the location has any pack."""
        return bool(self.pack_names())

    def index(self, name: str) -> Pack:
        """The index of pack ``name`` (read once, then cached)."""
        cached = self._indexes.get(name)
        if cached is not None:
            return cached
        rel = f"{PACKS_FOLDER}/{name}"
        try:
            with self.storage.open_read(rel) as handle:
                handle.seek(0, 2)
                size = handle.tell()
                handle.seek(max(0, size - TRAILER.size))
                tail = handle.read(TRAILER.size)

                def read_at(offset: int, length: int) -> bytes:
                    handle.seek(offset)
                    return handle.read(length)

                pack = decode_index(name, tail, size, read_at)
        except FileNotFoundError:
            raise
        except (ValueError, UnicodeDecodeError, OSError) as exc:
            raise StreamError(f"the pack {self.location}/{rel} is unreadable ({exc}); the files "
                              "it holds cannot be served") from None
        self._indexes[name] = pack
        return pack

    def read(self) -> PackState:
        """The current packs, catalog and tombstones. Tombstones are listed before the catalog
        is read: one folded and removed meanwhile is then in the catalog."""
        state = PackState()
        for name in [n for n in self.storage.list_names(TOMBSTONES_FOLDER)
                     if n.endswith(".txt") and not n.startswith(".")]:
            try:
                data = self._read_bounded(f"{TOMBSTONES_FOLDER}/{name}", MAX_TOMBSTONE_BYTES)
            except (FileNotFoundError, IsADirectoryError):
                continue
            except StorageError:
                continue  # not a file we can read (a folder of that name): not a tombstone
            if data is not None:  # larger, or not a regular file: not ours (the JVM skips it)
                state.tombstones[name] = set(_pairs(data))
        try:
            catalog = self._read_bounded(CATALOG, MAX_CATALOG_BYTES)
        except FileNotFoundError:
            catalog = b""
        if catalog is None:  # its dead marks cannot be skipped: Spark's deletes would return
            raise StreamError(f"the pack catalog {self.location}/{CATALOG} is not a regular "
                              f"file of at most {MAX_CATALOG_BYTES} bytes; the packed files "
                              "cannot be served")
        for line in lines(catalog):
            kind, _, rest = line.partition("\t")
            if kind == "dead":
                pack, _, rel = rest.partition("\t")
                state.catalog_dead.add((pack, rel))
            elif kind == "settled":
                state.settled.add(rest)
            elif kind == "moved":
                source, _, target = rest.partition("\t")
                state.moved.setdefault(source, set()).add(target)
        for name in self.pack_names():
            try:
                state.packs.append(self.index(name))
            except FileNotFoundError:
                continue  # deleted meanwhile: all its members were dead
        return state

    def _read_bounded(self, rel: str, limit: int) -> bytes | None:
        """``rel``'s bytes, or None when it is larger than ``limit`` or (locally) not a regular
        file: never more than ``limit`` + 1 bytes read, never a FIFO opened."""
        if self.storage.is_local:
            try:
                mode = os.lstat(self.storage.path(rel)).st_mode
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise StorageError(f"could not read {self.location}/{rel}: {exc}") from exc
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(rel)
            if not stat.S_ISREG(mode):
                return None
        with self.storage.open_read(rel) as handle:
            data = handle.read(limit + 1)
        return None if len(data) > limit else bytes(data)

    def member_bytes(self, member: Member) -> bytes:
        """A member's bytes, read from its pack and checked against its crc32c."""
        rel = f"{PACKS_FOLDER}/{member.pack}"
        with self.storage.open_read(rel) as handle:
            handle.seek(member.offset)
            data = handle.read(member.length)
        if len(data) != member.length or crc32c(data) != member.crc32c:
            raise StreamError(f"{self.location}/{member.rel} in the pack {rel} fails its "
                              "checksum")
        return data

    def write_catalog(self, dead: set[tuple[str, str]], settled: set[str],
                      moved: dict[str, set[str]] | None = None) -> None:
        """Writes the catalog (dead members, settled and moved packs) atomically."""
        out = [f"settled\t{name}\n" for name in sorted(settled)]
        out += [f"moved\t{source}\t{target}\n" for source in sorted(moved or {})
                for target in sorted((moved or {})[source])]
        out += [f"dead\t{pack}\t{rel}\n" for pack, rel in sorted(dead)]
        body = "".join(out).encode()
        if len(body) > MAX_CATALOG_BYTES:
            raise StreamError(f"the pack catalog of {self.location} would be {len(body)} bytes, "
                              f"more than the {MAX_CATALOG_BYTES} a JVM reads")
        self.storage.write_atomic(CATALOG, body)

    def write_pack(self, name: str, data: bytes) -> None:
        """Writes pack ``name`` atomically."""
        self.storage.write_atomic(f"{PACKS_FOLDER}/{name}", data)

    def delete_pack(self, name: str) -> None:
        """Deletes pack ``name`` and forgets its index."""
        self.storage.delete(f"{PACKS_FOLDER}/{name}")
        self._indexes.pop(name, None)

    def delete_tombstones(self, names: Iterable[str]) -> None:
        """Deletes the tombstone files ``names``."""
        for name in names:
            self.storage.delete(f"{TOMBSTONES_FOLDER}/{name}")

    def clear(self) -> None:
        """Removes every pack, the catalog and the tombstones (after an unpack)."""
        self.storage.delete(PACKS_FOLDER)
        self._indexes.clear()


def _pairs(data: bytes) -> Iterable[tuple[str, str]]:
    for line in lines(data):
        parts = line.split("\t", 1)
        if len(parts) == 2 and PACK_NAME.fullmatch(parts[0]) and packable(parts[1]) is not None:
            yield parts[0], parts[1]

