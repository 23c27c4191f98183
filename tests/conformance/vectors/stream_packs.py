"""Test vectors of packed streaming checkpoint files (FLIP-306): locations laid out byte by byte
(packs, the catalog, tombstones and loose files) and what Spark must see of them.

Packs are written with the format's own encoder (``streams/packs.py``) or by hand where a
vector needs bytes no encoder writes. :class:`Layout` records what it wrote, and
:meth:`Layout.expected` computes from that record alone (not through either reader) what every
folder holds: the ground truth both runtimes are compared with.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import crc32c

from spark_steward.streams.lifecycle.packs import PACKS_FOLDER
from spark_steward.streams.packs import MAGIC, TRAILER, encode

QUERY_ID = "3d94f916-43d2-424b-a782-501d70a96801"
#: Folders a location's files are in; Spark makes the first four.
FOLDERS = ("offsets", "commits", "state/0/0", "state/0/1", "state/1/0", "state/1/0/left",
           "state/2/3")

Members = Iterable[tuple[str, bytes, int]]


def pack_name(sequence: int) -> str:
    return f"{sequence:016d}-{uuid.uuid4().hex}.pack"


def hand_pack(body: bytes, lines: str) -> bytes:
    """A pack built byte by byte: ``body``, the index ``lines`` and a trailer whose checksum
    matches them (so only what the lines say can make it unreadable)."""
    index = lines.encode()
    return body + index + TRAILER.pack(len(body), len(index), crc32c.crc32c(index), MAGIC)


def crc_hex(data: bytes) -> str:
    return f"{crc32c.crc32c(data):08x}"


@dataclass
class Layout:
    """One checkpoint location, and a record of every pack, mark and loose file written."""

    root: Path
    packs: list[tuple[str, list[tuple[str, bytes, int]]]] = field(default_factory=list)
    marks: set[tuple[str, str]] = field(default_factory=set)
    loose: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def at(cls, base: Path, name: str = "ckpt") -> "Layout":
        """A location laid out as Spark leaves it (metadata, offsets, commits, state)."""
        root = base / name
        for folder in ("offsets", "commits", "state/0/0"):
            (root / folder).mkdir(parents=True)
        (root / "metadata").write_text(json.dumps({"id": QUERY_ID}))
        return cls(root)

    @property
    def packs_folder(self) -> Path:
        return self.root / PACKS_FOLDER

    def pack(self, sequence: int, members: Members) -> str:
        """A pack of ``(path, bytes, mtime ms)`` members, as the packer writes it."""
        members = list(members)
        name = pack_name(sequence)
        body, _ = encode(members)
        self.raw(body, name=name)
        self.packs.append((name, members))
        return name

    def raw(self, data: bytes, sequence: int = 1, name: str = "") -> str:
        """``data`` under a pack's name (a valid one unless ``name`` is given), unchecked."""
        name = name or pack_name(sequence)
        self.packs_folder.mkdir(parents=True, exist_ok=True)
        (self.packs_folder / name).write_bytes(data)
        return name

    def catalog(self, lines: Iterable[str]) -> None:
        """The catalog of these lines; its ``dead`` marks are recorded."""
        lines = list(lines)
        self.packs_folder.mkdir(parents=True, exist_ok=True)
        (self.packs_folder / "catalog.txt").write_text("".join(line + "\n" for line in lines))
        for line in lines:
            kind, _, rest = line.partition("\t")
            if kind == "dead":
                pack, _, rel = rest.partition("\t")
                self.marks.add((pack, rel))

    def tombstone(self, name: str, data: bytes, marks: Iterable[tuple[str, str]] = ()) -> None:
        """A tombstone file ``name`` holding ``data``; ``marks`` are the deletes it records."""
        folder = self.packs_folder / "dead"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
        self.marks |= set(marks)

    def write_loose(self, rel: str, data: bytes) -> None:
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.loose[rel] = data

    def expected(self, folder: str) -> dict[str, bytes] | None:
        """What Spark sees in ``folder``, from the record: loose files, then for every other
        name the newest pack's copy not marked dead (a pack's sequence leads its name, and
        the newest wins). None when the folder is neither loose nor packed."""
        seen: dict[str, bytes] = {}
        for name, members in sorted(self.packs):
            for rel, data, _ in members:
                parent, _, base = rel.rpartition("/")
                if parent == folder and (name, rel) not in self.marks:
                    seen[base] = data
        for rel, data in self.loose.items():
            parent, _, base = rel.rpartition("/")
            if parent == folder:
                seen[base] = data
        if not seen and not (self.root / folder).is_dir():
            return None
        return seen


def random_layout(base: Path, seed: int) -> Layout:
    """A few packs over overlapping files, dead marks in the catalog and tombstones, and loose
    files (some also packed, with other bytes)."""
    rng = random.Random(seed)
    layout = Layout.at(base, f"random-{seed}")

    def rel_in(folder: str) -> str:
        if folder.startswith("state/"):
            return f"{folder}/{rng.randint(0, 12)}.{rng.choice(['delta', 'delta', 'snapshot'])}"
        return f"{folder}/{rng.randint(0, 12)}"

    names: list[str] = []
    for sequence in sorted(rng.sample(range(1, 40), rng.randint(1, 4))):
        members = {rel_in(rng.choice(FOLDERS)): None for _ in range(rng.randint(1, 25))}
        names.append(layout.pack(sequence, [
            (rel, rng.randbytes(rng.randint(0, 300)), rng.randint(0, 2**41)) for rel in members]))
    every = [(name, rel) for name, members in layout.packs for rel, _, _ in members]
    marks = rng.sample(every, len(every) // 3)
    split = len(marks) // 2
    layout.catalog([f"settled\t{n}" for n in names if rng.random() < 0.5]
                   + [f"dead\t{p}\t{r}" for p, r in marks[:split]])
    for number in range(rng.randint(0, 2)):
        chunk = marks[split:][number::2]
        layout.tombstone(f"{uuid.uuid4().hex}-{number}.txt",
                         "".join(f"{p}\t{r}\n" for p, r in chunk).encode(), chunk)
    for _ in range(rng.randint(0, 10)):
        folder = rng.choice(FOLDERS[:4])  # folders Spark made; packed-only ones stay missing
        layout.write_loose(rel_in(folder), rng.randbytes(rng.randint(0, 50)))
    return layout


def spark_like_files(layout: Layout, batches: int) -> None:
    """What a stateful query of ``batches`` batches leaves: offsets, commits, two partitions'
    state deltas and a snapshot."""
    for batch in range(batches):
        layout.write_loose(f"offsets/{batch}", f"v1\n{{\"batch\":{batch}}}".encode())
        layout.write_loose(f"commits/{batch}", f"v1\n{{\"nextBatchWatermarkMs\":{batch}}}".encode())
        for part in (0, 1):
            layout.write_loose(f"state/0/{part}/{batch + 1}.delta", bytes([batch, part]) * 30)
    layout.write_loose("state/0/1/4.snapshot", b"snapshot-4")


#: Index lines that name no member of the pack (its body is b"hello", 5 bytes), by vector id:
#: the pack is unreadable, naming line 2, in both runtimes. ``{crc}`` is the body's crc32c.
NOT_MEMBERS: dict[str, str] = dict([
    ("traversal", "0\t5\t{crc}\t0\t../../etc/passwd"),
    ("metadata", "0\t5\t{crc}\t0\tmetadata"),
    ("dot-dot-inside", "0\t5\t{crc}\t0\toffsets/../metadata"),
    ("absolute", "0\t5\t{crc}\t0\t/offsets/0"),
    ("crc-sidecar", "0\t5\t{crc}\t0\toffsets/0.crc"),
    ("tab-in-path", "0\t5\t{crc}\t0\tstate/0/0/..\t1.delta"),
    ("store-dot-dot", "0\t5\t{crc}\t0\tstate/0/0/../1.delta"),
    ("sources", "0\t5\t{crc}\t0\tsources/0/0"),
    ("own-catalog", "0\t5\t{crc}\t0\t_steward/packs/catalog.txt"),
    ("carriage-return", "0\t5\t{crc}\t0\toffsets/1\r"),
    ("arabic-digit", "0\t5\t{crc}\t0\toffsets/\u0661"),
    ("into-the-index", "0\t6\t{crc}\t0\toffsets/0"),
    ("beyond-the-body", "3\t5\t{crc}\t0\toffsets/0"),
    ("negative-offset", "-1\t5\t{crc}\t0\toffsets/0"),
    ("negative-length", "0\t-5\t{crc}\t0\toffsets/0"),
    ("plus-sign", "+0\t5\t{crc}\t0\toffsets/0"),
    ("offset-overflow", "9999999999999999999\t5\t{crc}\t0\toffsets/0"),
    ("four-fields", "0\t5\t{crc}\toffsets/0"),
    ("crc-not-hex", "0\t5\tzz\t0\toffsets/0"),
    ("mtime-word", "0\t5\t{crc}\tnow\toffsets/0"),
    ("mtime-overflow", "0\t5\t{crc}\t9999999999999999999\toffsets/0"),
])

#: Where the runtimes are known to see a vector differently: (runtime, vector) -> the
#: difference. The suite expects these to fail (strictly: a fix makes the entry go).
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {}
