"""Peer fetch end to end on loopback: the Python fetcher (blob/swarm.py with the executor's
sources) against the real JVM peer server and the real driver blob server, with hostile peers
beside them that hold the application's peer key and still lie: a wrong, short or oversized
piece, a forged piece list, a peer that does not know the key. Each is refused, logged and
dropped; the fill completes from the good sources with the right bytes."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from spark_steward.blob.client import BlobClient
from spark_steward.blob.executor import _ServerPieces
from spark_steward.blob.keys import BlobKey, BlobKind, BlobRef
from spark_steward.blob.pieces import PiecePlan, PieceRequest
from spark_steward.blob.protocol import (encode_frame, exact_reader, new_nonce, peer_secret,
                                         proof_matches, read_frame)
from spark_steward.blob.server import BlobServer, LocatedBlob
from spark_steward.blob.swarm import Swarm, SwarmFailed
from spark_steward.checksum import crc32c_of
from spark_steward.errors import BlobNotFound, BlobProtocolError
from tests.conformance.blob_servers import JavaPeerServer

APP_SECRET = "a1" * 32
PEER_KEY = peer_secret(APP_SECRET)
PIECE = 256 << 10
DATA = os.urandom(64 * PIECE - 777)
KEY = BlobKey(hashlib.sha256(DATA).hexdigest())
REF = BlobRef(KEY, "_app", BlobKind.PERMANENT, len(DATA), crc32c_of(DATA))
PLAN = PiecePlan(len(DATA), PIECE, tuple(crc32c_of(DATA[i:i + PIECE])
                                         for i in range(0, len(DATA), PIECE)))


class HostilePeer:
    """A peer server on loopback speaking the protocol with ``secret``; ``answer(request)``
    returns the raw bytes it replies with (a header frame plus a body, or anything)."""

    def __init__(self, secret: str, answer: Callable[[dict[str, Any]], bytes], *,
                 hang_up: bool = False) -> None:
        self.secret, self.answer, self.hang_up = secret, answer, hang_up
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[dict[str, Any]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                read = exact_reader(conn.recv_into)
                nonce = new_nonce()
                conn.sendall(encode_frame({"protocol": 1, "nonce": nonce}))
                if not proof_matches(self.secret, nonce, read_frame(read, 1024).get("auth")):
                    conn.sendall(encode_frame({"error": "auth", "message": "who are you"}))
                    return
                conn.sendall(encode_frame({"ok": True}))
                while True:
                    request = read_frame(read, 65536)
                    self.requests.append(request)
                    conn.sendall(self.answer(request))
                    if self.hang_up and request.get("op") == "piece":
                        return  # mid-piece, for a short one
            except (OSError, BlobProtocolError):
                return

    def close(self) -> None:
        self.sock.close()


def _piece_reply(request: dict[str, Any], mangle: Callable[[bytes], bytes] = lambda b: b,
                 length_delta: int = 0) -> bytes:
    offset, length = PieceRequest.parse(request).span()
    body = mangle(DATA[offset:offset + length])
    return encode_frame({"ok": True, "offset": offset, "length": length + length_delta}) + body


def _claims_all(piece: Callable[[dict[str, Any]], bytes]) -> Callable[[dict[str, Any]], bytes]:
    def answer(request: dict[str, Any]) -> bytes:
        if request.get("op") == "have":
            return encode_frame({"ok": True, "complete": True})
        return piece(request)
    return answer


HOSTILE = {
    "wrong": _claims_all(lambda r: _piece_reply(r, lambda b: bytes([b[0] ^ 0xFF]) + b[1:])),
    "short": _claims_all(lambda r: _piece_reply(r, lambda b: b[:-10])),  # then hangs up
    "oversized": _claims_all(lambda r: _piece_reply(r, lambda b: b + b"x" * 16, 16)),
    "forged-list": lambda r: encode_frame({"ok": True, "complete": False,
                                           "have": "1" * (PLAN.count + 3)}),
    "traversal": _claims_all(lambda r: encode_frame({"ok": True, "offset": -PIECE,
                                                     "length": PIECE}) + b"\0" * PIECE),
}


@pytest.fixture(scope="module")
def java_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaPeerServer]:
    """The JVM's peer server (PeerServer.main) with its defaults, holding DATA."""
    server = JavaPeerServer(tmp_path_factory.mktemp("fetch"), max_connections=16,
                            handshake_timeout=5.0, network_timeout=60.0, key=PEER_KEY,
                            executor="1")
    try:
        server.path(KEY.digest).write_bytes(DATA)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlobServer]:
    path = tmp_path_factory.mktemp("driver") / KEY.digest
    path.write_bytes(DATA)

    def locate(key: BlobKey, scope: str) -> LocatedBlob:
        if key != KEY:
            raise BlobNotFound(f"no blob {key}")
        return LocatedBlob(open(path, "rb"), len(DATA), REF.crc32c)
    server = BlobServer(host="127.0.0.1", port=0, secret=APP_SECRET, locate=locate,
                        on_message=lambda op, body: {})
    server.start()
    yield server
    server.close()


def _swarm(origin: _ServerPieces | None, peers: list[str], directory_calls: list[list[str]],
           connections: int = 8) -> Swarm:
    def directory(drop: list[str]) -> list[str]:
        directory_calls.append(drop)
        return peers

    def connect(peer: str) -> _ServerPieces:
        host, port = peer.rsplit(":", 1)
        return _ServerPieces(REF, PLAN, BlobClient(host, int(port), PEER_KEY, timeout=5),
                             f"peer {peer}")
    return Swarm(REF, PLAN, [origin] if origin is not None else [], directory, connect, connections=connections, attempts=2,
                 timeout=20, peers=peers)


def _origin(driver: BlobServer) -> _ServerPieces:
    host, port = driver._listener.getsockname()[:2]  # type: ignore[union-attr]
    return _ServerPieces(REF, PLAN, BlobClient(host, port, APP_SECRET, timeout=5), "the driver")


def test_pieces_from_the_driver_and_the_jvm_peer_make_the_blob(java_peer: JavaPeerServer,
                                                               driver: BlobServer,
                                                               tmp_path: Path) -> None:
    calls: list[list[str]] = []
    origin = _origin(driver)
    pick = origin.pick
    origin.pick = lambda need, into: (time.sleep(0.01), pick(need, into))[1]  # a shared link
    swarm = _swarm(origin, [f"127.0.0.1:{java_peer.port}"], calls)
    got = swarm.fill(tmp_path / f".{KEY.digest}.tmp-0123456789ab")
    assert got.sha256 == KEY.digest and got.size == len(DATA)
    assert (tmp_path / f".{KEY.digest}.tmp-0123456789ab").read_bytes() == DATA
    assert swarm.stats.from_peers + swarm.stats.from_origin >= PLAN.count
    assert swarm.stats.from_peers > 0 and not swarm.stats.dropped


def test_hostile_peers_are_dropped_and_the_fill_completes_from_the_good_one(
        java_peer: JavaPeerServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hostile = {name: HostilePeer(PEER_KEY, answer, hang_up=name == "short")
               for name, answer in HOSTILE.items()}
    hostile["no-key"] = HostilePeer("another application's key", HOSTILE["wrong"])
    good = f"127.0.0.1:{java_peer.port}"
    calls: list[list[str]] = []
    try:
        with caplog.at_level(logging.WARNING, logger="spark_steward.blob.swarm"):
            swarm = _swarm(None, [good, *(p.endpoint for p in hostile.values())], calls)
            got = swarm.fill(tmp_path / f".{KEY.digest}.tmp-0123456789ab")
    finally:
        for peer in hostile.values():
            peer.close()
    assert got.sha256 == KEY.digest
    assert (tmp_path / f".{KEY.digest}.tmp-0123456789ab").read_bytes() == DATA
    dropped = swarm.stats.dropped
    assert good not in dropped
    reasons = {name: dropped.get(peer.endpoint, "") for name, peer in hostile.items()}
    assert "crc32c" in reasons["wrong"], reasons
    assert "truncated" in reasons["short"] or "closed" in reasons["short"], reasons
    assert "announced" in reasons["oversized"], reasons
    assert "malformed piece list" in reasons["forged-list"], reasons
    assert "announced" in reasons["traversal"], reasons
    assert "rejected" in reasons["no-key"], reasons
    assert not [r for r in hostile["forged-list"].requests if r.get("op") == "piece"]
    logged = caplog.text
    assert all(peer.endpoint in logged for peer in hostile.values())
    assert set(sum(calls, [])) == {p.endpoint for p in hostile.values()}  # told the driver


def test_only_hostile_peers_and_no_origin_fail_with_every_reason(tmp_path: Path) -> None:
    peers = [HostilePeer(PEER_KEY, HOSTILE["wrong"]),
             HostilePeer(PEER_KEY, HOSTILE["short"], hang_up=True)]
    try:
        with pytest.raises(SwarmFailed, match="crc32c"):
            _swarm(None, [p.endpoint for p in peers], []).fill(
                tmp_path / f".{KEY.digest}.tmp-0123456789ab")
    finally:
        for peer in peers:
            peer.close()


def test_the_driver_refuses_bad_piece_requests(driver: BlobServer) -> None:
    host, port = driver._listener.getsockname()[:2]  # type: ignore[union-attr]
    buffer = memoryview(bytearray(PIECE))
    with BlobClient(host, port, APP_SECRET, timeout=5) as client:
        for body, match in [({"key": "../../etc/passwd"}, "not valid"),
                            ({"scope": "../x"}, "not valid"),
                            ({"index": 10 ** 6}, "out of range"),
                            ({"size": len(DATA) + 1}, "the request says"),
                            ({"piece_size": 1}, "piece_size")]:
            request = {**PieceRequest(KEY, "_app", len(DATA), PIECE, 0).to_wire(), **body}
            reply = _raw(client, request)
            assert reply.get("error") == "bad_request" and match in reply["message"], reply
        assert client.piece(PieceRequest(KEY, "_app", len(DATA), PIECE, 63), buffer) == \
            (63, len(DATA) - 63 * PIECE)
        assert bytes(buffer[:len(DATA) - 63 * PIECE]) == DATA[63 * PIECE:]


def _raw(client: BlobClient, request: dict[str, Any]) -> dict[str, Any]:
    """One request's reply frame as the server sent it (errors not raised)."""
    with client._exchange("raw") as sock:  # type: ignore[attr-defined]
        sock.sendall(encode_frame(request))
        reply = read_frame(exact_reader(sock.recv_into), 1 << 20)
        client._in_step = True  # type: ignore[attr-defined]
        return reply


def test_the_driver_picks_only_among_the_needed_pieces(driver: BlobServer) -> None:
    host, port = driver._listener.getsockname()[:2]  # type: ignore[union-attr]
    buffer = memoryview(bytearray(PIECE))
    request = PieceRequest(KEY, "_app", len(DATA), PIECE, 0)
    with BlobClient(host, port, APP_SECRET, timeout=5) as client:
        for _ in range(5):
            index, n = client.piece(request, buffer, frozenset({5, 40}))
            assert index in (5, 40) and bytes(buffer[:n]) == DATA[index * PIECE:][:PIECE]
        for need, match in [("0" * PLAN.count, "at least one"), ("1" * 3, "flag per piece"),
                            ("2" * PLAN.count, "flag per piece")]:
            reply = _raw(client, {**request.to_wire(), "op": "pick", "need": need})
            assert reply.get("error") == "bad_request" and match in reply["message"], reply
