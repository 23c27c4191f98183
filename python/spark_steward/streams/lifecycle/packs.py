"""Which files of a streaming checkpoint location are packed, and what Spark sees (FLIP-306).

Pure: the listings, the pack indexes and the dead marks are passed in, so the rules are
model-checked without Spark or storage (``tests/unit/test_stream_packs_model.py``). The JVM's
file manager (``StreamPacks.java``) applies the same rules; ``streams/packs.py`` reads and
writes the bytes.

A location's *logical* files are its loose files plus the live members of its packs, a loose
file winning over a packed one of the same name, and among packs the newest (highest sequence)
winning. A member is *dead* once a delete of it is recorded, as a tombstone of a JVM (Spark
deleted it) or in the catalog (folded tombstones, and the packer's own verdicts).

The packer's order keeps every committed file visible to a reader that lists loose files first
and packs second: a pack is written whole before any of its loose copies goes, and they go only
``grace`` after the pack became visible, longer than a reader caches its view of the packs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from spark_steward.streams.lifecycle.locations import OWN_FOLDER

PACKS_FOLDER = f"{OWN_FOLDER}/packs"
TOMBSTONES_FOLDER = f"{PACKS_FOLDER}/dead"
CATALOG = f"{PACKS_FOLDER}/catalog.txt"
#: ``<sequence, 16 digits>-<uuid hex>.pack``: names that do not match are not ours.
PACK_NAME = re.compile(r"^([0-9]{16})-[0-9a-f]{32}\.pack$")

# ASCII digits only, as Java's \d: a name the JVM would not take is never packed.
_LOG_FILE = re.compile(r"^([0-9]{1,18})$")
_STATE_FILE = re.compile(r"^([0-9]{1,18})\.(delta|snapshot)$")
_DIGITS = re.compile(r"^[0-9]{1,9}$")
_STORE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_BAD_CHARACTERS = re.compile(r"[\\\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Member:
    """One logical file inside a pack: its path relative to the location, where its bytes are,
    their crc32c and the loose file's size and modification time (ms) when it was packed."""

    pack: str
    rel: str
    offset: int
    length: int
    crc32c: int
    mtime_ms: int


@dataclass(frozen=True)
class Pack:
    name: str
    members: tuple[Member, ...]

    @property
    def sequence(self) -> int:
        """The pack's sequence number, from its name."""
        return pack_sequence(self.name)


@dataclass(frozen=True)
class LooseFile:
    rel: str
    size: int
    mtime_ms: int


def pack_sequence(name: str) -> int:
    """The sequence number in a pack file's name; ValueError for another name."""
    match = PACK_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a pack name")
    return int(match.group(1))


def packable(rel: str) -> int | None:
    """The batch or state version of a file Spark only reads or deletes once written (an old
    offset or commit, an HDFS state store delta or snapshot), or None for any other file.

    RocksDB's files are never packed: its file manager lists and uploads through the Hadoop
    file system directly, around Spark's checkpoint file manager.
    """
    if not rel or rel.startswith("/") or _BAD_CHARACTERS.search(rel):
        return None
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] in ("offsets", "commits"):
        match = _LOG_FILE.fullmatch(parts[1])
        return int(match.group(1)) if match else None
    if parts[0] == "state" and len(parts) in (4, 5) and _DIGITS.fullmatch(parts[1]) \
            and _DIGITS.fullmatch(parts[2]) \
            and (len(parts) == 4 or _STORE_NAME.fullmatch(parts[3]) and parts[3] not in (".", "..")):
        match = _STATE_FILE.fullmatch(parts[-1])
        return int(match.group(1)) if match else None
    return None


def eligible(rel: str, committed: int | None, keep: int) -> bool:
    """Whether ``rel`` may be packed now: a packable file of a batch at least ``keep`` batches
    older than the last committed one (state version ``v`` belongs to batch ``v - 1``). A
    committed batch is never run again, so its files are final."""
    version = packable(rel)
    if version is None or committed is None:
        return False
    batch = version - 1 if rel.startswith("state/") else version
    return batch <= committed - keep


def live_members(packs: Iterable[Pack], dead: frozenset[tuple[str, str]] | set[tuple[str, str]]
                 ) -> dict[str, Member]:
    """Every logical file the packs hold: rel -> the newest live member of that name."""
    found: dict[str, Member] = {}
    for pack in sorted(packs, key=lambda p: p.sequence):
        for member in pack.members:
            if (pack.name, member.rel) not in dead:
                found[member.rel] = member
    return found


def logical_files(loose: Iterable[str], live: Mapping[str, Member]) -> set[str]:
    """The files Spark sees: loose ones and live packed ones."""
    return set(loose) | set(live)


def holders_index(packs: Iterable[Pack], dead: frozenset[tuple[str, str]] | set[tuple[str, str]]
                  ) -> dict[str, list[str]]:
    """rel -> the packs holding it live (one pass over every member)."""
    out: dict[str, list[str]] = {}
    for pack in packs:
        for member in pack.members:
            if (pack.name, member.rel) not in dead:
                out.setdefault(member.rel, []).append(pack.name)
    return out


def holders(packs: Iterable[Pack], rel: str,
            dead: frozenset[tuple[str, str]] | set[tuple[str, str]]) -> list[str]:
    """The packs holding ``rel`` live: a delete of ``rel`` kills it in each."""
    return holders_index(packs, dead).get(rel, [])


@dataclass(frozen=True)
class Settlement:
    """What settling one pack decided: members Spark deleted or rewrote meanwhile are dead;
    the loose copies equal to a member may go."""

    dead: frozenset[tuple[str, str]]
    remove_loose: tuple[str, ...]


def settle(pack: Pack, loose: Mapping[str, LooseFile]) -> Settlement:
    """The verdict on a pack once it has been visible for the grace: a member whose loose copy
    is gone was deleted by Spark meanwhile (dead); one whose loose copy changed was rewritten
    (the loose one is newer: the member is dead); one whose copy is unchanged is redundant."""
    dead: set[tuple[str, str]] = set()
    remove: list[str] = []
    for member in pack.members:
        copy = loose.get(member.rel)
        if copy is None or not same(copy, member):
            dead.add((pack.name, member.rel))
        else:
            remove.append(member.rel)
    return Settlement(frozenset(dead), tuple(remove))


def redundant_loose(settled: Iterable[Pack], loose: Mapping[str, LooseFile],
                    dead: frozenset[tuple[str, str]] | set[tuple[str, str]]) -> list[str]:
    """Loose files an already settled pack holds unchanged (a packer stopped between recording
    the settlement and removing them): they may go now."""
    out: list[str] = []
    for pack in settled:
        for member in pack.members:
            copy = loose.get(member.rel)
            if copy is not None and (pack.name, member.rel) not in dead and same(copy, member):
                out.append(member.rel)
    return out


def shadowed(packs: Iterable[Pack], dead: frozenset[tuple[str, str]] | set[tuple[str, str]],
             settled: set[str] | frozenset[str]) -> set[tuple[str, str]]:
    """Live members that a newer settled pack also holds live: both readers serve the newest,
    so the older copies are dead. A crash can leave such pairs (a compaction's copy written but
    not recorded is settled later against the loose copies its source still had); without
    this they would count as live forever and keep both packs. Only a settled pack shadows: an
    unsettled one may still lose its members to its settlement."""
    newest: dict[str, int] = {}
    packs = list(packs)
    for pack in packs:
        if pack.name in settled:
            for member in pack.members:
                if (pack.name, member.rel) not in dead:
                    newest[member.rel] = max(newest.get(member.rel, -1), pack.sequence)
    out: set[tuple[str, str]] = set()
    for pack in packs:
        for member in pack.members:
            top = newest.get(member.rel)
            if top is not None and pack.sequence < top and (pack.name, member.rel) not in dead:
                out.add((pack.name, member.rel))
    return out


def same(copy: LooseFile, member: Member) -> bool:
    """True when a loose file is the copy a pack member was made from (same size and mtime)."""
    return copy.size == member.length and copy.mtime_ms == member.mtime_ms


def to_pack(loose: Mapping[str, LooseFile], packs: Iterable[Pack],
            dead: frozenset[tuple[str, str]] | set[tuple[str, str]], *, committed: int | None,
            keep: int, max_member: int) -> list[LooseFile]:
    """Loose files to put in the next pack: eligible, not larger than ``max_member``, and not
    already held unchanged by a live member (a changed one is a rewrite: packed again)."""
    live = live_members(packs, dead)
    out = []
    for rel, copy in sorted(loose.items()):
        if copy.size > max_member or not eligible(rel, committed, keep):
            continue
        member = live.get(rel)
        if member is not None and same(copy, member):
            continue
        out.append(copy)
    return out


def fully_dead(packs: Iterable[Pack], dead: frozenset[tuple[str, str]] | set[tuple[str, str]],
               settled: set[str] | frozenset[str]) -> list[str]:
    """Settled packs none of whose members is live: they may be deleted."""
    return [p.name for p in packs if p.name in settled
            and all((p.name, m.rel) in dead for m in p.members)]


def choose_compaction(packs: Iterable[Pack], dead: frozenset[tuple[str, str]] | set[tuple[str, str]],
                      settled: set[str] | frozenset[str], bound: float) -> list[str]:
    """Settled packs whose live members should be copied into a new pack so that the stored
    member bytes get back under ``bound`` times the live ones (FLIP-306's space amplification
    bound, as for merged checkpoints); the most wasteful first. ``bound`` below 1: never.

    Spark's retention is a version watermark, so packs mostly die whole; what this catches is
    a pack held by a few members (a partition whose state store was not cleaned for a while)."""
    packs = list(packs)
    if bound < 1:
        return []
    live = live_members(packs, dead)
    winners = {(m.pack, m.rel) for m in live.values()}
    stored_by: dict[str, int] = {}
    live_by: dict[str, int] = {}
    for pack in packs:
        stored_by[pack.name] = sum(m.length for m in pack.members)
        live_by[pack.name] = sum(m.length for m in pack.members if (pack.name, m.rel) in winners)
    stored, total_live = sum(stored_by.values()), sum(live_by.values())
    if stored <= bound * max(total_live, 1):
        return []
    order = sorted((p.name for p in packs if p.name in settled and live_by[p.name] > 0
                    and live_by[p.name] < stored_by[p.name]),
                   key=lambda n: (live_by[n] / max(1, stored_by[n]), n))
    chosen = []
    for name in order:
        chosen.append(name)
        stored -= stored_by[name] - live_by[name]
        if stored <= bound * max(total_live, 1):
            break
    return chosen


def forward(marks: Iterable[tuple[str, str]], moved: Mapping[str, Iterable[str]],
            packs: Iterable[Pack]) -> set[tuple[str, str]]:
    """The marks of deletes, also applied to the packs a compaction copied each member into
    (a JVM whose view predates the copy named only the old pack)."""
    holds = {(p.name, m.rel) for p in packs for m in p.members}
    out: set[tuple[str, str]] = set()
    for pack, rel in marks:
        out.add((pack, rel))
        todo, seen = [pack], {pack}
        while todo:
            for target in moved.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
                    if (target, rel) in holds:
                        out.add((target, rel))
    return out


def collapse_moved(moved: Mapping[str, Iterable[str]], existing: set[str]) -> dict[str, set[str]]:
    """The copy lineage with every target that no longer exists replaced by where its members
    went in turn; entries that lead nowhere are dropped."""
    out: dict[str, set[str]] = {}
    for source in moved:
        found: set[str] = set()
        todo, seen = list(moved[source]), set()
        while todo:
            target = todo.pop()
            if target in seen:
                continue
            seen.add(target)
            if target in existing:
                found.add(target)
            else:
                todo.extend(moved.get(target, ()))
        if found:
            out[source] = found
    return out


def amplification(packs: Iterable[Pack],
                  dead: frozenset[tuple[str, str]] | set[tuple[str, str]]) -> tuple[int, int]:
    """``(stored, live)`` member bytes over all packs: what packing costs in space."""
    stored = live = 0
    for pack in packs:
        for member in pack.members:
            stored += member.length
            if (pack.name, member.rel) not in dead:
                live += member.length
    return stored, live
