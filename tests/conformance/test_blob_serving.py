"""Blob serving and admission, one suite for both runtimes: the driver's Python ``BlobServer``
and the executor JVM's ``PeerServer`` answer the same hostile and good clients alike.

What both must do: serve the exact bytes of a piece of a complete blob; refuse a client
without the secret (any wrong answer, a proof for another nonce, silence, a proof dripped
byte by byte) within the handshake timeout while good clients are served; push the oldest
of a flood of silent connections out; answer ``busy`` past the authenticated bound; answer a
broken frame with ``bad_request`` and close, an invalid request with ``bad_request`` and stay;
never follow a link or serve a directory under a blob's name; end a transfer whose file shrank
without padding it; and cut a client that stops reading after the network timeout.

Side-specific behaviour stays with its side: ``get``/``pick``, callbacks, TLS, the depot's
restores and the thread limits in tests/faults (Python); ``have``, have-files of downloads in
progress, the endpoint file, the peer key and the upload cap in peer_server_only.py, mixed
into the JVM's class here so that they share its server.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, Iterator

import pytest

from spark_steward.blob.protocol import auth_proof, encode_frame
from tests.conformance.blob_servers import (BlobServing, Client, JavaPeerServer,
                                            PythonBlobServer, assert_error, authenticated,
                                            fetch)
from tests.conformance.peer_server_only import JavaPeerServerOnly
from tests.conformance.vectors.blob_wire import (BROKEN_FRAMES, COMPLETE, COMPLETE_KEY,
                                                 DEEP_OBJECT, KNOWN_DISAGREEMENTS, MISSING_KEY,
                                                 PIECE, REFUSED_ANSWERS, SECRET, SIZE,
                                                 bad_requests, pieces, piece_request)

#: The limits the suite's server runs with (the stall test starts its own).
MAX_CONNECTIONS = 3
HANDSHAKE = 1.0
NETWORK_TIMEOUT = 10.0
#: The network timeout of the server a stalled client is cut from.
STALL_TIMEOUT = 0.5


def expect_agreement(request: pytest.FixtureRequest, server: BlobServing, vector: str) -> None:
    """Marks the test an expected failure where the runtimes are known to disagree."""
    reason = KNOWN_DISAGREEMENTS.get((server.runtime, vector))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def complete_piece(index: int) -> dict[str, Any]:
    return piece_request(COMPLETE_KEY, SIZE, index)


class GoodClient(threading.Thread):
    """A good client next to an attack: authenticates and fetches a piece, again and again,
    each on a fresh connection, checking every byte."""

    def __init__(self, port: int) -> None:
        super().__init__(name="good-client", daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.served = 0
        self.failures: list[str] = []

    def run(self) -> None:
        index = 0
        while not self.stop.is_set():
            try:
                with authenticated(self.port) as client:
                    assert fetch(client, complete_piece(index)) == pieces(COMPLETE)[index]
                self.served += 1
            except Exception as e:  # reported by the test
                self.failures.append(f"{type(e).__name__}: {e}")
                return
            index = (index + 1) % 4
            self.stop.wait(0.02)

    def __enter__(self) -> "GoodClient":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(15)
        assert not self.is_alive()
        assert not self.failures, self.failures


class BlobServingSuite:
    """The suite; a concrete class names the runtime's adapter (fsspec's tests/abstract)."""

    server_class: ClassVar[type[BlobServing]]

    @pytest.fixture(scope="class")
    def servers(self, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[BlobServing, BlobServing]]:
        """The suite's server, and one whose only authenticated slot a stalled client holds
        (started together: a JVM's start is spent once)."""
        runtime = self.server_class.runtime
        main = self.server_class(tmp_path_factory.mktemp(f"{runtime}-server"),
                                 max_connections=MAX_CONNECTIONS, handshake_timeout=HANDSHAKE,
                                 network_timeout=NETWORK_TIMEOUT)
        try:
            stall = self.server_class(tmp_path_factory.mktemp(f"{runtime}-stall-server"),
                                      max_connections=1, handshake_timeout=3.0,
                                      network_timeout=STALL_TIMEOUT)
            try:
                assert main.put(COMPLETE) == COMPLETE_KEY
                yield main, stall
            finally:
                stall.stop()
        finally:
            main.stop()

    @pytest.fixture
    def server(self, servers: tuple[BlobServing, BlobServing]) -> BlobServing:
        return servers[0]

    # -- serving ---------------------------------------------------------------------------

    def test_pieces_of_a_complete_blob_are_its_exact_bytes(self, server: BlobServing) -> None:
        with authenticated(server.port) as client:
            assert client.hello["protocol"] == 1
            assert len(client.hello["nonce"]) == 64 and int(client.hello["nonce"], 16) >= 0
            got = [fetch(client, complete_piece(i)) for i in (3, 0, 2, 1)]
        assert [got[1], got[3], got[2], got[0]] == pieces(COMPLETE)
        assert len(got[0]) == 3392

    def test_a_missing_blob_is_not_found_and_the_connection_stays(
            self, server: BlobServing) -> None:
        with authenticated(server.port) as client:
            assert_error(client.request(piece_request(MISSING_KEY, 1000, 0)), "not_found")
            assert_error(client.request(piece_request(COMPLETE_KEY, SIZE, 0, scope="other.1")),
                         "not_found")
            assert fetch(client, complete_piece(1)) == pieces(COMPLETE)[1]

    def test_a_blob_asked_for_under_another_size_is_not_found(
            self, server: BlobServing, request: pytest.FixtureRequest) -> None:
        expect_agreement(request, server, "other-size")
        with authenticated(server.port) as client:
            assert_error(client.request(piece_request(COMPLETE_KEY, SIZE + 1, 0)), "not_found")
            assert fetch(client, complete_piece(1)) == pieces(COMPLETE)[1]

    # -- authentication and admission ------------------------------------------------------

    @pytest.mark.parametrize("answer", list(REFUSED_ANSWERS))
    def test_a_client_without_the_secret_is_refused(self, server: BlobServing,
                                                    answer: str) -> None:
        with Client(server.port) as client:
            reply = client.request(REFUSED_ANSWERS[answer](client.hello["nonce"]))
            assert_error(reply, "auth", "authentication failed")
            assert client.closed_by_server()

    def test_a_proof_for_another_nonce_is_refused(self, server: BlobServing) -> None:
        with Client(server.port) as first, Client(server.port) as second:
            assert first.hello["nonce"] != second.hello["nonce"]
            assert_error(second.request({"auth": auth_proof(SECRET, first.hello["nonce"])}),
                         "auth")
            assert first.prove() == {"ok": True}

    def test_silence_and_a_dripped_proof_are_cut_at_the_handshake_deadline(
            self, server: BlobServing) -> None:
        """A client that never answers the hello, and one sending the right proof a byte per
        0.1 s (8 s in all), both get ``auth`` once the handshake timeout ends, not the network
        timeout; a good client is served meanwhile."""
        with GoodClient(server.port) as good, Client(server.port) as idle, \
                Client(server.port, source="127.0.0.2") as slow:
            frame = encode_frame({"auth": auth_proof(SECRET, slow.hello["nonce"])})
            stop = threading.Event()

            def trickle() -> None:
                for i in range(len(frame)):
                    if stop.wait(0.1):
                        return
                    try:
                        slow.sock.sendall(frame[i:i + 1])
                    except OSError:
                        return  # cut off

            started = time.monotonic()
            trickler = threading.Thread(target=trickle, daemon=True)
            trickler.start()
            try:
                cut = {}
                for name, client in (("idle", idle), ("slow", slow)):
                    client.sock.settimeout(HANDSHAKE + 5)
                    cut[name] = client.read(), time.monotonic() - started
                    assert client.closed_by_server()
            finally:
                stop.set()
                trickler.join(5)
            served_during = good.served
        assert_error(cut["idle"][0], "auth", *server.handshake_timeout_words)
        assert_error(cut["slow"][0], "auth")
        for _, after in cut.values():
            assert HANDSHAKE - 0.2 <= after <= HANDSHAKE + 1.5, cut
        assert served_during >= 3, served_during

    def test_a_flood_of_silent_connections_does_not_lock_a_good_client_out(
            self, server: BlobServing) -> None:
        started = time.monotonic()
        flood = [Client(server.port, source="127.0.0.2") for _ in range(20)]
        try:
            # At most 8 per address wait in the handshake: the oldest go at once, without a
            # word, not when their handshake timeout ends.
            for dropped in flood[:12]:
                assert dropped.closed_by_server(within=1.0)
            assert time.monotonic() - started < HANDSHAKE - 0.1
            # The newest of the flood still wait for their answer, and get it.
            assert flood[-1].prove() == {"ok": True}
            flood[-1].close()
            with authenticated(server.port) as good:
                assert fetch(good, complete_piece(1)) == pieces(COMPLETE)[1]
        finally:
            for client in flood:
                client.close()

    def test_more_authenticated_connections_than_allowed_are_busy(
            self, server: BlobServing) -> None:
        held = [authenticated(server.port) for _ in range(server.max_connections)]
        try:
            with Client(server.port) as extra:
                assert_error(extra.prove(), "busy", "retry later")
                assert extra.closed_by_server()
            for client in held:  # every held connection is still served
                assert fetch(client, complete_piece(2)) == pieces(COMPLETE)[2]
        finally:
            for client in held[1:]:
                client.close()
        try:  # a slot freed is a slot given
            with authenticated(server.port) as client:
                assert fetch(client, complete_piece(3)) == pieces(COMPLETE)[3]
        finally:
            held[0].close()

    # -- framing ---------------------------------------------------------------------------

    @pytest.mark.parametrize("raw,words", [(raw, words) for _, raw, words in BROKEN_FRAMES],
                             ids=[vector for vector, _, _ in BROKEN_FRAMES])
    def test_a_broken_frame_gets_bad_request_and_the_connection_closes(
            self, server: BlobServing, raw: bytes, words: tuple[str, ...]) -> None:
        with authenticated(server.port) as client:
            client.sock.sendall(raw)
            assert_error(client.read(), "bad_request", *words)
            assert client.closed_by_server()

    def test_an_object_nested_deeper_than_32_is_a_broken_frame(
            self, server: BlobServing, request: pytest.FixtureRequest) -> None:
        expect_agreement(request, server, "deep-object")
        with authenticated(server.port) as client:
            client.sock.sendall(DEEP_OBJECT)
            assert_error(client.read(), "bad_request", "deeper than 32")
            assert client.closed_by_server(within=0.5)

    def test_an_oversized_answer_in_the_handshake_is_refused_unread(
            self, server: BlobServing, request: pytest.FixtureRequest) -> None:
        expect_agreement(request, server, "handshake-oversized")
        with Client(server.port) as client:
            client.sock.sendall(struct.pack(">I", 1025))  # the body never comes
            assert_error(client.read(), "bad_request", "exceeds the limit of 1024")
            assert client.closed_by_server(within=1.0)

    # -- request validation ----------------------------------------------------------------

    @pytest.mark.parametrize("request_,field", [(r, f) for _, r, f in bad_requests()],
                             ids=[vector for vector, _, _ in bad_requests()])
    def test_an_invalid_request_is_refused_and_the_connection_stays(
            self, server: BlobServing, request_: dict[str, Any], field: str) -> None:
        with authenticated(server.port) as client:
            assert_error(client.request(request_), "bad_request", field)
            assert fetch(client, complete_piece(3)) == pieces(COMPLETE)[3]

    # -- what is on disk -------------------------------------------------------------------

    def test_links_and_directories_under_a_blobs_name_are_not_served(
            self, server: BlobServing, tmp_path: Path) -> None:
        rng = random.Random(5)
        linked, as_directory = rng.randbytes(PIECE + 10), rng.randbytes(PIECE + 20)
        outside = tmp_path / "outside"
        outside.write_bytes(linked)
        linked_key, directory_key = server.put(linked), server.put(as_directory)
        server.path(linked_key).unlink()
        server.path(linked_key).symlink_to(outside)
        server.path(directory_key).unlink()
        server.path(directory_key).mkdir()
        (server.path(directory_key) / "inside").write_bytes(as_directory)
        with authenticated(server.port) as client:
            for key, data in ((linked_key, linked), (directory_key, as_directory)):
                for index in (0, 1):
                    assert_error(client.request(piece_request(key, len(data), index)),
                                 "not_found")
            assert fetch(client, complete_piece(0)) == pieces(COMPLETE)[0]
        assert outside.read_bytes() == linked, "a link's target is left alone"

    def test_a_blob_cut_short_while_it_is_sent_ends_the_connection_unpadded(
            self, server: BlobServing) -> None:
        """The file shrinks under a piece being sent (the client holds the server back by not
        reading): the client gets the bytes the file still has, then the end, never padding."""
        size, cut = 16 << 20, 12 << 20  # the server cannot be 12 MiB in: its send buffer is full
        data = random.Random(16).randbytes(size)
        key = server.put(data)
        with authenticated(server.port) as client:
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            header = client.request(piece_request(key, size, 0, piece_size=size))
            assert header.pop("index", 0) == 0
            assert header == {"ok": True, "offset": 0, "length": size}
            os.truncate(server.path(key), cut)
            got = bytearray()
            while chunk := client.sock.recv(1 << 20):
                got += chunk
        assert bytes(got) == data[:cut]
        words = server.cut_short_words(key, cut, size)
        deadline = time.monotonic() + 5
        while words not in server.logged():  # the JVM's log reaches its file a moment later
            assert time.monotonic() < deadline, f"no {words!r} in {server.logged()[-2000:]}"
            time.sleep(0.05)

    def test_a_client_that_stops_reading_is_cut_after_the_network_timeout(
            self, servers: tuple[BlobServing, BlobServing]) -> None:
        """A client that asks for a piece and never reads it is cut once a write has made no
        progress for the network timeout (0.5 s here), which frees the server's only
        authenticated slot for the next client; the cut piece is not counted as served."""
        server = servers[1]
        try:
            size = 16 << 20  # more than the server's send and the client's receive buffers
            data = random.Random(17).randbytes(size)
            key = server.put(data)
            request = piece_request(key, size, 0, piece_size=size)
            with authenticated(server.port) as stalled:
                stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                header = stalled.request(request)
                assert header.pop("index", 0) == 0
                assert header == {"ok": True, "offset": 0, "length": size}
                started = time.monotonic()
                # ... and reads no further. The slot is busy until the writer is cut.
                with authenticated(server.port) as good:
                    waited = time.monotonic() - started
                    assert fetch(good, request) == data
                assert 0.35 <= waited <= 4.0, waited
                # The stalled client gets what was on its way, never the whole piece.
                got = 0
                stalled.sock.settimeout(10)
                try:
                    while chunk := stalled.sock.recv(1 << 20):
                        got += len(chunk)
                except ConnectionResetError:
                    pass
                assert got < size, got
        finally:
            server.stop()
        assert server.bytes_served() == size


class TestPythonBlobServer(BlobServingSuite):
    server_class = PythonBlobServer


@pytest.mark.skipif(JavaPeerServer.unavailable(), reason="needs a JVM")
class TestJavaPeerServer(BlobServingSuite, JavaPeerServerOnly):
    """The suite, and what only the JVM's server does (``have``, have-files, the endpoint
    file, the peer key, the upload cap) on the same JVM."""

    server_class = JavaPeerServer
