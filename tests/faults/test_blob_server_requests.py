"""The blob server under bad, hostile and unlucky clients, over real sockets on loopback, as
the Python client and the driver's callbacks meet them: ``get``, the client's errors, its
retries and its ways of receiving a body.

Every test ends by showing that the server still serves a good client: one bad peer must never
cost anyone else. What the driver's server shares with the executors' JVM peer server (the
handshake and its timeout, admission, broken frames, invalid requests) is one suite for both:
tests/conformance/test_blob_serving.py.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import crc32c
import pytest

from spark_steward.blob import client as client_module
from spark_steward.blob.client import BlobClient
from spark_steward.blob.keys import BlobKey
from spark_steward.blob.protocol import encode_frame, exact_reader, new_nonce, read_frame
from spark_steward.blob.server import BlobServer, LocatedBlob
from spark_steward.errors import (AuthenticationFailed, BlobNotFound, BlobProtocolError,
                                  BlobServerUnavailable, ChecksumMismatch, ScopeError,
                                  StewardError)
from tests.faults import blob_wire

SECRET = "test-secret-4f1c"
SCOPE = "_app"


class Blobs:
    """What ``locate`` knows: (key, scope) -> LocatedBlob, plus every call it received."""

    def __init__(self) -> None:
        self.located: dict[tuple[str, str], tuple[Path, int, int]] = {}
        self.calls: list[tuple[str, str]] = []

    def add(self, path: Path, *, size: int | None = None, crc: int | None = None,
            key: str | None = None) -> BlobKey:
        data = path.read_bytes() if path.exists() else b""
        blob_key = BlobKey(key or hashlib.sha256(data).hexdigest())
        self.located[(blob_key.digest, SCOPE)] = (
            path, len(data) if size is None else size,
            crc32c.crc32c(data) if crc is None else crc)
        return blob_key

    def locate(self, key: BlobKey, scope: str) -> LocatedBlob:
        self.calls.append((key.digest, scope))
        try:
            path, size, crc = self.located[(key.digest, scope)]
        except KeyError:
            raise BlobNotFound(f"blob {key} of scope {scope} is not stored") from None
        try:
            return LocatedBlob(open(path, "rb"), size, crc)
        except FileNotFoundError:
            raise BlobNotFound(f"blob {key} of scope {scope} was deleted") from None


def on_message(op: str, request: dict[str, Any]) -> dict[str, Any]:
    if op == "echo":
        return {"echo": request.get("value")}
    if op == "boom":
        raise RuntimeError("secret internals /etc/steward")
    if op == "fail":
        raise ScopeError("scope 'etl.1' is already closed")
    raise BlobProtocolError(f"unknown op {op!r}")


@pytest.fixture
def blob_data(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom((3 << 20) + 12345)  # several chunks, and not a multiple of any
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    return path, data


@pytest.fixture
def blobs() -> Blobs:
    return Blobs()


@pytest.fixture
def make_server(blobs: Blobs) -> Iterator[Callable[..., tuple[BlobServer, tuple[str, int]]]]:
    servers: list[BlobServer] = []

    def make(**options: Any) -> tuple[BlobServer, tuple[str, int]]:
        server = BlobServer(host="127.0.0.1", port=0, secret=SECRET, locate=blobs.locate,
                            on_message=on_message, **{"timeout": 5.0, **options})
        servers.append(server)
        return server, server.start()

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def server(make_server: Callable[..., tuple[BlobServer, tuple[str, int]]]
           ) -> tuple[BlobServer, tuple[str, int]]:
    return make_server()


@pytest.fixture
def key(blobs: Blobs, blob_data: tuple[Path, bytes]) -> BlobKey:
    return blobs.add(blob_data[0])


RawConnection = functools.partial(blob_wire.RawConnection, secret=SECRET)


def fetch(client: BlobClient, key: BlobKey, chunk: int = 1 << 20) -> tuple[bytes, int]:
    out = io.BytesIO()
    received = client.fetch(key, SCOPE, out, chunk=chunk)
    assert received.size == len(out.getvalue())
    assert received.sha256 == hashlib.sha256(out.getvalue()).hexdigest()
    return out.getvalue(), received.crc32c


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture(params=[True, False], ids=["waitall", "polled"])
def receive_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both ways the client reads bodies: blocking MSG_WAITALL (Linux) and Python's timeouts."""
    if request.param and not client_module._WAITALL:
        pytest.skip("MSG_WAITALL receives are used on Linux only")
    monkeypatch.setattr(client_module, "_WAITALL", request.param)
    return bool(request.param)


def test_client_fetches_exact_bytes_and_crc_over_one_reused_connection(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey,
        blob_data: tuple[Path, bytes], receive_mode: bool) -> None:
    srv, (host, port) = server
    with BlobClient(host, port, SECRET) as client:
        for chunk in (1 << 20, 4096, 8 << 20):
            data, crc = fetch(client, key, chunk)
            assert data == blob_data[1]
            assert crc == crc32c.crc32c(blob_data[1])
        assert client.call("echo", value=[1, "two"]) == {"ok": True, "echo": [1, "two"]}
    wait_for(lambda: srv.stats.blobs_served == 3)  # counted after the last byte left
    stats = srv.stats
    assert (stats.connections_accepted, stats.blobs_served) == (1, 3)
    assert stats.bytes_served == 3 * len(blob_data[1])


def test_wrong_secret_is_refused_while_a_concurrent_good_client_is_served(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey, blob_data: tuple[Path, bytes],
        caplog: pytest.LogCaptureFixture) -> None:
    srv, (host, port) = server
    caplog.set_level(logging.WARNING, logger="spark_steward.blob.server")
    with BlobClient(host, port, SECRET) as good, BlobClient(host, port, "wrong") as bad:
        assert good.call("echo", value=1)["echo"] == 1
        with pytest.raises(AuthenticationFailed, match=f"{host}:{port}"):
            bad.call("echo", value=2)
        with pytest.raises(AuthenticationFailed):
            bad.fetch(key, SCOPE, io.BytesIO())
        assert fetch(good, key)[0] == blob_data[1]
    assert srv.stats.auth_failures == 2
    # The server counts a blob after its last byte left; the client may have read it first.
    wait_for(lambda: srv.stats.blobs_served == 1)
    # One warning per kind and 10 s: a storm of bad peers must not flood the driver's log.
    failures = [r.getMessage() for r in caplog.records if "authentication" in r.getMessage()]
    assert len(failures) == 1 and "127.0.0.1:" in failures[0]
    assert not any(SECRET in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("fields", [
    {"key": "../../etc/passwd", "scope": SCOPE},
    {"key": "A" * 64, "scope": SCOPE},
    {"key": "a" * 63, "scope": SCOPE},
    {"key": "a" * 64 + "/", "scope": SCOPE},
    {"key": 12345, "scope": SCOPE},
    {"scope": SCOPE},
    {"key": "a" * 64, "scope": "../x"},
    {"key": "a" * 64, "scope": "_app/../../x"},
    {"key": "a" * 64, "scope": ["_app"]},
    {"key": "a" * 64},
])
def test_bad_key_or_scope_is_a_bad_request_and_the_connection_stays_usable(
        server: tuple[BlobServer, tuple[str, int]], blobs: Blobs, key: BlobKey,
        blob_data: tuple[Path, bytes], fields: dict[str, Any]) -> None:
    srv, address = server
    conn = RawConnection(address)
    try:
        reply = conn.request({"op": "get", **fields})
        assert reply["error"] == "bad_request" and "not valid" in reply["message"]
        assert blobs.calls == []  # rejected before locate saw it
        header = conn.request({"op": "get", "key": key.digest, "scope": SCOPE})
        assert header == {"ok": True, "size": len(blob_data[1]),
                          "crc32c": crc32c.crc32c(blob_data[1])}
        assert conn.read_bytes(header["size"]) == blob_data[1]
        assert conn.request({"op": "echo", "value": "after"})["echo"] == "after"
    finally:
        conn.close()
    assert (srv.stats.bad_requests, srv.stats.connections_accepted) == (1, 1)


def test_truncated_frame_ends_that_connection_and_the_server_serves_the_next(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey,
        blob_data: tuple[Path, bytes]) -> None:
    srv, (host, port) = server
    for authenticate in (True, False):
        conn = RawConnection((host, port), authenticate=authenticate)
        conn.sock.sendall(b"\x00\x00")  # half a length prefix, then gone
        conn.close()
    wait_for(lambda: srv.stats.connections_open == 0)
    assert srv.stats.bad_requests == 1 and srv.stats.auth_failures == 1
    with BlobClient(host, port, SECRET) as client:
        assert fetch(client, key)[0] == blob_data[1]


def test_unknown_op_is_a_bad_request_on_a_connection_that_stays_open(
        server: tuple[BlobServer, tuple[str, int]]) -> None:
    srv, (host, port) = server
    with BlobClient(host, port, SECRET) as client:
        with pytest.raises(BlobProtocolError, match=r"bad_request.*unknown op 'frobnicate'"):
            client.call("frobnicate", value=1)
        assert client.call("echo", value=3)["echo"] == 3
    assert (srv.stats.bad_requests, srv.stats.connections_accepted) == (1, 1)


def test_callback_errors_reach_the_client_as_codes_without_internals(
        server: tuple[BlobServer, tuple[str, int]], caplog: pytest.LogCaptureFixture) -> None:
    srv, (host, port) = server
    with BlobClient(host, port, SECRET) as client:
        with pytest.raises(StewardError, match=r"\(failed\): scope 'etl.1' is already closed"):
            client.call("fail")
        with pytest.raises(StewardError, match=r"internal: RuntimeError") as info:
            client.call("boom")
        assert "/etc/steward" not in str(info.value) and "Traceback" not in str(info.value)
        assert client.call("echo", value=4)["echo"] == 4
    assert srv.stats.connections_accepted == 1
    logged = [r for r in caplog.records if r.exc_info and "boom" in r.getMessage()]
    assert len(logged) == 1


def test_missing_or_vanished_blob_raises_blob_not_found(
        server: tuple[BlobServer, tuple[str, int]], blobs: Blobs, key: BlobKey,
        tmp_path: Path) -> None:
    srv, (host, port) = server
    vanished = blobs.add(tmp_path / "gone.bin", size=10, crc=0, key="b" * 64)
    with BlobClient(host, port, SECRET) as client:
        with pytest.raises(BlobNotFound, match="c" * 64):
            client.fetch(BlobKey("c" * 64), SCOPE, io.BytesIO())
        with pytest.raises(BlobNotFound, match=f"blob {vanished} .*deleted"):
            client.fetch(vanished, SCOPE, io.BytesIO())
        with pytest.raises(BlobNotFound):
            client.fetch(key, "etl.1", io.BytesIO())
        assert client.call("echo", value=5)["echo"] == 5
    assert srv.stats.connections_accepted == 1


def test_connection_limit_refuses_one_more_as_busy_until_one_closes(
        make_server: Callable[..., tuple[BlobServer, tuple[str, int]]]) -> None:
    srv, (host, port) = make_server(max_connections=2)
    first, second = BlobClient(host, port, SECRET), BlobClient(host, port, SECRET)
    third = BlobClient(host, port, SECRET)
    try:
        assert first.call("echo", value=1)["ok"] and second.call("echo", value=2)["ok"]
        started = time.monotonic()
        with pytest.raises(BlobServerUnavailable, match="busy"):
            third.call("echo", value=3)
        # The client tried its handshake 5 times, pausing ~0.45 s in all, before giving up.
        assert srv.stats.connections_refused == 5
        assert 0.2 < time.monotonic() - started < 3
        first.close()
        wait_for(lambda: srv.stats.connections_open == 1)
        assert third.call("echo", value=3)["echo"] == 3
        assert second.call("echo", value=2)["echo"] == 2
    finally:
        for client in (first, second, third):
            client.close()


def test_client_reconnects_after_the_server_dropped_its_idle_connection(
        make_server: Callable[..., tuple[BlobServer, tuple[str, int]]]) -> None:
    srv, (host, port) = make_server(timeout=0.3)
    with BlobClient(host, port, SECRET) as client:
        assert client.call("echo", value=1)["ok"]
        wait_for(lambda: srv.stats.connections_open == 0)
        assert client.call("echo", value=2)["echo"] == 2
    assert srv.stats.connections_accepted == 2


def test_server_close_makes_clients_unavailable(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey) -> None:
    srv, (host, port) = server
    connected = BlobClient(host, port, SECRET)
    assert connected.call("echo", value=1)["ok"]
    srv.close()
    srv.close()  # idempotent
    assert srv.stats.connections_open == 0
    with pytest.raises(BlobServerUnavailable, match=f"{host}:{port}"):
        connected.fetch(key, SCOPE, io.BytesIO())
    with pytest.raises(BlobServerUnavailable, match=f"{host}:{port}"):
        BlobClient(host, port, SECRET).call("echo", value=2)
    connected.close()


def test_announced_crc_that_does_not_match_raises_checksum_mismatch(
        server: tuple[BlobServer, tuple[str, int]], blobs: Blobs, key: BlobKey,
        blob_data: tuple[Path, bytes]) -> None:
    srv, (host, port) = server
    real = crc32c.crc32c(blob_data[1])
    wrong = blobs.add(blob_data[0], crc=real ^ 1, key="d" * 64)
    with BlobClient(host, port, SECRET) as client:
        with pytest.raises(ChecksumMismatch, match=f"{wrong}.*{real:08x}.*{real ^ 1:08x}"):
            client.fetch(wrong, SCOPE, io.BytesIO())
        assert fetch(client, key)[0] == blob_data[1]
    assert srv.stats.connections_accepted == 1


def test_file_shorter_than_announced_is_reported_as_a_truncated_blob(
        server: tuple[BlobServer, tuple[str, int]], blobs: Blobs, key: BlobKey,
        blob_data: tuple[Path, bytes]) -> None:
    srv, (host, port) = server
    short = blobs.add(blob_data[0], size=len(blob_data[1]) + 100, key="e" * 64)
    with BlobClient(host, port, SECRET) as client:
        with pytest.raises(BlobProtocolError, match=f"truncated blob {short}"):
            client.fetch(short, SCOPE, io.BytesIO())
        assert fetch(client, key)[0] == blob_data[1]  # on a fresh connection
    assert srv.stats.connections_accepted == 2


@pytest.mark.parametrize("into", ["memory", "file"])
def test_stalled_transfer_times_out_as_server_unavailable(receive_mode: bool, into: str,
                                                          tmp_path: Path) -> None:
    """Also into a real file, where the 10 bytes wait in the splice pipe when the stall
    begins: they are drained, and the wait that follows still times out."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def stall_mid_body() -> None:  # a server that announces 1000 bytes and sends 10
        conn, _ = listener.accept()
        with conn:
            recv_exactly = exact_reader(conn.recv_into)
            conn.sendall(encode_frame({"protocol": 1, "nonce": new_nonce()}))
            read_frame(recv_exactly, 1024)
            conn.sendall(encode_frame({"ok": True}))
            read_frame(recv_exactly, 1024)
            conn.sendall(encode_frame({"ok": True, "size": 1000, "crc32c": 0}) + b"x" * 10)
            stop.wait(10)

    thread = threading.Thread(target=stall_mid_body)
    thread.start()
    started = time.monotonic()
    try:
        host, port = listener.getsockname()[:2]
        with BlobClient(host, port, SECRET, timeout=0.3) as client:
            with pytest.raises(BlobServerUnavailable, match="timed out|no data for 0.3s"), \
                    (open(tmp_path / "out", "wb") if into == "file" else io.BytesIO()) as out:
                client.fetch(BlobKey("a" * 64), SCOPE, out)
    finally:
        stop.set()
        thread.join(10)
        listener.close()
    assert time.monotonic() - started < 3


class FailingOutput(io.BytesIO):
    """A file that fills up after ``limit`` bytes, like a full disk."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.limit:
            raise OSError(28, "No space left on device")
        return super().write(data)


@pytest.mark.parametrize("chunk", [1 << 20, 8 << 20])  # fails in the 2nd chunk, in the 1st
def test_failing_output_raises_its_own_error_and_the_client_recovers(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey, blob_data: tuple[Path, bytes],
        chunk: int) -> None:
    srv, (host, port) = server
    with BlobClient(host, port, SECRET) as client:
        with pytest.raises(OSError, match="No space left") as info:
            client.fetch(key, SCOPE, FailingOutput(1 << 20), chunk=chunk)
        assert not isinstance(info.value, StewardError)
        assert fetch(client, key)[0] == blob_data[1]
    assert srv.stats.connections_accepted == 2  # the half-read stream was not reused


def test_good_client_is_served_during_a_storm_of_bad_requests(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey,
        blob_data: tuple[Path, bytes]) -> None:
    srv, address = server
    stop = threading.Event()
    storm_errors: list[BaseException] = []
    sent = [0, 0]  # bad connections per storm thread

    def storm(index: int) -> None:
        garbage = [os.urandom(64), b"\x00\x00\x00\x05[1,2]", b"\xff\xff\xff\xff",
                   encode_frame({"op": "get", "key": "../../etc/passwd", "scope": "../x"})]
        try:
            n = 0
            while not stop.is_set():
                n += 1
                conn = RawConnection(address, authenticate=n % 2 == 0)
                try:
                    conn.sock.sendall(garbage[n % len(garbage)])
                except OSError:
                    pass  # the server may hang up first: that is its right
                conn.close()
                sent[index] += 1
        except BaseException as e:  # surface in the main thread
            storm_errors.append(e)

    stormers = [threading.Thread(target=storm, args=(i,)) for i in range(2)]
    for thread in stormers:
        thread.start()
    try:
        with BlobClient(*address, SECRET) as client:
            fetches, deadline = 0, time.monotonic() + 5
            while fetches < 5 or (sum(sent) < 40 and time.monotonic() < deadline):
                data, crc = fetch(client, key)
                assert data == blob_data[1] and crc == crc32c.crc32c(blob_data[1])
                fetches += 1
    finally:
        stop.set()
        for thread in stormers:
            thread.join(10)
    assert not storm_errors
    assert sum(sent) >= 20
    wait_for(lambda: srv.stats.bad_requests + srv.stats.auth_failures == sum(sent))
    wait_for(lambda: srv.stats.blobs_served == fetches)  # counted after the last byte left


# -- the in-kernel path: bodies spliced straight into a real file ---------------------------------

def test_fetch_into_a_real_file_is_spliced_and_verified(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey, blob_data: tuple[Path, bytes],
        tmp_path: Path) -> None:
    _, (host, port) = server
    target = tmp_path / "out.bin"
    with BlobClient(host, port, SECRET) as client, open(target, "wb") as out:
        out.write(b"head")  # the body lands after what the file already holds
        crc, size, sha = client.fetch(key, SCOPE, out)
        out.write(b"tail")
    assert (size, crc) == (len(blob_data[1]), crc32c.crc32c(blob_data[1]))
    assert sha == hashlib.sha256(blob_data[1]).hexdigest() == key.digest
    assert target.read_bytes() == b"head" + blob_data[1] + b"tail"


def test_spliced_fetch_detects_a_wrong_crc_and_a_short_body(
        server: tuple[BlobServer, tuple[str, int]], blobs: Blobs, key: BlobKey,
        blob_data: tuple[Path, bytes], tmp_path: Path) -> None:
    _, (host, port) = server
    real = crc32c.crc32c(blob_data[1])
    wrong = blobs.add(blob_data[0], crc=real ^ 1, key="d" * 64)
    short = blobs.add(blob_data[0], size=len(blob_data[1]) + 100, key="e" * 64)
    with BlobClient(host, port, SECRET) as client:
        with open(tmp_path / "a", "wb") as out, pytest.raises(ChecksumMismatch, match=str(wrong)):
            client.fetch(wrong, SCOPE, out)
        with open(tmp_path / "b", "wb") as out, \
                pytest.raises(BlobProtocolError, match=f"truncated blob {short}"):
            client.fetch(short, SCOPE, out)
        with open(tmp_path / "c", "wb") as out:
            assert client.fetch(key, SCOPE, out).crc32c == real
    assert (tmp_path / "c").read_bytes() == blob_data[1]


def test_fetch_into_an_append_mode_file_falls_back_and_appends(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey, blob_data: tuple[Path, bytes],
        tmp_path: Path) -> None:
    _, (host, port) = server
    target = tmp_path / "log.bin"
    target.write_bytes(b"head")
    with BlobClient(host, port, SECRET) as client, open(target, "ab") as out:
        assert client.fetch(key, SCOPE, out).size == len(blob_data[1])  # splice refuses O_APPEND
    assert target.read_bytes() == b"head" + blob_data[1]


class _RaggedSplice:
    """``os.splice`` whose socket reads return a few segments at a time, as a real network
    delivers them, and optionally refuse a non-blocking read the way a pipe out of slots
    does; it records every write into a file as ``(offset, length)`` and counts refusals,
    forced or the kernel's."""

    def __init__(self, real: Callable[..., int], *, pipe_full_every: int = 0) -> None:
        self.real = real
        self.pipe_full_every = pipe_full_every
        self.socket_reads = 0
        self.pipe_full = 0
        self.file_writes: list[tuple[int, int]] = []

    def __call__(self, src: int, dst: int, count: int, offset_src: int | None = None,
                 offset_dst: int | None = None, flags: int = 0) -> int:
        if offset_dst is not None:
            n = self.real(src, dst, count, offset_dst=offset_dst, flags=flags)
            self.file_writes.append((offset_dst, n))
            return n
        self.socket_reads += 1
        if self.pipe_full_every and flags and self.socket_reads % self.pipe_full_every == 0:
            self.pipe_full += 1
            raise BlockingIOError(11, "Resource temporarily unavailable")
        try:
            return self.real(src, dst, min(count, 77_777 + self.socket_reads % 5 * 1111),
                             flags=flags)
        except BlockingIOError:  # the kernel's own: partly filled pages used up the slots
            self.pipe_full += 1
            raise


@pytest.mark.parametrize("pipe_full_every", [0, 7], ids=["ragged", "ragged-pipe-full"])
def test_spliced_body_never_crosses_a_boundary_in_one_write(
        server: tuple[BlobServer, tuple[str, int]], key: BlobKey, blob_data: tuple[Path, bytes],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipe_full_every: int) -> None:
    """However the body arrives, it is gathered in the pipe and each write into the file ends
    at the latest on the file's next batch boundary (the page cache then holds it in large
    folios, which a later checksum through a mapping walks fast); a full pipe drains early
    and the next write ends on the boundary it missed. The bytes are exact either way."""
    _, (host, port) = server
    ragged = _RaggedSplice(os.splice, pipe_full_every=pipe_full_every)
    monkeypatch.setattr(os, "splice", ragged)
    boundary = client_module._BATCH
    target = tmp_path / "out.bin"
    with BlobClient(host, port, SECRET) as client, open(target, "wb") as out:
        out.write(b"x" * 1000)  # the body starts off a boundary
        assert client.fetch(key, SCOPE, out) == (crc32c.crc32c(blob_data[1]), len(blob_data[1]),
                                                  key.digest)
    assert target.read_bytes() == b"x" * 1000 + blob_data[1]
    writes = ragged.file_writes
    assert [o for o, _ in writes] == [1000 + sum(n for _, n in writes[:i])
                                      for i in range(len(writes))], "one contiguous run"
    crossing = [(o, n) for o, n in writes if o // boundary != (o + n - 1) // boundary]
    assert not crossing, f"writes across a boundary: {crossing[:3]}"
    regions = (1000 + len(blob_data[1]) - 1) // boundary + 1
    assert len(writes) <= regions + ragged.pipe_full, "reads gathered into batches"
    assert ragged.socket_reads > 2 * regions
