"""The two blob servers behind one small interface, and a hand-driven client for both.

- :class:`PythonBlobServer`: the driver's ``BlobServer`` in this process, serving the real
  ``BlobDepot`` (its local store, no HA store) as the driver does.
- :class:`JavaPeerServer`: the executor JVM's peer server, started standalone through its
  ``main`` (``PeerServer <appDir> <host> <executor> [max] [rate] [handshake ms] [idle ms]``)
  from a host folder laid out as the Python side lays it out
  (``blob-cache/<scope>/<key>``, the peer key in ``peers/key``).

A vector blob is put once with :meth:`BlobServing.put`; :meth:`BlobServing.path` is the file it
is served from, for tests that cut, link or replace it.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import pytest

from spark_steward.blob.depot import BlobDepot
from spark_steward.blob.keys import BlobKey
from spark_steward.blob.protocol import auth_proof, encode_frame
from spark_steward.blob.server import BlobServer
from spark_steward.blob.stores import LocalBlobStore
from tests.conformance import java_names
from tests.conformance.jvm import JAVA_OPTIONS, classpath, read_line
from tests.conformance.vectors.blob_wire import PIECE, SCOPE, SECRET
from tests.faults.blob_wire import RawConnection


class BlobServing(ABC):
    """A running blob server of one runtime, with the limits the suite starts it with."""

    #: The runtime, as in test ids and KNOWN_DISAGREEMENTS.
    runtime: ClassVar[str]
    #: Words of the ``auth`` reply to a client that sent no proof within the handshake timeout.
    handshake_timeout_words: ClassVar[tuple[str, ...]]

    def __init__(self, root: Path, *, max_connections: int, handshake_timeout: float,
                 network_timeout: float) -> None:
        """Starts the server with its files under ``root``; seconds for the timeouts."""
        self.max_connections = max_connections
        self.handshake_timeout = handshake_timeout
        self.network_timeout = network_timeout

    @property
    @abstractmethod
    def port(self) -> int:
        """The port it listens on (127.0.0.1)."""

    @abstractmethod
    def put(self, data: bytes) -> str:
        """Stores ``data`` as a complete blob of the application scope; returns its key."""

    @abstractmethod
    def path(self, key: str) -> Path:
        """The file the blob ``key`` is served from."""

    @abstractmethod
    def logged(self) -> str:
        """What the server logged so far."""

    @abstractmethod
    def cut_short_words(self, key: str, sent: int, length: int) -> str:
        """What the server logs when the file of ``key`` ended ``sent`` bytes into piece 0 of
        ``length`` bytes (each runtime in its own words)."""

    @abstractmethod
    def stop(self) -> None:
        """Stops the server (cleanly: a failure to stop fails the test)."""

    @abstractmethod
    def bytes_served(self) -> int:
        """Bytes of the pieces served whole, once the server stopped."""

    @classmethod
    def unavailable(cls) -> bool:
        """Whether this runtime cannot run here."""
        return False


class PythonBlobServer(BlobServing):
    runtime = "python"
    handshake_timeout_words = ("authentication failed",)

    def __init__(self, root: Path, *, max_connections: int, handshake_timeout: float,
                 network_timeout: float) -> None:
        super().__init__(root, max_connections=max_connections,
                         handshake_timeout=handshake_timeout, network_timeout=network_timeout)
        self.depot = BlobDepot(LocalBlobStore(root / "local"), None)
        self.server = BlobServer(host="127.0.0.1", port=0, secret=SECRET,
                                 locate=self.depot.locate, on_message=self.depot.handle_message,
                                 max_connections=max_connections, timeout=network_timeout,
                                 handshake_timeout=handshake_timeout)
        self._records: list[str] = []
        self._handler = _Collect(self._records)
        logging.getLogger("spark_steward.blob.server").addHandler(self._handler)
        _, self._port = self.server.start()

    @property
    def port(self) -> int:
        return self._port

    def put(self, data: bytes) -> str:
        return self.depot.put_bytes(data).key.digest

    def path(self, key: str) -> Path:
        return self.depot.local.path(SCOPE, BlobKey(key))

    def logged(self) -> str:
        return "\n".join(self._records)

    def cut_short_words(self, key: str, sent: int, length: int) -> str:
        return f"blob {key} of scope {SCOPE} ended before piece 0; closing the connection"

    def stop(self) -> None:
        self.server.close()  # idempotent
        logging.getLogger("spark_steward.blob.server").removeHandler(self._handler)

    def bytes_served(self) -> int:
        return self.server.stats.bytes_served


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


class JavaPeerServer(BlobServing):
    runtime = "java"
    handshake_timeout_words = ("authentication failed", "no answer within")

    def __init__(self, root: Path, *, max_connections: int, handshake_timeout: float,
                 network_timeout: float, rate: int = 0, key: str | None = SECRET,
                 executor: str = "exec-1") -> None:
        """``rate``: the upload cap (bytes per second, 0: none); ``key``: the peer key Python
        wrote before the server starts (None: not yet)."""
        super().__init__(root, max_connections=max_connections,
                         handshake_timeout=handshake_timeout, network_timeout=network_timeout)
        self.app_dir = root / "app-1"
        if key is not None:
            (self.app_dir / "peers").mkdir(parents=True, mode=0o700)
            (self.app_dir / "peers" / "key").write_text(key + "\n")
        self.scope_dir = self.app_dir / "blob-cache" / SCOPE
        self.scope_dir.mkdir(parents=True)
        self.stderr = root / "peer-server.stderr"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                ["java", *JAVA_OPTIONS, "-cp", classpath(), java_names.PEER_SERVER,
                 str(self.app_dir), "127.0.0.1", executor, str(max_connections), str(rate),
                 str(round(handshake_timeout * 1000)), str(round(network_timeout * 1000))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self._port = 0

    @property
    def port(self) -> int:
        """Waits for the port the server prints once it listens: a JVM started here may start
        while another is (the suite starts its servers together)."""
        if not self._port:
            assert self.proc.stdout is not None
            try:
                line = read_line(self.proc.stdout, 60, "the peer server's start")
            except AssertionError:
                line = ""
            if not line.startswith("port "):
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"the peer server did not start: {line!r}\n{self.logged()[-3000:]}")
            self._port = int(line.split()[1])
        return self._port

    def put(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        self.path(key).write_bytes(data)
        return key

    def path(self, key: str) -> Path:
        return self.scope_dir / key

    def logged(self) -> str:
        return self.stderr.read_text()

    def cut_short_words(self, key: str, sent: int, length: int) -> str:
        return f"blob {SCOPE}/{key} ended {sent} bytes into piece 0 of {length} announced"

    def stop(self) -> None:
        """Closes stdin (the server's signal to stop); it must exit 0. Idempotent."""
        if self.proc.returncode is not None:
            return
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        assert code == 0, self.logged()[-2000:]

    def bytes_served(self) -> int:
        found = re.search(r"served (\d+) pieces \((\d+) bytes\)", self.logged())
        assert found is not None, self.logged()[-2000:]
        return int(found.group(2))

    @classmethod
    def unavailable(cls) -> bool:
        return shutil.which("java") is None


# -- a hand-driven client --------------------------------------------------------------------


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


def authenticated(port: int) -> Client:
    """An authenticated connection. A ``busy`` answer is retried for a few seconds: the slots
    of the previous test's connections are freed when the server has seen them close."""
    deadline = time.monotonic() + 5
    while True:
        client = Client(port)
        answer = client.prove()
        if answer == {"ok": True}:
            return client
        client.close()
        assert answer.get("error") == "busy" and time.monotonic() < deadline, answer
        time.sleep(0.05)


def fetch(client: Client, request: dict[str, Any]) -> bytes:
    """A piece's bytes; fails on anything but its header (offset and length; the index too,
    when the server names it)."""
    header = client.request(request)
    offset = request["index"] * request["piece_size"]
    length = min(request["piece_size"], request["size"] - offset)
    assert header.pop("index", request["index"]) == request["index"], header
    assert header == {"ok": True, "offset": offset, "length": length}
    return client.read_bytes(length)


def assert_error(reply: dict[str, Any], code: str, *words: str) -> None:
    """``reply`` is the error ``code`` with a one-line message holding ``words``."""
    assert reply.get("error") == code, reply
    message = reply.get("message")
    assert isinstance(message, str) and "\n" not in message and len(message) < 300, reply
    assert "Traceback" not in message, reply
    for word in words:
        assert word in message, reply

