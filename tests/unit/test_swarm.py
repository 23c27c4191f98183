"""Peer fetch without a network: the piece records (blob/pieces.py), the driver's directory
(blob/peering.py) and the swarm's fill (blob/swarm.py) against scripted piece sources that
lie, break off and die."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from spark_steward.blob.keys import BlobKey, BlobKind, BlobRef
from spark_steward.blob.peering import MAX_HOLDERS, REPEAT_AFTER, PeerDirectory
from spark_steward.blob.pieces import (PiecePlan, PieceRequest, have_header, have_name,
                                       parse_endpoint, parse_have, piece_size_for)
from spark_steward.blob.swarm import Swarm, SwarmFailed
from spark_steward.checksum import crc32c_of
from spark_steward.errors import BlobProtocolError, InvalidBlobKey

PIECE = 64 << 10
DATA = os.urandom(10 * PIECE + 999)
PLAN = PiecePlan(len(DATA), PIECE, tuple(crc32c_of(DATA[i:i + PIECE])
                                         for i in range(0, len(DATA), PIECE)))
REF = BlobRef(BlobKey(hashlib.sha256(DATA).hexdigest()), "_app", BlobKind.PERMANENT,
              len(DATA), crc32c_of(DATA))


class Source:
    """Serves DATA's pieces, with scripted faults."""

    def __init__(self, label: str, have: frozenset[int] | None = None, *,
                 corrupt: set[int] = frozenset(), length: int | None = None,
                 die_after: int | None = None, hook=None) -> None:
        self.label, self._have = label, have
        self.corrupt, self.length, self.die_after, self.hook = corrupt, length, die_after, hook
        self.reads: list[int] = []
        self.closed = False

    def have(self) -> frozenset[int] | None:
        return self._have

    def read(self, index: int, into: memoryview) -> int:
        if self.die_after is not None and len(self.reads) >= self.die_after:
            raise ConnectionResetError(f"{self.label} went away")
        self.reads.append(index)
        if self.hook is not None:
            self.hook(index)
        chunk = DATA[index * PIECE:(index + 1) * PIECE]
        if index in self.corrupt:
            chunk = bytes([chunk[0] ^ 1]) + chunk[1:]
        if self.length is not None:
            chunk = chunk[:self.length]
        into[:len(chunk)] = chunk
        return len(chunk)

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True


def tmp_of(folder: Path) -> Path:
    return folder / f".{REF.key.digest}.tmp-0123456789ab"


def swarm(origin: Source | None, peers: dict[str, Source], calls: list[list[str]] | None = None,
          **kw) -> Swarm:
    def directory(drop: list[str]) -> list[str]:
        if calls is not None:
            calls.append(list(drop))
        return list(peers)
    return Swarm(REF, PLAN, [origin] if origin is not None else [], directory, lambda p: peers[p], connections=4, attempts=2,
                 timeout=kw.pop("timeout", 10.0), peers=list(peers), **kw)


def test_origin_alone_fills_the_blob_and_hashes_it(tmp_path: Path) -> None:
    got = swarm(Source("origin"), {}).fill(tmp_of(tmp_path))
    assert tmp_of(tmp_path).read_bytes() == DATA
    assert (got.size, got.sha256, got.crc32c) == (len(DATA), REF.key.digest, REF.crc32c)
    assert os.listdir(tmp_path) == [tmp_of(tmp_path).name]  # the have-file is gone


def test_lying_short_oversized_and_dying_peers_are_dropped_and_reported(tmp_path: Path) -> None:
    peers = {"10.0.0.1:1": Source("liar", corrupt=set(range(PLAN.count))),
             "10.0.0.2:1": Source("short", length=PIECE - 1),
             "10.0.0.3:1": Source("dies", die_after=1),
             "10.0.0.4:1": Source("good", have=frozenset({1, 3}))}
    calls: list[list[str]] = []
    s = swarm(Source("origin", hook=lambda i: time.sleep(0.05)), peers, calls)
    got = s.fill(tmp_of(tmp_path))
    assert got.sha256 == REF.key.digest and tmp_of(tmp_path).read_bytes() == DATA
    assert {"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"} <= set(s.stats.dropped)
    assert "crc32c" in s.stats.dropped["10.0.0.1:1"]
    assert "expected" in s.stats.dropped["10.0.0.2:1"]
    assert "10.0.0.4:1" not in s.stats.dropped
    assert s.stats.bad_pieces >= 1
    assert set(sum(calls, [])) == set(s.stats.dropped)  # reported to the driver


def test_peers_alone_finish_when_the_origin_fails(tmp_path: Path) -> None:
    origin = Source("origin", die_after=0)
    peers = {"10.0.0.1:1": Source("a", die_after=3), "10.0.0.2:1": Source("b")}
    s = swarm(origin, peers)
    assert s.fill(tmp_of(tmp_path)).sha256 == REF.key.digest
    assert s.stats.from_origin == 0 and s.stats.from_peers >= PLAN.count


def test_no_source_left_fails_with_the_reasons(tmp_path: Path) -> None:
    peers = {"10.0.0.1:1": Source("liar", corrupt=set(range(PLAN.count)))}
    with pytest.raises(SwarmFailed, match="origin: origin: .*went away.*10.0.0.1:1"):
        swarm(Source("origin", die_after=0), peers).fill(tmp_of(tmp_path))
    assert not (tmp_path / have_name(REF.key)).exists()


def test_the_have_file_announces_only_verified_pieces(tmp_path: Path) -> None:
    tmp = tmp_of(tmp_path)
    seen: list[bytes] = []
    origin = Source("origin", hook=lambda i: seen.append(
        (tmp_path / have_name(REF.key)).read_bytes()))
    swarm(origin, {}).fill(tmp)
    header = have_header(tmp.name, REF.key)
    assert all(s.startswith(header) and len(s) == len(header) + PLAN.count for s in seen)
    for n, snapshot in enumerate(seen):
        flags = snapshot[len(header):]
        assert flags.count(b"1") == n  # one origin thread: the pieces before this one
        for i in (i for i, f in enumerate(flags) if f == ord("1")):
            assert tmp.read_bytes()[i * PIECE:(i + 1) * PIECE] == DATA[i * PIECE:(i + 1) * PIECE]


def test_a_stale_have_file_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / have_name(REF.key)
    stale.write_bytes(b".other.tmp-x\n" + b"1" * PLAN.count)
    swarm(Source("origin"), {}).fill(tmp_of(tmp_path))
    assert not stale.exists()


def test_nothing_arriving_fails_within_the_timeout(tmp_path: Path) -> None:
    gate = threading.Event()
    origin = Source("origin", hook=lambda i: gate.wait(5))
    origin.abort = gate.set  # type: ignore[method-assign]  # the cut-off wakes the read
    started = time.monotonic()
    with pytest.raises(SwarmFailed, match="no piece arrived"):
        swarm(origin, {}, timeout=0.5).fill(tmp_of(tmp_path))
    assert gate.is_set() and time.monotonic() - started < 3  # cut off, not waited out


# -- records ---------------------------------------------------------------------------------

def test_piece_sizes_keep_the_piece_count_bounded() -> None:
    assert piece_size_for(1) == 4 << 20
    assert piece_size_for(256 << 20) == 4 << 20
    assert -(-(1 << 40) // piece_size_for(1 << 40)) <= 4096


@pytest.mark.parametrize("body, match", [
    ({"size": 0, "piece_size": PIECE, "crcs": []}, "out of range"),
    ({"size": len(DATA), "piece_size": PIECE, "crcs": [1]}, "lists 1 checksums"),
    ({"size": len(DATA), "piece_size": PIECE, "crcs": ["1"] * 11}, "32-bit"),
    ({"size": len(DATA), "piece_size": PIECE * 1.0, "crcs": [1] * 11}, "integer"),
    ({"size": len(DATA), "piece_size": 1000, "crcs": [1] * 11}, "piece_size"),
    ([1], "not an object"),
])
def test_bad_plans_are_refused(body: object, match: str) -> None:
    with pytest.raises(BlobProtocolError, match=match):
        PiecePlan.from_wire(body, len(DATA))


def test_a_plan_for_another_size_is_refused() -> None:
    with pytest.raises(BlobProtocolError, match="blob has"):
        PiecePlan.from_wire(PLAN.to_wire(), len(DATA) + 1)
    assert PiecePlan.from_wire(PLAN.to_wire(), len(DATA)) == PLAN


@pytest.mark.parametrize("change, error", [
    ({"key": "../../etc/passwd"}, InvalidBlobKey), ({"key": "A" * 64}, InvalidBlobKey),
    ({"scope": "../x"}, InvalidBlobKey), ({"scope": "/abs"}, InvalidBlobKey),
    ({"index": -1}, BlobProtocolError), ({"index": 11}, BlobProtocolError),
    ({"index": True}, BlobProtocolError), ({"index": "1"}, BlobProtocolError),
    ({"size": 0}, BlobProtocolError), ({"size": 1 << 51}, BlobProtocolError),
    ({"piece_size": 1 << 31}, BlobProtocolError), ({"size": 1 << 40}, BlobProtocolError),
])
def test_bad_piece_requests_are_refused(change: dict, error: type) -> None:
    body = {**PieceRequest(REF.key, "_app", len(DATA), PIECE, 0).to_wire(), **change}
    with pytest.raises(error):
        PieceRequest.parse(body)


def test_have_strings_and_headers() -> None:
    assert parse_have("0110", 4) == frozenset({1, 2})
    assert parse_have("01102", 5) is None and parse_have("011", 4) is None
    assert parse_have(["1"], 1) is None
    with pytest.raises(ValueError):
        have_header("../../etc/passwd", REF.key)
    with pytest.raises(ValueError):
        have_header(f".{'0' * 64}.tmp-0123456789ab", REF.key)  # another blob's temp file


@pytest.mark.parametrize("text", ["198.18.1.2:7000", "[::1]:1", "sst-w1:65535"])
def test_good_endpoints(text: str) -> None:
    assert parse_endpoint(text) == text


@pytest.mark.parametrize("text", ["198.18.1.2", "h:0", "h:65536", "h:x", ":1", "a b:1",
                                  "-h:1", 7, "h" * 300 + ":1"])
def test_bad_endpoints(text: object) -> None:
    with pytest.raises(BlobProtocolError):
        parse_endpoint(text)


# -- the driver's directory ------------------------------------------------------------------

def test_the_directory_hands_out_other_holders_and_forgets_dropped_ones() -> None:
    d = PeerDirectory()
    entry = ("_app", REF.key)
    assert d.join(entry, ["10.0.0.1:1"], [], 8) == []
    assert d.join(entry, ["10.0.0.2:1", "10.0.0.2:2"], [], 8) == ["10.0.0.1:1"]
    assert sorted(d.join(entry, ["10.0.0.3:1"], ["10.0.0.1:1"], 8)) == ["10.0.0.2:1",
                                                                         "10.0.0.2:2"]
    assert "10.0.0.1:1" not in d.holders(entry)
    assert len(d.join(entry, [], [], 1)) == 1
    with pytest.raises(BlobProtocolError):
        d.join(entry, ["nonsense"], [], 8)
    with pytest.raises(BlobProtocolError):
        d.join(entry, [], [], 1000)
    for i in range(MAX_HOLDERS + 10):
        d.join(entry, [f"10.1.{i // 250}.{i % 250}:1"], [], 0)
    assert len(d.holders(entry)) == MAX_HOLDERS
    d.forget("_app", REF.key)
    assert d.holders(entry) == []


def test_the_plan_is_computed_once_from_the_verified_copy(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    opened = []

    def open_blob():
        opened.append(1)
        return open(path, "rb")
    d = PeerDirectory()
    plan = d.plan(("_app", REF.key), len(DATA), open_blob)
    assert plan.piece_size == piece_size_for(len(DATA))
    assert plan.crcs == (crc32c_of(DATA),)
    assert d.plan(("_app", REF.key), len(DATA), open_blob) is plan and len(opened) == 1


def test_the_origin_hands_out_every_piece_once_before_any_twice() -> None:
    d = PeerDirectory()
    entry = ("_app", REF.key)
    everything = frozenset(range(64))
    first = [d.pick(entry, everything, now=0) for _ in range(64)]  # hosts asking in turn
    assert sorted(first) == list(range(64))  # type: ignore[type-var]
    # All out: nothing again until REPEAT_AFTER (the hosts that got them pass them on) ...
    assert d.pick(entry, frozenset({3, 9}), now=REPEAT_AFTER - 0.1) is None
    # ... then again, least sent first (a host that got one may have died with it).
    assert d.pick(entry, frozenset({3, 9}), now=REPEAT_AFTER) in (3, 9)
    d.forget("_app")
    assert d.pick(entry, frozenset({7}), now=REPEAT_AFTER) == 7


def test_a_peer_that_claims_everything_but_drips_does_not_stall_the_fill(tmp_path: Path
                                                                        ) -> None:
    """A peer saying it holds all pieces keeps the origin off them only while pieces arrive:
    a slow (or lying) one cannot hold the fill at its pace."""
    slow = Source("slow", hook=lambda i: time.sleep(3))
    origin = Source("origin")
    started = time.monotonic()
    s = swarm(origin, {"10.0.0.9:1": slow})
    assert s.fill(tmp_of(tmp_path)).sha256 == REF.key.digest
    assert time.monotonic() - started < 5
    assert s.stats.from_origin >= PLAN.count - 1
