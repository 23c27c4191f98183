"""Test vectors of the blob wire protocol: what a server of either runtime holds, and what
clients send it that no good client would. Deterministic (seeded), so a failure names the same
bytes on every run and in both runtimes.

Each vector is ``(id, input, expected)``: the id names it in test ids and in
:data:`KNOWN_DISAGREEMENTS`.
"""

from __future__ import annotations

import hashlib
import random
import struct
from typing import Any, Callable

from spark_steward.blob.protocol import auth_proof

#: The peer secret both servers hold (64 hex digits: the JVM's key file takes no other form).
SECRET = "5e" * 32
SCOPE = "_app"
PIECE = 65536

_rng = random.Random(34)
#: A complete blob of four pieces, the last one short.
COMPLETE = _rng.randbytes(3 * PIECE + 3392)
COMPLETE_KEY = hashlib.sha256(COMPLETE).hexdigest()
SIZE = len(COMPLETE)
MISSING_KEY = hashlib.sha256(b"nowhere").hexdigest()


def pieces(data: bytes, piece: int = PIECE) -> list[bytes]:
    """``data`` cut into pieces of ``piece`` bytes, the last one short."""
    return [data[i:i + piece] for i in range(0, len(data), piece)]


def key_of(label: str) -> str:
    """A key no blob of the vectors has."""
    return hashlib.sha256(label.encode()).hexdigest()


def piece_request(key: Any, size: Any, index: Any, scope: Any = SCOPE, piece_size: Any = PIECE
                  ) -> dict[str, Any]:
    """A ``piece`` request (the op both runtimes serve); Any, since vectors also send what no
    client should."""
    return {"op": "piece", "key": key, "scope": scope, "size": size, "piece_size": piece_size,
            "index": index}


def _without(request: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != field}


def _off_by_one_digit(proof: str) -> str:
    return proof[:-1] + ("1" if proof[-1] == "0" else "0")


#: Answers to the server's hello that must not authenticate: id -> answer(nonce).
REFUSED_ANSWERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "other-secret": lambda nonce: {"auth": auth_proof("6f" * 32, nonce)},
    "one-digit-off": lambda nonce: {"auth": _off_by_one_digit(auth_proof(SECRET, nonce))},
    "upper-case": lambda nonce: {"auth": auth_proof(SECRET, nonce).upper()},
    "number": lambda nonce: {"auth": 12},
    "no-auth-field": lambda nonce: {"proof": auth_proof(SECRET, nonce)},
}

#: Frames whose framing is broken, sent by an authenticated client: (id, bytes, words of the
#: bad_request reply). The connection closes after the reply.
BROKEN_FRAMES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("65537", struct.pack(">I", 65537), ("exceeds the limit of 65536",)),
    ("4g", struct.pack(">I", 0xFFFFFFFF) + b'{"op":', ("4294967295", "exceeds the limit of 65536")),
    ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", ("exceeds the limit",)),
    ("empty", struct.pack(">I", 0), ("empty frame",)),
    ("text", struct.pack(">I", 5) + b"hello", ("not valid JSON",)),
    ("not-json", struct.pack(">I", 9) + b"not json!", ("not valid JSON",)),
    ("array", struct.pack(">I", 3) + b"[1]", ("expected an object",)),
    ("utf8", struct.pack(">I", 4) + b"\xff\xfe{}", ("not valid UTF-8",)),
    ("trailing", struct.pack(">I", 16) + b'{"op":"have"} xx', ("not valid JSON",)),
    # 100 arrays deep: refused by both (the JVM for its depth, Python as not an object).
    ("deep-array", struct.pack(">I", 200) + b"[" * 100 + b"]" * 100, ()),
]

_DEEP = b'{"op":"piece","x":' + b"[" * 40 + b"]" * 40 + b"}"
#: An object nesting deeper than the JVM's bound of 32, otherwise a request.
DEEP_OBJECT = struct.pack(">I", len(_DEEP)) + _DEEP


def bad_requests() -> list[tuple[str, dict[str, Any], str]]:
    """Well-framed requests that are not valid: (id, request, the field the bad_request reply
    names). The connection stays usable after each."""
    good = piece_request(COMPLETE_KEY, SIZE, 0)
    key, size = COMPLETE_KEY, SIZE
    return [
        ("op-unknown", {**good, "op": "frobnicate"}, "op"),
        ("op-upper", {**good, "op": "PIECE"}, "op"),
        ("op-missing", _without(good, "op"), "op"),
        ("op-number", {**good, "op": 1}, "op"),
        ("op-empty", {**good, "op": ""}, "op"),
        ("key-traversal", piece_request("../x", size, 0), "key"),
        ("key-traversal-64", piece_request("../" + key[3:], size, 0), "key"),
        ("key-absolute", piece_request("/etc/passwd", size, 0), "key"),
        ("key-upper", piece_request(key.upper(), size, 0), "key"),
        ("key-63", piece_request(key[:63], size, 0), "key"),
        ("key-65", piece_request(key + "0", size, 0), "key"),
        ("key-slash", piece_request(key + "/", size, 0), "key"),
        ("key-number", piece_request(1, size, 0), "key"),
        ("key-missing", _without(good, "key"), "key"),
        ("scope-traversal", piece_request(key, size, 0, scope="../x"), "scope"),
        ("scope-dots", piece_request(key, size, 0, scope=".."), "scope"),
        ("scope-absolute", piece_request(key, size, 0, scope="/tmp.1"), "scope"),
        ("scope-nested", piece_request(key, size, 0, scope="_app/../_app"), "scope"),
        ("scope-deep-traversal", piece_request(key, size, 0, scope="_app/../../x"), "scope"),
        ("scope-no-number", piece_request(key, size, 0, scope="job"), "scope"),
        ("scope-long-number", piece_request(key, size, 0, scope="job.1234567890"), "scope"),
        ("scope-dot-first", piece_request(key, size, 0, scope=".job.1"), "scope"),
        ("scope-empty", piece_request(key, size, 0, scope=""), "scope"),
        ("scope-number", piece_request(key, size, 0, scope=1), "scope"),
        ("scope-list", piece_request(key, size, 0, scope=["_app"]), "scope"),
        ("scope-missing", _without(good, "scope"), "scope"),
        ("size-string", piece_request(key, str(size), 0), "size"),
        ("size-float", piece_request(key, float(size), 0), "size"),
        ("size-bool", piece_request(key, True, 0), "size"),
        ("size-zero", piece_request(key, 0, 0), "size"),
        ("size-negative", piece_request(key, -1, 0), "size"),
        ("size-huge", piece_request(key, (1 << 50) + 1, 0), "size"),
        ("size-bigint", piece_request(key, 10 ** 30, 0), "size"),
        ("size-null", piece_request(key, None, 0), "size"),
        ("pieces-too-many", piece_request(key, 1 << 40, 0), "pieces"),
        ("piece-size-small", piece_request(key, size, 0, piece_size=65535), "piece_size"),
        ("piece-size-huge", piece_request(key, size, 0, piece_size=(1 << 30) + 1), "piece_size"),
        ("piece-size-string", piece_request(key, size, 0, piece_size="65536"), "piece_size"),
        ("piece-size-float", piece_request(key, size, 0, piece_size=65536.5), "piece_size"),
        ("piece-size-bool", piece_request(key, size, 0, piece_size=False), "piece_size"),
        ("index-negative", piece_request(key, size, -1), "index"),
        ("index-past-end", piece_request(key, size, 4), "index"),
        ("index-huge", piece_request(key, size, 10 ** 20), "index"),
        ("index-string", piece_request(key, size, "0"), "index"),
        ("index-float", piece_request(key, size, 1.0), "index"),
        ("index-bool", piece_request(key, size, True), "index"),
        ("index-missing", _without(good, "index"), "index"),
    ]


#: Where the two runtimes are known to answer a vector differently: (runtime, vector id) ->
#: the difference. The suite expects these to fail (strictly: a fix makes the entry go).
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {
    ("python", "other-size"):
        "a piece of a stored blob asked for under another size: the JVM answers not_found (no "
        "blob of that size is here), Python bad_request ('blob ... has N bytes, the request "
        "says M')",
    ("python", "deep-object"):
        "a request object nesting deeper than 32: the JVM refuses the frame (bad_request, "
        "closed), Python parses it as a request (its own bound is the interpreter's recursion "
        "limit)",
    ("python", "handshake-oversized"):
        "a handshake answer over 1024 bytes: the JVM answers bad_request, Python auth (every "
        "broken handshake frame is an authentication failure there)",
}
