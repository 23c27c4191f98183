"""The executor JVM's peer blob server (jvm-shim PeerServer) through real sockets and files.

One JVM serves the whole module (``PeerServer.main``: max-connections 3, handshake timeout
1.5 s) from a host folder laid out as the Python side lays it out: complete blobs in
``blob-cache/<scope>/<key>``, downloads in progress as a temp file plus its ``.<key>.tmp-have``
flags. A second, short-lived JVM shows the endpoint file's life, the key that is not there yet
and the upload cap. Every client here is hand-driven with spark_steward.blob.protocol, so the
tests also pin the wire format the Python fetcher relies on.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import socket
import stat
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

import spark_steward
from spark_steward.blob.protocol import auth_proof, encode_frame
from tests.faults.blob_wire import RawConnection

SECRET = "5e" * 32
SCOPE = "_app"
PIECE = 65536
MAX_CONNECTIONS = 3
HANDSHAKE_MS = 1500
IDLE_MS = 10_000

COMPLETE = os.urandom(3 * PIECE + 3392)   # four pieces, the last one short
PARTIAL = os.urandom(4 * PIECE - 100)
COMPLETE_KEY = hashlib.sha256(COMPLETE).hexdigest()
PARTIAL_KEY = hashlib.sha256(PARTIAL).hexdigest()
MISSING_KEY = hashlib.sha256(b"nowhere").hexdigest()
TEMP_SUFFIX = "0123456789ab"

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM")


def _pieces(data: bytes) -> list[bytes]:
    return [data[i:i + PIECE] for i in range(0, len(data), PIECE)]


def _key(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def _write_partial(scope_dir: Path, key: str, data: bytes, flags: str,
                   suffix: str = TEMP_SUFFIX, header: str | None = None) -> Path:
    """A download in progress: the temp file (whole content: only the flags say what counts)
    and its have-file."""
    temp = scope_dir / f".{key}.tmp-{suffix}"
    temp.write_bytes(data)
    name = temp.name if header is None else header
    (scope_dir / f".{key}.tmp-have").write_bytes(f"{name}\n{flags}".encode("ascii"))
    return temp


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    app_dir: Path
    stderr: Path

    @property
    def scope_dir(self) -> Path:
        return self.app_dir / "blob-cache" / SCOPE

    def stop(self) -> int:
        """Closes stdin (the server's signal to stop) and returns its exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()


def _start(app_dir: Path, executor: str, *options: int) -> Server:
    """``PeerServer.main`` on loopback; returns once it printed its port."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    classpath = f"{spark_steward.jar_path()}{os.pathsep}{jars / '*'}"
    stderr = app_dir.parent / f"{executor}.stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            ["java", "-Dlog4j2.configurationFile=org/apache/spark/log4j2-defaults.properties",
             "-cp", classpath, "io.sparksteward.shim.blob.PeerServer", str(app_dir), "127.0.0.1",
             executor, *map(str, options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("port "):
        proc.kill()
        proc.wait()
        pytest.fail(f"the peer server did not start: {line!r}\n{stderr.read_text()[-3000:]}")
    return Server(proc, int(line.split()[1]), app_dir, stderr)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    app_dir = tmp_path_factory.mktemp("peer") / "app-1"
    (app_dir / "peers").mkdir(parents=True, mode=0o700)
    (app_dir / "peers" / "key").write_text(SECRET + "\n")
    scope_dir = app_dir / "blob-cache" / SCOPE
    scope_dir.mkdir(parents=True)
    (scope_dir / COMPLETE_KEY).write_bytes(COMPLETE)
    _write_partial(scope_dir, PARTIAL_KEY, PARTIAL, "1010")
    srv = _start(app_dir, "7", MAX_CONNECTIONS, 0, HANDSHAKE_MS, IDLE_MS)
    yield srv
    assert srv.stop() == 0


# -- a hand-driven client ----------------------------------------------------------------------

class Client(RawConnection):
    """One connection, not yet authenticated; ``hello`` is the server's first frame."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        super().__init__(("127.0.0.1", port), SECRET, source=source, authenticate=False)
        self.sock.settimeout(10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, obj: dict[str, Any]) -> None:
        self.sock.sendall(encode_frame(obj))

    def prove(self, secret: str = SECRET) -> dict[str, Any]:
        return self.request({"auth": auth_proof(secret, self.hello["nonce"])})

    def closed_by_server(self, within: float = 5.0) -> bool:
        """Whether the server ends the stream within ``within`` seconds."""
        self.sock.settimeout(within)
        return super().closed_by_server()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def authenticated(port: int, secret: str = SECRET) -> Client:
    """An authenticated connection. A ``busy`` answer is retried for a few seconds: the slots
    of the previous test's connections are freed when the server has seen them close."""
    deadline = time.monotonic() + 5
    while True:
        client = Client(port)
        answer = client.prove(secret)
        if answer == {"ok": True}:
            return client
        client.close()
        assert answer.get("error") == "busy" and time.monotonic() < deadline, answer
        time.sleep(0.05)


def have(key: Any, size: Any, scope: Any = SCOPE, piece_size: Any = PIECE) -> dict[str, Any]:
    """A have request; Any, since the tests also send what no client should."""
    return {"op": "have", "key": key, "scope": scope, "size": size, "piece_size": piece_size}


def piece(key: Any, size: Any, index: Any, scope: Any = SCOPE, piece_size: Any = PIECE
          ) -> dict[str, Any]:
    return {**have(key, size, scope, piece_size), "op": "piece", "index": index}


def fetch(client: Client, request: dict[str, Any]) -> bytes:
    """A piece's bytes; fails on anything but its exact header."""
    header = client.request(request)
    offset = request["index"] * request["piece_size"]
    length = min(request["piece_size"], request["size"] - offset)
    assert header == {"ok": True, "offset": offset, "length": length}
    return client.read_bytes(length)


def assert_error(reply: dict[str, Any], code: str, *words: str) -> None:
    assert reply.get("error") == code, reply
    message = reply.get("message")
    assert isinstance(message, str) and "\n" not in message and len(message) < 300, reply
    for word in words:
        assert word in message, reply


# -- serving -----------------------------------------------------------------------------------

def test_pieces_of_a_complete_blob_are_its_exact_bytes(server: Server) -> None:
    with authenticated(server.port) as client:
        assert client.hello["protocol"] == 1 and len(client.hello["nonce"]) == 64
        got = [fetch(client, piece(COMPLETE_KEY, len(COMPLETE), i)) for i in (3, 0, 2, 1)]
        assert [got[1], got[3], got[2], got[0]] == _pieces(COMPLETE)
        assert len(got[0]) == 3392
        assert client.request(have(COMPLETE_KEY, len(COMPLETE))) == {"ok": True,
                                                                     "complete": True}


def test_a_download_in_progress_serves_only_its_flagged_pieces(server: Server) -> None:
    parts = _pieces(PARTIAL)
    with authenticated(server.port) as client:
        assert client.request(have(PARTIAL_KEY, len(PARTIAL))) == {
            "ok": True, "complete": False, "have": "1010"}
        assert fetch(client, piece(PARTIAL_KEY, len(PARTIAL), 0)) == parts[0]
        assert fetch(client, piece(PARTIAL_KEY, len(PARTIAL), 2)) == parts[2]
        for index in (1, 3):
            assert_error(client.request(piece(PARTIAL_KEY, len(PARTIAL), index)), "not_found")
        # A flag flipped later is seen by the next request.
        have_file = server.scope_dir / f".{PARTIAL_KEY}.tmp-have"
        flags = have_file.read_bytes()
        try:
            have_file.write_bytes(flags[:-1] + b"1")
            assert fetch(client, piece(PARTIAL_KEY, len(PARTIAL), 3)) == parts[3]
        finally:
            have_file.write_bytes(flags)


def test_a_missing_blob_is_not_found_and_the_connection_stays(server: Server) -> None:
    with authenticated(server.port) as client:
        assert_error(client.request(have(MISSING_KEY, 1000)), "not_found")
        assert_error(client.request(piece(MISSING_KEY, 1000, 0)), "not_found")
        assert_error(client.request(piece(COMPLETE_KEY, len(COMPLETE), 0, scope="other.1")),
                     "not_found")
        # The complete blob under another size is not it (and nothing is in progress).
        assert_error(client.request(piece(COMPLETE_KEY, len(COMPLETE) + 1, 0)), "not_found")
        assert_error(client.request(have(COMPLETE_KEY, len(COMPLETE) - 1)), "not_found")
        assert fetch(client, piece(COMPLETE_KEY, len(COMPLETE), 1)) == _pieces(COMPLETE)[1]


# -- authentication and admission ----------------------------------------------------------------

def _off_by_one_digit(proof: str) -> str:
    return proof[:-1] + ("1" if proof[-1] == "0" else "0")


@pytest.mark.parametrize("answer", [
    lambda nonce: {"auth": auth_proof("6f" * 32, nonce)},   # another secret's proof
    lambda nonce: {"auth": _off_by_one_digit(auth_proof(SECRET, nonce))},
    lambda nonce: {"auth": auth_proof(SECRET, nonce).upper()},
    lambda nonce: {"auth": 12},
    lambda nonce: {"proof": auth_proof(SECRET, nonce)},
], ids=["other-secret", "one-digit-off", "upper-case", "number", "no-auth-field"])
def test_a_client_without_the_secret_is_refused(server: Server, answer: Any) -> None:
    with Client(server.port) as client:
        assert_error(client.request(answer(client.hello["nonce"])), "auth",
                     "authentication failed")
        assert client.closed_by_server()


def test_a_proof_for_another_nonce_is_refused(server: Server) -> None:
    with Client(server.port) as first, Client(server.port) as second:
        assert first.hello["nonce"] != second.hello["nonce"]
        assert_error(second.request({"auth": auth_proof(SECRET, first.hello["nonce"])}), "auth")
        assert first.prove() == {"ok": True}


def test_an_idle_unauthenticated_connection_is_closed_while_a_good_client_is_served(
        server: Server) -> None:
    with Client(server.port) as idle:
        started = time.monotonic()
        with authenticated(server.port) as good:
            assert fetch(good, piece(COMPLETE_KEY, len(COMPLETE), 0)) == _pieces(COMPLETE)[0]
        idle.sock.settimeout(HANDSHAKE_MS / 1000 + 5)
        assert_error(idle.read(), "auth", "no answer within 1500 ms")
        waited = time.monotonic() - started
        assert idle.closed_by_server()
        assert HANDSHAKE_MS / 1000 - 0.2 <= waited <= HANDSHAKE_MS / 1000 + 3


def test_a_flood_of_silent_connections_does_not_lock_a_good_client_out(server: Server
                                                                       ) -> None:
    started = time.monotonic()
    flood = [Client(server.port, source="127.0.0.2") for _ in range(20)]
    try:
        # At most 8 per address wait in the handshake: the oldest go at once, without a word,
        # not when their handshake timeout (1.5 s) ends.
        for dropped in flood[:12]:
            assert dropped.closed_by_server(within=1.0)
        assert time.monotonic() - started < HANDSHAKE_MS / 1000 - 0.1
        # The newest of the flood still wait for their answer, and get it.
        assert flood[-1].prove() == {"ok": True}
        flood[-1].close()
        with authenticated(server.port) as good:
            assert fetch(good, piece(COMPLETE_KEY, len(COMPLETE), 1)) == _pieces(COMPLETE)[1]
    finally:
        for client in flood:
            client.close()


def test_more_authenticated_connections_than_allowed_are_busy(server: Server) -> None:
    held = [authenticated(server.port) for _ in range(MAX_CONNECTIONS)]
    try:
        with Client(server.port) as extra:
            assert_error(extra.prove(), "busy", "retry later")
            assert extra.closed_by_server()
        # Every held connection is still served.
        for client in held:
            assert fetch(client, piece(COMPLETE_KEY, len(COMPLETE), 2)) == _pieces(COMPLETE)[2]
    finally:
        for client in held[1:]:
            client.close()
    # A slot freed is a slot given.
    try:
        with authenticated(server.port) as client:
            assert fetch(client, piece(COMPLETE_KEY, len(COMPLETE), 3)) == _pieces(COMPLETE)[3]
    finally:
        held[0].close()


# -- framing ------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,words", [
    (struct.pack(">I", 65537), "exceeds the limit of 65536"),
    (struct.pack(">I", 0xFFFFFFFF), "exceeds the limit"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds the limit"),
    (struct.pack(">I", 0), "empty frame"),
    (struct.pack(">I", 5) + b"hello", "not valid JSON"),
    (struct.pack(">I", 3) + b"[1]", "expected an object"),
    (struct.pack(">I", 4) + b"\xff\xfe{}", "not valid UTF-8"),
    (struct.pack(">I", 16) + b'{"op":"have"} xx', "not valid JSON"),
    (struct.pack(">I", 200) + b"[" * 100 + b"]" * 100, "deeper than"),
], ids=["65537", "4g", "http", "empty", "text", "array", "utf8", "trailing", "deep"])
def test_a_broken_frame_gets_bad_request_and_the_connection_closes(
        server: Server, raw: bytes, words: str) -> None:
    with authenticated(server.port) as client:
        client.sock.sendall(raw)
        assert_error(client.read(), "bad_request", words)
        assert client.closed_by_server()


def test_an_oversized_answer_in_the_handshake_is_refused_unread(server: Server) -> None:
    with Client(server.port) as client:
        client.sock.sendall(struct.pack(">I", 1025))  # the body never comes: nothing waits for it
        assert_error(client.read(), "bad_request", "exceeds the limit of 1024")
        assert client.closed_by_server(within=1.0)


# -- request validation -------------------------------------------------------------------------

SIZE = len(COMPLETE)
BAD_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("op-get", {**piece(COMPLETE_KEY, SIZE, 0), "op": "get"}, "op"),
    ("op-upper", {**have(COMPLETE_KEY, SIZE), "op": "HAVE"}, "op"),
    ("op-missing", {k: v for k, v in have(COMPLETE_KEY, SIZE).items() if k != "op"}, "op"),
    ("op-number", {**have(COMPLETE_KEY, SIZE), "op": 1}, "op"),
    ("key-traversal", piece("../x", SIZE, 0), "key"),
    ("key-traversal-64", piece("../" + COMPLETE_KEY[3:], SIZE, 0), "key"),
    ("key-absolute", piece("/etc/passwd", SIZE, 0), "key"),
    ("key-upper", piece(COMPLETE_KEY.upper(), SIZE, 0), "key"),
    ("key-63", piece(COMPLETE_KEY[:63], SIZE, 0), "key"),
    ("key-65", piece(COMPLETE_KEY + "0", SIZE, 0), "key"),
    ("key-number", piece(1, SIZE, 0), "key"),
    ("key-missing", {k: v for k, v in have(COMPLETE_KEY, SIZE).items() if k != "key"}, "key"),
    ("scope-traversal", piece(COMPLETE_KEY, SIZE, 0, scope="../x"), "scope"),
    ("scope-dots", piece(COMPLETE_KEY, SIZE, 0, scope=".."), "scope"),
    ("scope-absolute", piece(COMPLETE_KEY, SIZE, 0, scope="/tmp.1"), "scope"),
    ("scope-nested", piece(COMPLETE_KEY, SIZE, 0, scope="_app/../_app"), "scope"),
    ("scope-no-number", piece(COMPLETE_KEY, SIZE, 0, scope="job"), "scope"),
    ("scope-long-number", piece(COMPLETE_KEY, SIZE, 0, scope="job.1234567890"), "scope"),
    ("scope-dot-first", have(COMPLETE_KEY, SIZE, scope=".job.1"), "scope"),
    ("scope-empty", have(COMPLETE_KEY, SIZE, scope=""), "scope"),
    ("scope-number", have(COMPLETE_KEY, SIZE, scope=1), "scope"),
    ("size-string", have(COMPLETE_KEY, str(SIZE)), "size"),
    ("size-float", have(COMPLETE_KEY, float(SIZE)), "size"),
    ("size-bool", have(COMPLETE_KEY, True), "size"),
    ("size-zero", have(COMPLETE_KEY, 0), "size"),
    ("size-negative", have(COMPLETE_KEY, -1), "size"),
    ("size-huge", have(COMPLETE_KEY, (1 << 50) + 1), "size"),
    ("size-bigint", have(COMPLETE_KEY, 10 ** 30), "size"),
    ("size-null", have(COMPLETE_KEY, None), "size"),
    ("pieces-too-many", have(COMPLETE_KEY, 1 << 40), "pieces"),
    ("piece-size-small", have(COMPLETE_KEY, SIZE, piece_size=65535), "piece_size"),
    ("piece-size-huge", have(COMPLETE_KEY, SIZE, piece_size=(1 << 30) + 1), "piece_size"),
    ("piece-size-string", have(COMPLETE_KEY, SIZE, piece_size="65536"), "piece_size"),
    ("piece-size-float", have(COMPLETE_KEY, SIZE, piece_size=65536.5), "piece_size"),
    ("piece-size-bool", have(COMPLETE_KEY, SIZE, piece_size=False), "piece_size"),
    ("index-negative", piece(COMPLETE_KEY, SIZE, -1), "index"),
    ("index-past-end", piece(COMPLETE_KEY, SIZE, 4), "index"),
    ("index-huge", piece(COMPLETE_KEY, SIZE, 10 ** 20), "index"),
    ("index-string", piece(COMPLETE_KEY, SIZE, "0"), "index"),
    ("index-float", piece(COMPLETE_KEY, SIZE, 1.0), "index"),
    ("index-bool", piece(COMPLETE_KEY, SIZE, True), "index"),
    ("index-missing", {k: v for k, v in piece(COMPLETE_KEY, SIZE, 0).items() if k != "index"},
     "index"),
]


@pytest.mark.parametrize("request_,field", [(r, f) for _, r, f in BAD_REQUESTS],
                         ids=[name for name, _, _ in BAD_REQUESTS])
def test_an_invalid_request_is_refused_and_the_connection_stays(
        server: Server, request_: dict[str, Any], field: str) -> None:
    with authenticated(server.port) as client:
        assert_error(client.request(request_), "bad_request", field)
        assert fetch(client, piece(COMPLETE_KEY, SIZE, 3)) == _pieces(COMPLETE)[3]


# -- what is on disk ----------------------------------------------------------------------------

def _bad_have_file(scope_dir: Path, case: str) -> tuple[str, int]:
    """A download in progress whose have-file must not be believed; every piece it names is
    really there, so only the check of the have-file stands between a request and its bytes."""
    key, data = _key(case), PARTIAL
    other = _key(case + "-other")
    if case == "names-passwd":
        # blob-cache/_app/../../etc/passwd is <app dir>/etc/passwd: make it exist.
        target = scope_dir.parent.parent / "etc" / "passwd"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(data)
        _write_partial(scope_dir, key, data, "1111", header="../../etc/passwd")
    elif case == "names-other-key":
        _write_partial(scope_dir, other, data, "1111")
        _write_partial(scope_dir, key, b"", "1111", header=f".{other}.tmp-{TEMP_SUFFIX}")
    elif case == "names-upper-hex":
        _write_partial(scope_dir, key, data, "1111", suffix="0123456789AB")
    elif case == "names-absolute":
        temp = _write_partial(scope_dir, key, data, "1111")
        _write_partial(scope_dir, key, data, "1111", header=str(temp))
    elif case == "flags-short":
        _write_partial(scope_dir, key, data, "111")
    elif case == "flags-long":
        _write_partial(scope_dir, key, data, "11111")
    elif case == "flags-newline":
        _write_partial(scope_dir, key, data, "1111\n")
    elif case == "flags-other-chars":
        _write_partial(scope_dir, key, data, "11x1")
    elif case == "have-is-link":
        real = scope_dir.parent.parent / f"have-{case}"
        real.write_bytes(f".{key}.tmp-{TEMP_SUFFIX}\n1111".encode())
        (scope_dir / f".{key}.tmp-{TEMP_SUFFIX}").write_bytes(data)
        (scope_dir / f".{key}.tmp-have").symlink_to(real)
    elif case == "temp-is-link":
        real = scope_dir.parent.parent / f"temp-{case}"
        real.write_bytes(data)
        _write_partial(scope_dir, key, data, "1111").unlink()
        (scope_dir / f".{key}.tmp-{TEMP_SUFFIX}").symlink_to(real)
    elif case == "temp-short":
        _write_partial(scope_dir, key, data[:3 * PIECE], "1111")
    else:
        raise AssertionError(case)
    return key, len(data)


@pytest.mark.parametrize("case", [
    "names-passwd", "names-other-key", "names-upper-hex", "names-absolute", "flags-short",
    "flags-long", "flags-newline", "flags-other-chars", "have-is-link", "temp-is-link",
    "temp-short"])
def test_a_have_file_that_cannot_be_trusted_serves_nothing(server: Server, case: str) -> None:
    key, size = _bad_have_file(server.scope_dir, case)
    with authenticated(server.port) as client:
        if case != "temp-short":  # its have-file is fine: only the last piece is missing
            assert_error(client.request(have(key, size)), "not_found")
        for index in range(4):
            if case == "temp-short" and index < 3:
                assert fetch(client, piece(key, size, index)) == _pieces(PARTIAL)[index]
            else:
                assert_error(client.request(piece(key, size, index)), "not_found")


def test_links_in_place_of_a_blob_or_its_scope_are_not_followed(server: Server) -> None:
    outside = server.app_dir.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / COMPLETE_KEY).write_bytes(COMPLETE)
    linked_key = _key("linked-blob")
    (outside / linked_key).write_bytes(COMPLETE)
    (server.scope_dir / linked_key).symlink_to(outside / linked_key)
    (server.scope_dir.parent / "linked.1").symlink_to(outside, target_is_directory=True)
    with authenticated(server.port) as client:
        for scope, key in ((SCOPE, linked_key), ("linked.1", COMPLETE_KEY)):
            assert_error(client.request(have(key, SIZE, scope=scope)), "not_found")
            assert_error(client.request(piece(key, SIZE, 0, scope=scope)), "not_found")
        # Not a blob: a directory under the key's name.
        dir_key = _key("a-directory")
        (server.scope_dir / dir_key).mkdir()
        assert_error(client.request(piece(dir_key, SIZE, 0)), "not_found")


def test_a_blob_cut_short_while_it_is_sent_ends_the_connection_unpadded(server: Server) -> None:
    """The file shrinks under a piece being sent (the client holds the server back by not
    reading): the client gets the bytes the file still has, then the end, never padding."""
    size, cut = 16 << 20, 12 << 20  # the server cannot be 12 MiB in: its send buffer is full
    data = os.urandom(size)
    key = hashlib.sha256(data).hexdigest()
    path = server.scope_dir / key
    path.write_bytes(data)
    with authenticated(server.port) as client:
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        assert client.request(piece(key, size, 0, piece_size=size)) == {
            "ok": True, "offset": 0, "length": size}
        os.truncate(path, cut)
        got = bytearray()
        while chunk := client.sock.recv(1 << 20):
            got += chunk
        assert bytes(got) == data[:cut]
    assert f"ended {cut} bytes into piece 0 of {size} announced" in server.stderr.read_text()


# -- the endpoint file, a key that is not there yet, the upload cap ----------------------------

def test_endpoint_file_key_not_ready_and_upload_cap(tmp_path: Path) -> None:
    app_dir = tmp_path / "app-2"
    rate = 512 << 10
    srv = _start(app_dir, "exec-1", 2, rate, 3000, 10_000)
    try:
        peers = app_dir / "peers"
        endpoint = peers / "exec-1.json"
        assert json.loads(endpoint.read_text()) == {"host": "127.0.0.1", "port": srv.port,
                                                    "executor": "exec-1"}
        assert stat.S_IMODE(endpoint.stat().st_mode) == 0o600
        assert stat.S_IMODE(peers.stat().st_mode) == 0o700
        assert sorted(p.name for p in peers.iterdir()) == ["exec-1.json"]  # no temp left
        with Client(srv.port) as client:
            assert_error(client.prove(), "auth", "not ready")
            assert client.closed_by_server()
        (peers / "key").write_text(SECRET)  # no newline this time
        big_piece = 128 << 10
        data = os.urandom(4 * big_piece)
        key = hashlib.sha256(data).hexdigest()
        scope_dir = app_dir / "blob-cache" / "job.3"
        scope_dir.mkdir(parents=True)
        (scope_dir / key).write_bytes(data)
        with authenticated(srv.port) as client:
            started = time.monotonic()
            got = b"".join(fetch(client, piece(key, len(data), i, scope="job.3",
                                               piece_size=big_piece)) for i in range(4))
            elapsed = time.monotonic() - started
        assert got == data
        assert elapsed >= 0.8 * len(data) / rate, elapsed  # 512 KiB at 512 KiB/s
    finally:
        code = srv.stop()
    assert code == 0
    assert not endpoint.exists()
    log = srv.stderr.read_text()
    assert "served 4 pieces (524288 bytes); 1 failed authentications" in log, log[-2000:]


def test_a_client_that_stops_reading_is_cut_after_the_network_timeout(tmp_path: Path) -> None:
    """The stalled-write watchdog: a client that asks for a piece and never reads it is cut
    once one write has made no progress for the network timeout (1 s here), which frees the
    server's only authenticated slot for the next client; the cut piece is not counted."""
    app_dir = tmp_path / "app-3"
    (app_dir / "peers").mkdir(parents=True, mode=0o700)
    (app_dir / "peers" / "key").write_text(SECRET)
    size = 16 << 20  # more than the server's send and the client's receive buffers hold
    data = os.urandom(size)
    key = hashlib.sha256(data).hexdigest()
    scope_dir = app_dir / "blob-cache" / SCOPE
    scope_dir.mkdir(parents=True)
    (scope_dir / key).write_bytes(data)
    request = piece(key, size, 0, piece_size=size)
    srv = _start(app_dir, "exec-3", 1, 0, 3000, 1000)
    try:
        with authenticated(srv.port) as stalled:
            stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            assert stalled.request(request) == {"ok": True, "offset": 0, "length": size}
            started = time.monotonic()
            # ... and reads no further. The slot is busy until the watchdog cuts the writer.
            with authenticated(srv.port) as good:
                waited = time.monotonic() - started
                assert fetch(good, request) == data
            assert 0.7 <= waited <= 4.5, waited
            # The stalled client gets what was on its way, never the whole piece, then the end.
            got = 0
            stalled.sock.settimeout(10)
            try:
                while chunk := stalled.sock.recv(1 << 20):
                    got += len(chunk)
            except ConnectionResetError:
                pass
            assert got < size, got
    finally:
        code = srv.stop()
    assert code == 0
    log = srv.stderr.read_text()
    assert f"served 1 pieces ({size} bytes)" in log, log[-2000:]
