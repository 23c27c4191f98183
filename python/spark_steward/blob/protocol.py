"""Wire format of the blob server: length-prefixed JSON frames and an HMAC handshake.

Pure: no sockets here, so every way a peer can break the framing is unit-tested without a
network. A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8
JSON holding an object. The length is checked against the reader's limit *before* the body is
read, so a hostile peer declaring 4 GiB costs the reader nothing.

The handshake proves that the client knows the application's secret without sending it: the
server sends a fresh nonce, the client answers ``HMAC-SHA256(secret, DOMAIN + nonce)``. A
recorded proof is useless against another connection (new nonce), and the domain prefix keeps
the proof from doubling as a MAC anywhere else the secret might be used.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import struct
from typing import Any, Callable, Mapping

from spark_steward.blob.errors import BlobProtocolError, PeerClosed

PROTOCOL_VERSION = 1

#: Bytes of the length prefix.
HEADER_SIZE = 4

#: The requests a peer server answers (the shim's PeerServer on every executor host).
OP_HAVE = "have"
OP_PIECE = "piece"

#: The ``error`` code of a reply, which the client maps to an exception.
ERROR_BAD_REQUEST = "bad_request"
ERROR_AUTH = "auth"
ERROR_BUSY = "busy"
ERROR_NOT_FOUND = "not_found"
ERROR_INTERNAL = "internal"
_HEADER = struct.Struct(">I")
_MAX_LENGTH = (1 << 32) - 1
_AUTH_DOMAIN = b"spark-steward-blob-v1:"
_PEER_DOMAIN = b"spark-steward-peer-v1"


def encode_frame(obj: Mapping[str, Any]) -> bytes:
    """``obj`` as one frame.

    Content that is not a JSON object (or holds NaN, sets, ...) is a bug in the sender, not a
    peer breaking the protocol, so it raises TypeError / ValueError rather than
    BlobProtocolError.
    """
    if not isinstance(obj, dict):
        raise TypeError(f"a frame holds a JSON object, not {type(obj).__name__}")
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(body) > _MAX_LENGTH:
        raise ValueError(f"frame of {len(body)} bytes does not fit a 4-byte length")
    return _HEADER.pack(len(body)) + body


def read_frame(recv_exactly: Callable[[int], bytes], max_bytes: int) -> dict[str, Any]:
    """Reads one frame through ``recv_exactly(n)``, which returns ``n`` bytes, fewer at EOF.

    Raises PeerClosed when the connection ended before a frame began, BlobProtocolError for a
    truncated, empty, oversized or non-JSON-object frame.
    """
    header = recv_exactly(HEADER_SIZE)
    if not header:
        raise PeerClosed("connection closed before a frame began")
    if len(header) < HEADER_SIZE:
        raise BlobProtocolError(f"truncated frame: connection closed after {len(header)} of "
                                f"{HEADER_SIZE} length bytes")
    (length,) = _HEADER.unpack(header)
    if length == 0:
        raise BlobProtocolError("empty frame: a frame must hold a JSON object")
    if length > max_bytes:
        raise BlobProtocolError(f"frame length {length} exceeds the limit of {max_bytes} bytes")
    body = recv_exactly(length)
    if len(body) < length:
        raise BlobProtocolError(f"truncated frame: connection closed after {len(body)} of "
                                f"{length} bytes")
    try:
        obj = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise BlobProtocolError(f"frame of {length} bytes is not valid UTF-8: {e.reason} at "
                                f"byte {e.start}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, or absurd nesting
        raise BlobProtocolError(f"frame of {length} bytes is not valid JSON: "
                                f"{str(e)[:120]}") from None
    if not isinstance(obj, dict):
        raise BlobProtocolError(f"frame holds a JSON {type(obj).__name__}, expected an object")
    return obj


def exact_reader(recv_into: Callable[[memoryview], int]) -> Callable[[int], bytes]:
    """A ``recv_exactly`` for :func:`read_frame` over a ``recv_into`` (e.g. a socket's).

    It reads exactly what was asked and nothing more, so raw bytes that follow a frame on the
    same stream (a blob's body) stay in the stream for the caller.
    """
    def recv_exactly(n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = recv_into(view[got:])
            if not k:
                break
            got += k
        return bytes(view[:got])
    return recv_exactly


def new_nonce() -> str:
    """32 random bytes as hex: the server's challenge, fresh for every connection."""
    return secrets.token_hex(32)


def auth_proof(secret: str, nonce: str) -> str:
    """The client's answer to ``nonce``: HMAC-SHA256 keyed with ``secret``, as hex."""
    return hmac.new(secret.encode("utf-8"), _AUTH_DOMAIN + nonce.encode("utf-8"),
                    hashlib.sha256).hexdigest()


def peer_secret(secret: str) -> str:
    """The key executor hosts prove to each other's peer servers: derived from the
    application's secret, so the file it is handed to the JVM in opens no driver op."""
    return hmac.new(secret.encode("utf-8"), _PEER_DOMAIN, hashlib.sha256).hexdigest()


def proof_matches(secret: str, nonce: str, proof: object) -> bool:
    """Whether ``proof`` answers ``nonce``, compared in constant time."""
    if not isinstance(proof, str):
        return False
    return hmac.compare_digest(auth_proof(secret, nonce).encode("ascii"),
                               proof.encode("utf-8", "replace"))
