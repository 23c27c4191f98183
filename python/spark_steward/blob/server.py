"""The driver's blob server: authenticated TCP, blobs streamed with ``sendfile``.

Executors fetch blobs from here when neither their host-local store nor the HA store has them.
Unlike Flink's BlobServer every connection first proves knowledge of the application's secret
(see :mod:`spark_steward.blob.protocol`), keys and scopes are validated before anything touches
a path, and clients get an error *code* and a one-line message, never a traceback or a
serialized exception.

Admission is split so that nobody without the secret can lock executors out: a new connection
has ``handshake_timeout`` (seconds, not the transfer timeout) to authenticate, connections still
in the handshake are bounded apart from authenticated ones, globally and per peer address, and
when either bound is reached the *oldest* unauthenticated connection is dropped to admit the new
one. An attacker's idle sockets therefore only ever push out each other (or, at worst, a good
client's handshake of a millisecond, which its retry repeats). A thread that cannot be started
refuses that one connection; the acceptor keeps serving.

Connection threads are bounded by construction, as the executors' peer server bounds them with a
fixed pool: authenticated ones, the handshakes, and as many again that were dropped or refused
and are still ending. Past that the acceptor waits for one to end and leaves new connections in
the kernel's accept queue, so a starved CPU slows the attacker's churn instead of piling up
threads.

Error codes in replies: ``auth``, ``busy`` (after the handshake, when ``max_connections``
authenticated connections are open), ``bad_request``, ``not_found``, ``failed`` (a StewardError
from the callbacks), ``internal`` (a bug; the traceback stays in the driver log).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import socket
import ssl
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, fields
from typing import Any, BinaryIO, Callable

from spark_steward.blob.keys import BlobKey, validate_scope_id
from spark_steward.blob.pieces import PieceRequest, parse_pick
from spark_steward.blob.protocol import (ERROR_AUTH, ERROR_BAD_REQUEST, ERROR_BUSY,
                                         ERROR_INTERNAL, ERROR_NOT_FOUND, OP_PIECE,
                                         PROTOCOL_VERSION, PeerClosed, encode_frame,
                                         exact_reader, new_nonce, proof_matches, read_frame)
from spark_steward.blob.errors import BlobNotFound, BlobProtocolError, InvalidBlobKey
from spark_steward.errors import StewardError

log = logging.getLogger(__name__)

_JOIN_SECONDS = 5.0      # close() waits at most this long for all threads together
_LINGER_SECONDS = 0.2    # after an error reply, let the client read it before the close
_AUTH_FRAME = 1024       # the auth answer is ~80 bytes: an unauthenticated peer gets no more
_LOG_EVERY = 10.0        # seconds between two warnings of one kind; the rest are counted
_TLS_CHUNK = 1 << 20     # bytes read and encrypted per send on a TLS connection
_START_RETRY = 0.05      # pause after a thread failed to start: the cause (pids, memory) lasts


@dataclass(frozen=True)
class LocatedBlob:
    """A blob ``locate`` found and verified: its open regular file (the server sends these
    very bytes and closes it, so nothing can be swapped in between) and the size and crc32c
    the client checks the transfer with."""

    file: BinaryIO
    size: int
    crc32c: int


@dataclass(frozen=True)
class BlobServerStats:
    """A snapshot of the server's counters."""

    connections_accepted: int = 0
    connections_refused: int = 0
    connections_dropped: int = 0    # unauthenticated, pushed out by newer ones
    connections_open: int = 0
    connections_unauthenticated: int = 0
    thread_start_failures: int = 0
    auth_failures: int = 0
    bad_requests: int = 0
    bytes_served: int = 0
    blobs_served: int = 0


class _ConnectionLost(Exception):
    """The socket failed while we wrote to it; nothing more can be said to this peer."""


class _Connection:
    """One accepted socket: frame IO with a deadline per frame, so a slow peer is bounded."""

    def __init__(self, sock: socket.socket, peer: str, timeout: float) -> None:
        self.sock = sock
        self.fileno = sock.fileno()  # kept when TLS wraps the socket (the fd moves with it)
        self.peer = peer
        self.address = peer.rsplit(":", 1)[0]  # per-peer bounds count hosts, not ports
        self.timeout = timeout
        self.dropped = False  # pushed out of the handshake by newer connections
        self._deadline = 0.0
        self._recv_exactly = exact_reader(self._recv_into)

    def _recv_into(self, view: memoryview) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete frame from {self.peer} within {self.timeout}s")
        self.sock.settimeout(remaining)
        return self.sock.recv_into(view)

    def read(self, max_bytes: int, within: float | None = None) -> dict[str, Any]:
        """The next frame; idle wait plus the whole frame must fit in ``within`` seconds
        (default ``timeout``)."""
        self._deadline = time.monotonic() + (self.timeout if within is None else within)
        return read_frame(self._recv_exactly, max_bytes)

    def send(self, reply: dict[str, Any], file: BinaryIO | None = None, count: int = 0,
             offset: int = 0) -> int:
        """Sends ``reply``, then ``count`` bytes of ``file`` from ``offset`` (zero copy);
        returns bytes of the file sent, fewer when it is shorter."""
        frame = encode_frame(reply)  # outside the try: an unencodable reply is a bug, not IO
        try:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(frame)
            if file is None or not count:
                return 0
            if isinstance(self.sock, ssl.SSLSocket):
                file.seek(offset)
                return self._send_encrypted(file, count)
            return self.sock.sendfile(file, offset, count)
        except OSError as e:
            raise _ConnectionLost(str(e)) from e

    def _send_encrypted(self, file: BinaryIO, count: int) -> int:
        """``sendfile`` through TLS: Python's fallback sends 8 KiB at a time; 1 MiB reads
        into one buffer cut the per-call cost (measured 1.3x on loopback)."""
        buffer = bytearray(min(count, _TLS_CHUNK))
        view = memoryview(buffer)
        sent = 0
        while sent < count:
            n = file.readinto(view[:min(count - sent, len(buffer))])  # type: ignore[attr-defined]
            if not n:
                break
            self.sock.sendall(view[:n])
            sent += n
        return sent

    def cut(self) -> None:
        """Wakes the thread that reads or writes this connection: an OS-level shutdown of
        its fd, touching no socket object or TLS state that thread owns. The caller holds the
        server lock and has seen the connection registered, so the fd is still this one's."""
        wake = socket.socket(fileno=self.fileno)
        try:
            wake.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            wake.detach()

    def linger_close(self) -> None:
        """Half-close, then drain briefly: closing with unread input would send a RST that can
        destroy the error reply before the client reads it."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(_LINGER_SECONDS)
            deadline = time.monotonic() + _LINGER_SECONDS
            while time.monotonic() < deadline and self.sock.recv(65536):
                pass
        except OSError:
            pass  # the peer is gone already: nothing left to protect


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": code, "message": message}


def _quietly(step: Callable[..., object], *args: Any) -> None:
    """A socket step whose OSError only means the socket is gone already."""
    try:
        step(*args)
    except OSError:
        pass




class _Throttle:
    """At most one warning of a kind per ``_LOG_EVERY`` seconds, with a count of the ones left
    out: a storm of bad connections must not become a storm in the driver's log."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def warn(self, kind: str, message: str, *args: Any, level: int = logging.WARNING) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -_LOG_EVERY) < _LOG_EVERY:
                self._held[kind] += 1
                return
            self._last[kind] = now
            held = self._held.pop(kind, 0)
        suffix = f" ({held} more like it since the last report)" if held else ""
        log.log(level, message + suffix, *args)


class BlobServer:
    """Serves blobs found by ``locate`` and hands every other op to ``on_message``.

    ``locate(key, scope)`` raises BlobNotFound; ``on_message(op, request)`` returns the reply's
    fields and raises BlobProtocolError for an op it does not know (-> ``bad_request``) or other
    StewardErrors (-> ``failed``); ``pick(key, scope, need)`` chooses the piece a ``pick``
    request gets (default: any of ``need``), None to have the client wait.
    """

    def __init__(self, *, host: str, port: int, secret: str,
                 locate: Callable[[BlobKey, str], LocatedBlob],
                 on_message: Callable[[str, dict[str, Any]], dict[str, Any]],
                 max_connections: int = 64, max_frame: int = 65536,
                 timeout: float = 60.0, handshake_timeout: float = 5.0,
                 max_unauthenticated: int = 64, max_unauthenticated_per_peer: int = 8,
                 tls: ssl.SSLContext | None = None,
                 pick: Callable[[BlobKey, str, frozenset[int]], int | None] | None = None
                 ) -> None:
        if not secret:
            raise ValueError("the blob server needs a non-empty secret")
        if host in ("", "0.0.0.0", "::"):
            raise ValueError(f"blob server host {host!r} would listen on every interface; "
                             "pass the driver's own address")
        self._host, self._port, self._secret = host, port, secret
        self._locate, self._on_message = locate, on_message
        self._pick = pick or (lambda key, scope, need: random.choice(sorted(need)))
        self._max_connections, self._max_frame = max_connections, max_frame
        self._timeout, self._handshake_timeout = timeout, handshake_timeout
        self._tls = tls
        self._max_pending, self._max_pending_per_peer = (max_unauthenticated,
                                                         max_unauthenticated_per_peer)
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # a connection thread ended
        self._max_threads = max_connections + 2 * max_unauthenticated
        self._counts = {f.name: 0 for f in fields(BlobServerStats)}
        self._live: dict[_Connection, threading.Thread] = {}
        # In the handshake, oldest first; and how many of them each peer address holds.
        self._pending: OrderedDict[_Connection, None] = OrderedDict()
        self._pending_per_peer: Counter[str] = Counter()
        self._authenticated = 0
        self._throttle = _Throttle()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._closed = False

    def start(self) -> tuple[str, int]:
        """Binds and starts accepting; returns the bound ``(host, port)``."""
        if self._listener is not None or self._closed:
            raise RuntimeError("a BlobServer starts once")
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self._host, self._port))
            listener.listen(socket.SOMAXCONN)
            listener.settimeout(1.0)  # shutdown() wakes accept() on Linux only
        except OSError:
            listener.close()
            raise
        self._listener = listener
        address = listener.getsockname()[:2]
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listener,),
                                          name="steward-blob-server", daemon=True)
        self._acceptor.start()
        log.info("blob server listening on %s:%d", address[0], address[1])
        return str(address[0]), int(address[1])

    def close(self) -> None:
        """Stops accepting, cuts every live connection and waits (bounded) for the threads.
        Never raises: the application's cleanup runs after it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._room.notify_all()  # an acceptor waiting for room gives up
            listener, live = self._listener, dict(self._live)
            # shutdown, not close: the owning thread may sit in recv on this fd; shutdown
            # wakes it and it closes its own socket, so no fd is closed under a thread.
            for conn in live:
                conn.cut()
        if listener is not None:
            _quietly(listener.shutdown, socket.SHUT_RDWR)
            _quietly(listener.close)
        deadline = time.monotonic() + _JOIN_SECONDS
        for thread in [self._acceptor, *live.values()]:
            # Only started threads are registered, but a join must never be what fails here.
            if thread is None or thread is threading.current_thread() or thread.ident is None:
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("blob server thread %s still runs %.0fs after close()",
                            thread.name, _JOIN_SECONDS)
        log.info("blob server closed")

    @property
    def stats(self) -> BlobServerStats:
        """A snapshot of the server's counters and open connections, for metrics."""
        with self._lock:
            return BlobServerStats(**{**self._counts, "connections_open": len(self._live),
                                      "connections_unauthenticated": len(self._pending)})

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, addr = listener.accept()
            except OSError as e:
                if self._closed:
                    return
                if isinstance(e, TimeoutError):
                    continue
                self._throttle.warn("accept", "blob server accept failed (%s); retrying", e)
                time.sleep(0.05)  # EMFILE and friends last a while: do not spin
                continue
            try:
                self._admit(sock, f"{addr[0]}:{addr[1]}")
            except Exception:  # a bug: this connection is lost, the acceptor must not be
                log.exception("blob server could not admit a connection from %s", addr[0])
                _quietly(sock.close)

    def _admit(self, sock: socket.socket, peer: str) -> None:
        """Registers ``sock`` as unauthenticated (pushing out the oldest such connection of
        its peer, or of all, when a bound is reached) and starts its thread."""
        _quietly(sock.setsockopt, socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(sock, peer, self._timeout)
        thread = threading.Thread(target=self._serve, args=(conn,), name="steward-blob-conn",
                                  daemon=True)
        dropped: list[_Connection] = []
        with self._lock:  # started under the lock: close() never sees an unstarted thread
            if self._pending_per_peer[conn.address] >= self._max_pending_per_peer:
                dropped.append(self._drop_pending(
                    next(c for c in self._pending if c.address == conn.address)))
            if len(self._pending) >= self._max_pending:
                dropped.append(self._drop_pending(next(iter(self._pending))))
            while len(self._live) >= self._max_threads and not self._closed:
                self._room.wait(_JOIN_SECONDS)  # dropped and refused threads are ending
            if self._closed:
                _quietly(sock.close)
                return
            self._pending[conn] = None
            self._pending_per_peer[conn.address] += 1
            self._live[conn] = thread
            try:
                thread.start()
                self._counts["connections_accepted"] += 1
                started = True
            except RuntimeError as e:  # can't start new thread: pids limit, memory
                self._unregister(conn)
                self._counts["thread_start_failures"] += 1
                self._counts["connections_refused"] += 1
                started, failure = False, e
        if dropped:
            self._throttle.warn("dropped", "blob server dropped %d connection(s) still in the "
                                "handshake to admit %s (max-unauthenticated %d, per peer %d)",
                                len(dropped), peer, self._max_pending,
                                self._max_pending_per_peer)
        if not started:
            self._throttle.warn("thread", "blob server refused a connection from %s: no thread "
                                "could be started for it (%s); still serving the others", peer,
                                failure, level=logging.ERROR)
            _quietly(sock.close)
            time.sleep(_START_RETRY)

    def _drop_pending(self, conn: _Connection) -> _Connection:
        """Marks an unauthenticated connection dropped; the caller holds the lock."""
        conn.dropped = True
        conn.cut()  # its thread ends and unregisters it
        self._leave_pending(conn)
        self._counts["connections_dropped"] += 1
        return conn

    def _leave_pending(self, conn: _Connection) -> None:
        """Stops counting ``conn`` as in the handshake; the caller holds the lock."""
        if self._pending.pop(conn, False) is None:  # it was there
            self._pending_per_peer[conn.address] -= 1
            if not self._pending_per_peer[conn.address]:
                del self._pending_per_peer[conn.address]

    def _unregister(self, conn: _Connection) -> None:
        """Forgets ``conn`` wherever it is counted; the caller holds the lock."""
        self._leave_pending(conn)
        self._live.pop(conn, None)

    def _authenticated_slot(self, conn: _Connection) -> bool:
        """Moves ``conn`` from the handshake to the authenticated connections, if one is free."""
        with self._lock:
            if conn.dropped or conn not in self._pending:
                return False
            self._leave_pending(conn)
            if self._authenticated >= self._max_connections:
                self._counts["connections_refused"] += 1
                return False
            self._authenticated += 1
            return True

    def _serve(self, conn: _Connection) -> None:
        authenticated = False
        try:
            if self._handshake(conn):
                authenticated = True
                while not self._closed and self._serve_one(conn):
                    pass
        except _ConnectionLost as e:
            log.debug("blob connection from %s lost: %s", conn.peer, e)
        except Exception:  # a bug: log it once, keep the server up
            log.exception("blob connection from %s failed unexpectedly", conn.peer)
        finally:
            with self._lock:
                self._unregister(conn)
                if authenticated:
                    self._authenticated -= 1
                self._room.notify()
            _quietly(conn.sock.close)

    def _handshake(self, conn: _Connection) -> bool:
        """TLS when configured, challenge, proof, then a free authenticated slot; all within
        the handshake deadline."""
        if self._tls is not None and not self._start_tls(conn):
            return False
        nonce = new_nonce()
        conn.send({"protocol": PROTOCOL_VERSION, "nonce": nonce})
        try:
            proof, problem = (conn.read(_AUTH_FRAME, self._handshake_timeout).get("auth"),
                              "wrong proof")
        except (OSError, BlobProtocolError) as e:  # silence, garbage, timeout, hang-up
            proof, problem = None, str(e)
        if conn.dropped:
            log.debug("blob connection from %s dropped in the handshake", conn.peer)
            return False
        if not proof_matches(self._secret, nonce, proof):
            self._count("auth_failures")
            self._throttle.warn("auth", "blob connection from %s failed authentication: %s",
                                conn.peer, problem)
            conn.send(_error(ERROR_AUTH, "authentication failed: the client does not hold this "
                             "application's secret"))
            conn.linger_close()
            return False
        if not self._authenticated_slot(conn):
            if not conn.dropped:
                self._throttle.warn("busy", "blob server refused %s: %d authenticated "
                                    "connections open", conn.peer, self._max_connections)
                conn.send(_error(ERROR_BUSY, f"the blob server has {self._max_connections} "
                                 "connections open; retry later"))
                conn.linger_close()
            return False
        conn.send({"ok": True})
        return True

    def _start_tls(self, conn: _Connection) -> bool:
        """Wraps the connection in TLS (in this connection's thread, within the handshake
        deadline); False when the peer does not complete a TLS handshake."""
        try:
            conn.sock.settimeout(self._handshake_timeout)
            # The handshake runs apart from the wrap: a handshake that fails inside
            # wrap_socket closes the fd there, while the connection is still registered, and
            # close() could then shut down whatever socket reuses that fd number.
            conn.sock = self._tls.wrap_socket(  # type: ignore[union-attr]
                conn.sock, server_side=True, do_handshake_on_connect=False)
            conn.sock.do_handshake()  # type: ignore[attr-defined]
            return True
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            if not conn.dropped:
                self._count("auth_failures")
                self._throttle.warn("tls", "blob connection from %s failed the TLS handshake: "
                                    "%s", conn.peer, e)
            return False

    def _serve_one(self, conn: _Connection) -> bool:
        """Answers one request; False when the connection must end."""
        try:
            request = conn.read(self._max_frame)
        except PeerClosed:
            return False
        except OSError as e:  # idle timeout, reset, or close() cut us off
            log.debug("blob connection from %s ended: %s", conn.peer, e)
            return False
        except BlobProtocolError as e:  # the framing is broken: answer if we can, then close
            self._bad_request(conn, e)
            conn.send(_error(ERROR_BAD_REQUEST, str(e)))
            conn.linger_close()
            return False
        try:
            return self._dispatch(conn, request)
        except _ConnectionLost:
            raise
        except (InvalidBlobKey, BlobProtocolError) as e:
            self._bad_request(conn, e)
            reply = _error(ERROR_BAD_REQUEST, str(e))
        except BlobNotFound as e:
            reply = _error(ERROR_NOT_FOUND, str(e))
        except StewardError as e:
            log.warning("blob request from %s failed: %s", conn.peer, e)
            reply = _error("failed", str(e))
        except Exception as e:
            log.exception("blob request %r from %s failed unexpectedly",
                          str(request.get("op"))[:40], conn.peer)
            reply = _error(ERROR_INTERNAL, type(e).__name__)
        conn.send(reply)
        return True

    def _bad_request(self, conn: _Connection, error: Exception) -> None:
        self._count("bad_requests")
        log.warning("bad blob request from %s: %s", conn.peer, error)

    def _dispatch(self, conn: _Connection, request: dict[str, Any]) -> bool:
        op = request.get("op")
        if not isinstance(op, str) or not op:
            raise BlobProtocolError(f"request needs an 'op' string, got {op!r:.60}")
        if op == "get":
            return self._send_blob(conn, request)
        if op in (OP_PIECE, "pick"):
            return self._send_piece(conn, request)
        fields_ = self._on_message(op, request)
        if not isinstance(fields_, dict):
            raise TypeError(f"on_message({op!r}) returned {type(fields_).__name__}, not a dict")
        conn.send({**fields_, "ok": True})
        return True

    def _send_piece(self, conn: _Connection, request: dict[str, Any]) -> bool:
        """One piece of a blob for peer fetch (:mod:`spark_steward.blob.pieces`): the header
        names its offset and length, the fetcher checks it against the driver's piece plan."""
        if request.get("op") == "pick":
            # The origin chooses (BitTorrent's super-seeding): the piece it has served least,
            # so hosts starting together take different pieces and pass them on.
            wanted, need = parse_pick(request)
            index = self._pick(wanted.key, wanted.scope, need)
            if index is None:  # every needed piece is on its way to another host
                conn.send({"ok": True, "wait": True})
                return True
            wanted = dataclasses.replace(wanted, index=index)
        else:
            wanted = PieceRequest.parse(request)
        blob = self._locate(wanted.key, wanted.scope)
        with blob.file:
            if blob.size != wanted.size:
                raise BlobProtocolError(f"blob {wanted.key.short} has {blob.size} bytes, the "
                                        f"request says {wanted.size}")
            offset, length = wanted.span()
            sent = conn.send({"ok": True, "index": wanted.index, "offset": offset,
                              "length": length}, blob.file, length, offset)
        if sent < length:
            log.warning("blob %s of scope %s ended before piece %d; closing the connection "
                        "from %s", wanted.key, wanted.scope, wanted.index, conn.peer)
            return False
        self._count("bytes_served", sent)
        return True

    def _send_blob(self, conn: _Connection, request: dict[str, Any]) -> bool:
        key = BlobKey.parse(request.get("key"))
        scope = validate_scope_id(request.get("scope"))
        blob = self._locate(key, scope)
        with blob.file:
            sent = conn.send({"ok": True, "size": blob.size, "crc32c": blob.crc32c}, blob.file,
                             blob.size)
        if sent < blob.size:
            # The header promised more than the file holds; the only honest signal left is
            # to end the stream, which the client reports as a truncated blob.
            log.warning("blob %s of scope %s holds %d bytes, %d were announced; closing the "
                        "connection from %s", key, scope, sent, blob.size, conn.peer)
            return False
        self._count("blobs_served")
        self._count("bytes_served", sent)
        return True
