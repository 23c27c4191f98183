"""Peer fetch: one host fills a blob from other hosts of the application and from its origin
(the driver's blob server, or the HA store) at once, piece by piece.

Why: with every host fetching from the driver, N hosts cost N copies through the driver's one
link. Here the origin serves pieces that no peer has yet, peers serve each other the pieces they
verified, and a host serves pieces of a blob while it is still filling it (the have-file, see
:mod:`spark_steward.blob.pieces`), so N hosts cost about one copy through any one link plus the
depth of the pipeline.

Trust: the piece plan comes from the driver over the authenticated connection; every piece,
from any source, is checked against its crc32c before it is announced, served on or hashed (it is
received in place, so a bad one's bytes sit unannounced in the file until another source
overwrites them); a peer that sends a wrong, short or oversized piece, or that fails
mid-transfer, is dropped for this blob and its piece fetched elsewhere; the finished file is
still checked against the blob's key (SHA-256) by the cache before it takes its name. The
SHA-256 is computed here while pieces arrive, over the longest completed prefix, so the check
costs no pass of its own.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import mmap
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from spark_steward.blob.keys import BlobRef
from spark_steward.blob.pieces import PiecePlan, have_header, have_name
from spark_steward.blob.stores import Received, discard
from spark_steward.checksum import crc32c_update
from spark_steward.blob.errors import BadPiece, BlobNotFound, SwarmFailed
from spark_steward.errors import StewardError
from spark_steward.private import open_new

log = logging.getLogger(__name__)

#: Seconds between the first two asks of the driver for the blob's other holders; the pause
#: grows to MAX_REFRESH_SECONDS.
REFRESH_SECONDS = 0.5
MAX_REFRESH_SECONDS = 5.0
#: Seconds (jittered) an origin connection waits when the driver says all needed pieces are on
#: their way to other hosts.
ORIGIN_WAIT_SECONDS = 0.25
#: Seconds a peer thread waits before asking a peer that had nothing new again.
POLL_SECONDS = 0.05
#: Seconds a peer may have nothing this host needs before its connection is given up.
IDLE_PEER_SECONDS = 10.0
#: Seconds without a new piece after which the origin also sends pieces peers hold.
STALL_SECONDS = 1.0


class PieceSource(Protocol):
    """Where pieces come from: the origin (which has them all) or one peer."""

    label: str

    def have(self) -> frozenset[int] | None:
        """The pieces this source holds now; None when it holds them all."""

    def read(self, index: int, into: memoryview) -> int:
        """Reads piece ``index`` into ``into``; returns its length. Raises on any failure."""

    def abort(self) -> None:
        """Cuts a read in progress off (from another thread): it raises soon after."""

    def close(self) -> None:
        """Releases the source's connection."""


#: Asks the driver for the blob's holders; takes the endpoints to report dropped.
Directory = Callable[[list[str]], list[str]]


@dataclass
class SwarmStats:
    """Where one fill took its pieces from, and what it refused."""

    from_origin: int = 0
    from_peers: int = 0
    bad_pieces: int = 0
    dropped: dict[str, str] = field(default_factory=dict)


class Swarm:
    """One fill of one blob on this host. Call :meth:`fill` once."""

    def __init__(self, ref: BlobRef, plan: PiecePlan, origins: Sequence[PieceSource],
                 directory: Directory, connect: Callable[[str], PieceSource], *,
                 connections: int, attempts: int, timeout: float,
                 peers: list[str] | None = None) -> None:
        self.ref, self.plan = ref, plan
        self.origins = list(origins)
        self.directory, self.connect = directory, connect
        self.connections, self.attempts, self.timeout = connections, attempts, timeout
        self.stats = SwarmStats()
        self._cond = threading.Condition()
        self._done = bytearray(plan.count)
        self._left = plan.count
        self._claimed: dict[int, PieceSource] = {}  # piece -> the one source fetching it
        self._known: dict[str, frozenset[int] | None] = {}
        self._active: dict[str, threading.Thread] = {}
        self._to_report: list[str] = []
        self._candidates: list[str] = list(peers or [])
        self._idle: set[str] = set()
        self._origins_failed: dict[str, str] = {}
        self._progress = time.monotonic()
        self._stop = False
        self._writers = 0  # threads receiving into the file or writing to it
        self._receiving: dict[int, PieceSource] = {}  # piece -> the source filling it in place
        self._view = memoryview(b"")
        self._fd = -1
        self._have_fd = -1
        self._have_offset = 0

    # -- the fill --------------------------------------------------------------------------

    def fill(self, tmp: Path) -> Received:
        """Writes the blob into ``tmp`` (created here), announcing verified pieces in the
        have-file beside it; returns the crc32c, size and SHA-256 of the whole."""
        have_path = tmp.parent / have_name(self.ref.key)
        # Pieces are received straight into a shared mapping of the file (one copy of each
        # byte, not two: with several hosts per core the second copy was a third of the CPU),
        # and the SHA-256 follows the completed prefix from it.
        self._fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | os.O_CLOEXEC, 0o600)
        with os.fdopen(self._fd, "r+b", buffering=0):
            # Blocks first: a full disk is an OSError here, never a SIGBUS in a mapping.
            try:
                os.posix_fallocate(self._fd, 0, self.plan.size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(self._fd, self.plan.size)  # a file system without fallocate
            self._view = memoryview(mmap.mmap(self._fd, self.plan.size))
            try:
                self._announce(tmp, have_path)
                return self._follow()
            finally:
                self._halt()
                discard(have_path)
                if self._have_fd >= 0:
                    os.close(self._have_fd)
                # The mapping goes when the last view of it does (no thread writes any more).
                self._view.release()

    def _halt(self) -> None:
        """Ends the fill: no piece is received into the file or announced after this returns.
        Sources still receiving are cut off (their pieces would land in the file after it was
        checked); the threads themselves end on their own."""
        with self._cond:
            self._stop = True
            sources = list(self._receiving.values())
            self._cond.notify_all()
        for source in sources:
            source.abort()
        with self._cond:
            while self._writers:
                if not self._cond.wait(5.0):
                    for source in list(self._receiving.values()):
                        source.abort()

    def _announce(self, tmp: Path, have_path: Path) -> None:
        header = have_header(tmp.name, self.ref.key)
        spool = have_path.with_name(f"{have_path.name}.{uuid.uuid4().hex[:12]}")
        try:
            with open_new(spool) as f:
                f.write(header + b"0" * self.plan.count)
            os.replace(spool, have_path)  # over what a killed fetcher left
        except BaseException:
            discard(spool)
            raise
        self._have_fd = os.open(have_path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._have_offset = len(header)

    def _follow(self) -> Received:
        """Runs the sources and hashes the completed prefix until the blob is whole."""
        view = self._view
        sha, crc, hashed = hashlib.sha256(), 0, 0
        with self._cond:
            self._start_candidates()
            for n, origin in enumerate(self.origins):
                self._start(f"origin-{n}", functools.partial(self._origin_loop, origin))
        refresh = REFRESH_SECONDS
        next_refresh = time.monotonic() + refresh
        while True:
            with self._cond:
                ready = self._prefix_done(hashed)
                if ready == hashed and self._left:
                    self._cond.wait(0.05)
                    ready = self._prefix_done(hashed)
                failure = self._failure()
            while hashed < ready:
                offset, length = self.plan.span(hashed)
                chunk = view[offset:offset + length]
                sha.update(chunk)
                crc = crc32c_update(chunk, crc)
                chunk.release()
                hashed += 1
            if hashed == self.plan.count:
                self._report_dropped()
                return Received(crc, self.plan.size, sha.hexdigest())
            if failure is not None:
                raise SwarmFailed(f"blob {self.ref} could not be fetched from peers: {failure}")
            now = time.monotonic()
            if now >= next_refresh:
                # Soon at first (holders join as the fill starts), then less often: every
                # host of a large cluster asks the one driver.
                refresh = min(refresh * 1.5, MAX_REFRESH_SECONDS)
                next_refresh = now + refresh * (0.75 + random.random() / 2)
                self._refresh()

    def _prefix_done(self, start: int) -> int:
        end = start
        while end < self.plan.count and self._done[end]:
            end += 1
        return end

    def _failure(self) -> str | None:
        if time.monotonic() - self._progress > self.timeout:
            return f"no piece arrived for {self.timeout:g}s"
        if not self._active and not self._candidates:
            origins = "; ".join(f"{o}: {why}" for o, why in self._origins_failed.items())
            dropped = "; ".join(f"{p}: {why}" for p, why in self.stats.dropped.items())
            return (f"origin: {origins or 'none'}"
                    + (f"; peers: {dropped}" if dropped else "; no peer holds it"))
        return None

    def _refresh(self) -> None:
        with self._cond:
            report, self._to_report = self._to_report, []
        try:
            peers = self.directory(report)
        except (OSError, StewardError) as exc:
            log.debug("asking the driver for holders of blob %s failed: %s", self.ref, exc)
            with self._cond:
                self._to_report.extend(report)
            peers = []
        with self._cond:
            for peer in peers:
                if peer not in self.stats.dropped and peer not in self._active \
                        and peer not in self._candidates and peer not in self._idle:
                    self._candidates.append(peer)
            self._start_candidates()

    def _start_candidates(self) -> None:
        """Starts peers at random until ``connections`` are busy; the caller holds the lock."""
        random.shuffle(self._candidates)
        while self._candidates and self._peer_threads() < self.connections:
            peer = self._candidates.pop()
            self._start(peer, functools.partial(self._peer_loop, peer))

    def _report_dropped(self) -> None:
        """Tells the driver which peers failed, so later fetchers are not sent to them."""
        with self._cond:
            report, self._to_report = self._to_report, []
        if report:
            try:
                self.directory(report)
            except (OSError, StewardError) as exc:
                log.debug("reporting dropped peers of blob %s failed: %s", self.ref, exc)

    def _peer_threads(self) -> int:
        return sum(not name.startswith("origin-") for name in self._active)

    def _start(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._guarded, args=(name, target), daemon=True,
                                  name=f"spark-steward-swarm-{self.ref.key.short}-{name}")
        self._active[name] = thread
        thread.start()

    def _guarded(self, name: str, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException:  # a bug in a loop must not hang the fill
            log.exception("peer fetch thread %s of blob %s failed", name, self.ref)
            with self._cond:
                if name.startswith("origin"):
                    self._origins_failed[name] = "internal error (see the log)"
        finally:
            with self._cond:
                self._active.pop(name, None)
                self._cond.notify_all()

    # -- sources ---------------------------------------------------------------------------

    def _origin_loop(self, origin: PieceSource) -> None:
        buffer = memoryview(bytearray(self.plan.piece_size))  # for pieces not filled in place
        pick = getattr(origin, "pick", None)
        failures = 0
        try:
            while True:
                with self._cond:
                    need = self._origin_need()
                    while need is None and not self._stop and self._left:
                        self._cond.wait(POLL_SECONDS)
                        need = self._origin_need()
                    if need is None:
                        return
                    index = None if pick is not None else random.choice(need)
                    if index is not None:
                        self._claim(index, origin)
                placed: list[int] = []

                def destination(i: int) -> memoryview:
                    placed.append(i)
                    return self._destination(i, origin, buffer)
                try:
                    if index is None:
                        # The origin picks among the needed pieces (super-seeding); the piece
                        # is filled in place if nobody else took it meanwhile.
                        index, n = pick(frozenset(need), destination)  # type: ignore[misc]
                        if index < 0:  # all on their way to other hosts: wait for peers
                            with self._cond:  # (a while: a thousand hosts ask the one driver)
                                self._cond.wait(ORIGIN_WAIT_SECONDS * (0.5 + random.random()))
                            index = None
                            continue
                    else:
                        n = origin.read(index, self._destination(index, origin, buffer))
                    self._accept(index, n, origin, buffer)
                    failures = 0
                    with self._cond:
                        self.stats.from_origin += 1
                except (OSError, StewardError) as exc:
                    if self._stop:
                        return
                    failures += 1
                    log.warning("piece %s of blob %s from %s failed (%d of %d): %s", index,
                                self.ref, origin.label, failures, self.attempts, exc)
                    if failures >= self.attempts:
                        with self._cond:
                            self._origins_failed[origin.label] = str(exc)
                        return
                    time.sleep(min(2.0, 0.1 * 2 ** failures))
                finally:
                    for i in {*placed, *([] if index is None else [index])}:
                        self._abandon(i, origin)
                        self._release(i, origin)
        finally:
            origin.close()

    def _origin_need(self) -> list[int] | None:
        """What an origin connection may fetch now, under the lock: missing pieces nobody
        fetches that no known peer holds; those peers hold too when every peer connection is
        busy or no piece arrived for ``STALL_SECONDS``. None: nothing for now."""
        if self._stop or not self._left:
            return None
        free = [i for i in range(self.plan.count)
                if not self._done[i] and i not in self._claimed]
        if not free:
            return None  # all on their way
        held: set[int] = set()
        for have in self._known.values():
            held.update(range(self.plan.count) if have is None else have)
        rare = [i for i in free if i not in held]
        if rare:
            return rare
        # Pieces peers hold are theirs to give while one of their connections is free; when
        # all are busy (or slow, or claim what they do not send: the fill stalls), the origin
        # takes some too. The driver as origin still sends a piece again only after a while.
        busy = sum(1 for source in self._claimed.values() if source not in self.origins)
        if busy >= self._peer_threads() or time.monotonic() - self._progress > STALL_SECONDS:
            return free
        return None

    def _peer_loop(self, peer: str) -> None:
        source: PieceSource | None = None
        useful = time.monotonic()
        try:
            source = self.connect(peer)
            have = _have_or_nothing(source)
            while True:
                with self._cond:
                    self._known[peer] = have
                    if self._stop or not self._left:
                        return
                    index = self._choose(have)
                    if index is not None:
                        self._claim(index, source)
                if index is None:
                    if time.monotonic() - useful > IDLE_PEER_SECONDS:
                        log.debug("peer %s had nothing this host needs of blob %s for %gs",
                                  peer, self.ref, IDLE_PEER_SECONDS)
                        with self._cond:
                            self._idle.add(peer)  # not dropped: others may need it
                        return
                    time.sleep(POLL_SECONDS)
                    have = _have_or_nothing(source)
                    continue
                try:
                    n = source.read(index, self._destination(index, source, None))
                    self._accept(index, n, source, None)
                except BlobNotFound:  # it moved the piece's file (the fill just completed)
                    have = _have_or_nothing(source)
                    continue
                finally:
                    self._abandon(index, source)
                    self._release(index, source)
                useful = time.monotonic()
                with self._cond:
                    self.stats.from_peers += 1
        except (OSError, StewardError) as exc:
            if not self._stop:
                self._drop(peer, str(exc))
        finally:
            if source is not None:
                source.close()
            with self._cond:
                self._known.pop(peer, None)

    def _choose(self, have: frozenset[int] | None) -> int | None:
        """A missing piece nobody fetches that a peer holding ``have`` (None: all) can give,
        at random, so hosts take different pieces first; under the lock."""
        if self._stop or not self._left:
            return None
        free = [i for i in (range(self.plan.count) if have is None else have)
                if not self._done[i] and i not in self._claimed]
        return random.choice(free) if free else None

    def _claim(self, index: int, source: PieceSource) -> None:
        """``source`` fills piece ``index``, alone; the caller holds the lock."""
        self._claimed[index] = source

    def _release(self, index: int, source: PieceSource) -> None:
        with self._cond:
            if self._claimed.get(index) is source:
                del self._claimed[index]

    def _destination(self, index: int, source: PieceSource,
                     spare: memoryview | None) -> memoryview:
        """Where ``source`` receives piece ``index``: its place in the file when the piece is
        missing and ``source`` holds it alone (claiming it if it is free), else ``spare``
        (a piece picked by the origin that a peer took meanwhile: received and dropped)."""
        offset, length = self.plan.span(index)
        with self._cond:
            owner = self._claimed.setdefault(index, source)
            if owner is source and not self._done[index] and not self._stop:
                self._writers += 1
                self._receiving[index] = source
                return self._view[offset:offset + length]
        if spare is None:
            raise SwarmFailed("fill ended")
        return spare

    def _accept(self, index: int, n: int, source: PieceSource,
                spare: memoryview | None) -> None:
        """Checks piece ``index`` (``n`` bytes, in place or in ``spare``) against the plan and
        announces it; a bad piece raises BadPiece (its bytes in the file are not announced and
        are overwritten by the next source)."""
        with self._cond:
            in_place = self._receiving.get(index) is source
        try:
            offset, length = self.plan.span(index)
            if n != length:
                raise BadPiece(f"piece {index} has {n} bytes, expected {length}")
            if not in_place:
                return  # another source fills it
            got = crc32c_update(self._view[offset:offset + length], 0)
            if got != self.plan.crcs[index]:
                with self._cond:
                    self.stats.bad_pieces += 1
                raise BadPiece(f"piece {index} has crc32c {got:08x}, the plan says "
                               f"{self.plan.crcs[index]:08x}")
            os.pwrite(self._have_fd, b"1", self._have_offset + index)
            with self._cond:
                if not self._done[index]:
                    self._done[index] = 1
                    self._left -= 1
                    self._progress = time.monotonic()
        finally:
            if in_place:
                self._end_write(index)

    def _abandon(self, index: int, source: PieceSource) -> None:
        """A receive in place by ``source`` that ended without :meth:`_accept` (an error)."""
        with self._cond:
            if self._receiving.get(index) is not source:
                return
        self._end_write(index)

    def _end_write(self, index: int) -> None:
        with self._cond:
            self._receiving.pop(index, None)
            self._writers -= 1
            self._cond.notify_all()

    def _drop(self, peer: str, why: str) -> None:
        log.warning("peer %s dropped for blob %s: %s; its pieces come from elsewhere", peer,
                    self.ref, why)
        with self._cond:
            self.stats.dropped[peer] = why
            self._to_report.append(peer)


def _have_or_nothing(source: PieceSource) -> frozenset[int] | None:
    """A peer's pieces; none yet when it has not started its fill (or just finished it)."""
    try:
        return source.have()
    except BlobNotFound:
        return frozenset()


def fill_from_swarm(swarm: Swarm, tmp: Path) -> Received:
    """:meth:`Swarm.fill`, with the outcome logged once."""
    start = time.monotonic()
    received = swarm.fill(tmp)
    stats = swarm.stats
    log.info("blob %s: %d pieces from peers, %d from %s in %.2fs%s", swarm.ref,
             stats.from_peers, stats.from_origin,
             swarm.origins[0].label if swarm.origins else "no origin",
             time.monotonic() - start,
             f" ({len(stats.dropped)} peers dropped)" if stats.dropped else "")
    return received


__all__ = ["BadPiece", "PieceSource", "Swarm", "SwarmFailed", "SwarmStats",
           "fill_from_swarm"]
