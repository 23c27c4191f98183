"""Packs the old immutable files of a running query's checkpoint location (FLIP-306).

Spark's HDFS state store and metadata logs leave two files per partition and batch (the file
and its ``.crc``), ~50,000 in steady state at 200 partitions. Files of batches at least
``streams.pack.keep-batches`` older than the last commit are final (a committed batch never
runs again); each cycle puts them into one pack and, ``streams.pack.grace`` after a pack became
visible, removes their loose copies. The JVMs' file managers serve packed files as if loose.

One cycle, in this order (``streams/lifecycle/packs.py`` holds the rules, model-checked):

1. read the packs, the catalog and the tombstones; list the loose files;
2. settle each pack visible for the grace: members Spark deleted or rewrote meanwhile are
   dead, unchanged loose copies are redundant;
3. write the next pack from the eligible loose files (whole, before anything refers to it);
   (before it, when the packs store more than ``streams.pack.max-space-amplification`` times
   their live bytes, the live members of the most wasteful packs are copied into a new pack,
   recorded settled at once; the old packs go in a later cycle);
4. delete packs all of whose members are dead;
5. write the catalog (folded tombstones, verdicts, settled packs), then remove the folded
   tombstones;
6. remove the redundant loose copies (and their ``.crc``).

A crash anywhere leaves a state the next cycle (of any application) continues from: a settled
pack is recorded before its loose copies go, so a copy missing later is never taken for a
delete by Spark. One packer writes at a time: a cycle stops before each of its writes once its
run ended (:meth:`Packer.cancel`), and before the catalog also when the ``owns`` check the
service passes (one read of the query's record) says another run holds the location, so a
stopped run's last cycle cannot overwrite the catalog of the next run's packer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from spark_steward.errors import StewardError
from spark_steward.streams.errors import Cancelled, StreamError
from spark_steward.streams.lifecycle import packs as rules
from spark_steward.streams.lifecycle.packs import LooseFile
from spark_steward.storage import Storage
from spark_steward.streams.location import Location, checksum_sidecar
from spark_steward.streams.packs import Packs, encode

log = logging.getLogger(__name__)

#: Folders of a location whose files may be packed.
PACKED_FOLDERS = ("offsets", "commits", "state")
MAX_PACK_BYTES = 256 << 20


@dataclass(frozen=True)
class CycleResult:
    packed: int = 0          # files put into a new pack
    removed: int = 0         # loose copies removed (each with its .crc)
    packs_deleted: int = 0
    packs: int = 0           # packs after the cycle
    stored_bytes: int = 0    # member bytes in packs
    live_bytes: int = 0      # of which live


class Packer:
    """The packer of one location; keeps only when it first saw each pack (for the grace)."""

    def __init__(self, location: Location, *, keep: int, grace: float, max_member: int,
                 max_amplification: float = 2.0,
                 clock: Callable[[], float] = time.monotonic,
                 owns: Callable[[], bool] = lambda: True) -> None:
        self.location = location
        self.packs = Packs(location.storage, location.location)
        self.keep = keep
        self.grace = grace
        self.max_member = max_member
        self.max_amplification = max_amplification
        self._clock = clock
        self._owns = owns
        self._cancelled = threading.Event()
        self._first_seen: dict[str, float] = {}
        self._moved_seen: dict[str, float] = {}  # compacted pack -> when its copy was first seen

    def cancel(self) -> None:
        """No more writes from this packer (its run ended); an in-flight cycle stops at its
        next write with :class:`Cancelled`."""
        self._cancelled.set()

    def _check(self, before: str, *, ask: bool = False) -> None:
        """Cancelled before ``before``; with ``ask`` also when ``owns`` says no (one read of
        the query's record, made before the catalog write, the write a second packer would
        spoil)."""
        if self._cancelled.is_set() or (ask and not self._owns()):
            raise Cancelled(f"packing of {self.location.location} stopped before {before}: its "
                            "run no longer owns the location")

    def loose(self) -> dict[str, LooseFile]:
        """The loose files a pack may hold (symlinks never: they are not Spark's)."""
        storage = self.location.storage
        out: dict[str, LooseFile] = {}
        for folder in PACKED_FOLDERS:
            for entry in storage.walk_files(folder):
                if rules.packable(entry.path) is None or entry.modified is None:
                    continue
                if storage.is_local and os.path.islink(storage.path(entry.path)):
                    continue
                out[entry.path] = LooseFile(entry.path, entry.size, int(entry.modified * 1000))
        return out

    def cycle(self) -> CycleResult:
        """One packing cycle; StewardError when the storage fails (the next cycle retries)."""
        state = self.packs.read()
        loose = self.loose()
        now = self._clock()
        names = {p.name for p in state.packs}
        for name in names:
            self._first_seen.setdefault(name, now)
        for name in list(self._first_seen):
            if name not in names:
                del self._first_seen[name]
        for source in state.moved:
            self._moved_seen.setdefault(source, now)
        for source in list(self._moved_seen):
            if source not in names:
                del self._moved_seen[source]
        dead = state.forwarded_dead()
        settled = set(state.settled) & names
        remove: list[str] = rules.redundant_loose(
            [p for p in state.packs if p.name in settled], loose, dead)
        for pack in sorted(state.packs, key=lambda p: p.sequence):
            if pack.name in settled or now - self._first_seen[pack.name] < self.grace:
                continue
            verdict = rules.settle(pack, loose)
            dead |= verdict.dead
            remove += verdict.remove_loose
            settled.add(pack.name)
        dead |= rules.shadowed(state.packs, dead, settled)

        last = max((p.sequence for p in state.packs), default=0)
        moved = {k: set(v) for k, v in state.moved.items()}
        self._check("compacting")
        compacted = self._compact(state.packs, dead, settled, last)
        if compacted is not None:
            copy, sources = compacted
            last = copy.sequence
            for source in sources:
                moved.setdefault(source, set()).add(copy.name)
                self._moved_seen[source] = self._clock()
            names.add(copy.name)
            settled.add(copy.name)  # its members have no loose copies to settle against
            self._first_seen[copy.name] = self._clock()
            state.packs.append(copy)

        packed = 0
        committed = self._committed(loose, state.packs, dead)
        chosen = [f for f in rules.to_pack(loose, state.packs, dead, committed=committed,
                                           keep=self.keep, max_member=self.max_member)
                  if f.rel not in remove]
        self._check("writing a pack")
        new_pack = self._write_pack(chosen, last)
        if new_pack is not None:
            self._first_seen[new_pack.name] = self._clock()
            names.add(new_pack.name)
            packed = len(new_pack.members)
            older = rules.holders_index(state.packs, dead)
            for member in new_pack.members:  # a rewrite: the older packed copies are dead
                dead.update((holder, member.rel) for holder in older.get(member.rel, ()))
            state.packs.append(new_pack)

        # A compacted pack goes only in a later cycle, once the catalog records its copy as
        # settled: a crash before that must not leave the copy to be judged against loose files.
        # And only a grace after that: a JVM that read the catalog before the copy and lists
        # the packs slowly must still find the old pack, or it would miss the files it held.
        compacting = set(compacted[1]) if compacted is not None else set()
        young = {s for s, seen in self._moved_seen.items() if now - seen < self.grace}
        gone = [n for n in rules.fully_dead(state.packs, dead, settled)
                if n not in compacting and n not in young]
        self._check("writing the catalog", ask=True)
        for name in gone:
            self.packs.delete_pack(name)
            names.discard(name)
            settled.discard(name)
        moved = rules.collapse_moved(moved, names)
        kept_dead = {d for d in dead if d[0] in names}
        if (kept_dead != state.catalog_dead or settled != state.settled or gone
                or moved != state.moved):
            self.packs.write_catalog(kept_dead, settled, moved)
        self.packs.delete_tombstones(state.tombstones)

        removed = 0
        if remove:
            self._check("removing loose copies")
        for rel in dict.fromkeys(remove):
            self.location.storage.delete(rel)
            self.location.storage.delete(checksum_sidecar(rel))
            removed += 1
        remaining = [p for p in state.packs if p.name in names]
        stored, live = rules.amplification(remaining, dead)
        return CycleResult(packed, removed, len(gone), len(remaining), stored, live)

    def _compact(self, packs: list[rules.Pack], dead: set[tuple[str, str]], settled: set[str],
                 last: int) -> tuple[rules.Pack, list[str]] | None:
        """Copies the live members of the most wasteful packs into one new pack when the packs
        store more than ``max_amplification`` times their live bytes; their members are then
        dead (the copies live on) and the packs go in a later cycle."""
        sources = rules.choose_compaction(packs, dead, settled, self.max_amplification)
        if not sources:
            return None
        live = rules.live_members(packs, dead)
        members: list[tuple[str, bytes, int]] = []
        for member in sorted(live.values(), key=lambda m: m.rel):
            if member.pack in sources:
                members.append((member.rel, self.packs.member_bytes(member), member.mtime_ms))
        copy = self._store(members, last)
        for pack in packs:
            if pack.name in sources:
                dead.update((pack.name, m.rel) for m in pack.members)
        return copy, sources

    def _committed(self, loose: dict[str, LooseFile], packs: list[rules.Pack],
                   dead: set[tuple[str, str]]) -> int | None:
        """The last committed batch: the highest ``commits/N``, loose or packed."""
        batches = [int(rel.split("/")[1]) for rel in
                   list(loose) + list(rules.live_members(packs, dead))
                   if rel.startswith("commits/")]
        return max(batches) if batches else None

    def _write_pack(self, chosen: list[LooseFile], last_sequence: int) -> rules.Pack | None:
        members: list[tuple[str, bytes, int]] = []
        total = 0
        for copy in chosen:
            if total + copy.size > MAX_PACK_BYTES:
                break
            try:
                data = self.location.storage.read_bytes(copy.rel)
            except FileNotFoundError:
                continue  # Spark deleted it meanwhile
            if len(data) != copy.size:
                continue  # changed since the listing: the next cycle takes it
            members.append((copy.rel, data, copy.mtime_ms))
            total += len(data)
        return self._store(members, last_sequence) if members else None

    def _store(self, members: list[tuple[str, bytes, int]], last_sequence: int) -> rules.Pack:
        """Writes a pack of ``members`` as the next in sequence; returns its index."""
        name = f"{last_sequence + 1:016d}-{uuid.uuid4().hex}.pack"
        body, index = encode(members)
        self.packs.write_pack(name, body)
        return rules.Pack(name, tuple(rules.Member(name, m.rel, m.offset, m.length, m.crc32c,
                                                   m.mtime_ms) for m in index))


def unpack(location: Location) -> int:
    """Writes every live packed file back as a loose file (a loose one wins and is kept), then
    removes the packs: the plain layout Spark reads without spark-steward. Idempotent; returns
    how many files it wrote.

    A member of a pack not yet settled whose loose copy is gone is dead: the packer removes
    loose copies only of settled packs, so Spark deleted it (a JVM whose view predated the
    pack deletes the loose file alone, without a tombstone)."""
    packs = Packs(location.storage, location.location)
    state = packs.read()
    dead = state.forwarded_dead()
    storage = location.storage
    written = 0
    for rel, member in sorted(rules.live_members(state.packs, dead).items()):
        if _loose_exists(storage, rel):
            continue
        if member.pack not in state.settled:
            continue
        try:
            data = packs.member_bytes(member)
        except StewardError:
            raise
        except OSError as exc:
            raise StreamError(f"could not read {location.location}/{rel} from its pack: "
                              f"{exc}") from exc
        location.storage.write_atomic(rel, data)
        written += 1
    packs.clear()
    return written


def _loose_exists(storage: Storage, rel: str) -> bool:
    """Whether ``rel`` is there as a loose file; a storage error is raised, never taken for
    "no" (that would overwrite a newer loose file with an older packed copy)."""
    try:
        storage.fs.info(storage.path(rel))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StreamError(f"could not look for {storage.url}/{rel}: {exc}") from exc
    return True
