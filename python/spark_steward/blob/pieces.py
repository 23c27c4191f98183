"""How a blob is cut into pieces for peer fetch, and the records peers exchange about them.

Pure: no sockets, no files. A :class:`PiecePlan` is the driver's word on a blob's pieces: their
size and the crc32c of each. Fetchers check every piece against it before writing or serving it
on, so a peer can waste a fetcher's time but never its bytes; the whole blob is still checked
against its key (SHA-256) before it takes its name.

A host that fills a blob from peers announces its progress in a *have-file* beside the temp file
(``.<key>.tmp-have``): the temp file's name on the first line, then one ``0``/``1`` per piece.
The executor JVM's peer server (``PeerServer.java``) reads it to serve verified pieces of a blob
still in transit: that is what lets N hosts fill from each other at once instead of in rounds.
Both names contain ``.tmp-``, so the working dir's recovery sweeps what a killed fetcher left.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from spark_steward.blob.keys import BlobKey, validate_scope_id
from spark_steward.blob.protocol import OP_PIECE
from spark_steward.blob.errors import BlobProtocolError

#: Piece size bounds (also the JVM server's): small enough to pipeline, few enough to list.
MIN_PIECE = 64 << 10
MAX_PIECE = 1 << 30
MAX_PIECES = 65536
MAX_BLOB = 1 << 50
#: 4 MiB: 33 ms at 1 Gbit/s, so a pipeline through peers is a few ms deep per hop, and one
#: crc32c per piece costs nothing; doubled for blobs with more than TARGET_PIECES of them.
DEFAULT_PIECE = 4 << 20
TARGET_PIECES = 4096

HAVE_SUFFIX = ".tmp-have"
_TEMP_NAME = re.compile(r"\.([0-9a-f]{64})\.tmp-[0-9a-f]{12}")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


def piece_size_for(size: int) -> int:
    """The piece size the driver plans ``size`` bytes with."""
    piece = DEFAULT_PIECE
    while -(-size // piece) > TARGET_PIECES and piece < MAX_PIECE:
        piece *= 2
    return piece


@dataclass(frozen=True)
class PiecePlan:
    """A blob's pieces: ``crcs[i]`` is the crc32c of bytes ``[i * piece_size, ...)``."""

    size: int
    piece_size: int
    crcs: tuple[int, ...]

    def __post_init__(self) -> None:
        check_geometry(self.size, self.piece_size)
        if len(self.crcs) != count_of(self.size, self.piece_size):
            raise BlobProtocolError(f"piece plan of {self.size} bytes in pieces of "
                                    f"{self.piece_size} lists {len(self.crcs)} checksums, "
                                    f"expected {count_of(self.size, self.piece_size)}")

    @property
    def count(self) -> int:
        """How many pieces the blob is split into."""
        return len(self.crcs)

    def span(self, index: int) -> tuple[int, int]:
        """``(offset, length)`` of piece ``index``."""
        offset = index * self.piece_size
        return offset, min(self.piece_size, self.size - offset)

    def to_wire(self) -> dict[str, Any]:
        """The plan as a JSON-able dict, for the blob protocol."""
        return {"size": self.size, "piece_size": self.piece_size, "crcs": list(self.crcs)}

    @classmethod
    def from_wire(cls, body: object, size: int) -> "PiecePlan":
        """The driver's plan; BlobProtocolError unless it describes a blob of ``size`` bytes."""
        if not isinstance(body, dict):
            raise BlobProtocolError(f"piece plan {body!r:.80} is not an object")
        crcs = body.get("crcs")
        if not isinstance(crcs, list) or not all(
                type(c) is int and 0 <= c <= 0xFFFFFFFF for c in crcs):
            raise BlobProtocolError("piece plan needs 'crcs', a list of 32-bit integers")
        plan = cls(_int(body, "size"), _int(body, "piece_size"), tuple(crcs))
        if plan.size != size:
            raise BlobProtocolError(f"piece plan is for {plan.size} bytes, the blob has {size}")
        return plan


def count_of(size: int, piece_size: int) -> int:
    """How many pieces of ``piece_size`` bytes hold ``size`` bytes."""
    return -(-size // piece_size)


def check_geometry(size: int, piece_size: int) -> None:
    """Refuses (BlobProtocolError) a blob size or piece size out of range."""
    if not 1 <= size <= MAX_BLOB:
        raise BlobProtocolError(f"size {size!r} is out of range 1..{MAX_BLOB}")
    if not MIN_PIECE <= piece_size <= MAX_PIECE:
        raise BlobProtocolError(f"piece_size {piece_size!r} is out of range "
                                f"{MIN_PIECE}..{MAX_PIECE}")
    if count_of(size, piece_size) > MAX_PIECES:
        raise BlobProtocolError(f"{size} bytes in pieces of {piece_size} make more than "
                                f"{MAX_PIECES} pieces")


def _int(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    if type(value) is not int:
        raise BlobProtocolError(f"{field!r} must be an integer, got {value!r:.40}")
    return value


@dataclass(frozen=True)
class PieceRequest:
    """A validated ``piece`` request: nothing in it reaches a path before this."""

    key: BlobKey
    scope: str
    size: int
    piece_size: int
    index: int

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "PieceRequest":
        """The request in a protocol frame, validated; BlobProtocolError when malformed."""
        key = BlobKey.parse(body.get("key"))
        scope = validate_scope_id(body.get("scope"))
        size, piece_size, index = (_int(body, "size"), _int(body, "piece_size"),
                                   _int(body, "index"))
        check_geometry(size, piece_size)
        if not 0 <= index < count_of(size, piece_size):
            raise BlobProtocolError(f"index {index} is out of range for "
                                    f"{count_of(size, piece_size)} pieces")
        return cls(key, scope, size, piece_size, index)

    def to_wire(self) -> dict[str, Any]:
        """The request as a protocol frame."""
        return {"op": OP_PIECE, "key": self.key.digest, "scope": self.scope, "size": self.size,
                "piece_size": self.piece_size, "index": self.index}

    def span(self) -> tuple[int, int]:
        """The piece's offset and length in the blob."""
        offset = self.index * self.piece_size
        return offset, min(self.piece_size, self.size - offset)


def parse_pick(body: dict[str, Any]) -> tuple[PieceRequest, frozenset[int]]:
    """A validated ``pick`` request (the origin chooses the piece among ``need``): the
    request with index 0 for its geometry, and the needed indexes."""
    request = PieceRequest.parse({**body, "index": 0})
    need = parse_have(body.get("need"), count_of(request.size, request.piece_size))
    if not need:
        raise BlobProtocolError("'need' must be one 0/1 flag per piece, at least one 1")
    return request, need


# -- have-files ------------------------------------------------------------------------------

def have_name(key: BlobKey) -> str:
    """The file name announcing which pieces of ``key`` this host has."""
    return f".{key.digest}{HAVE_SUFFIX}"


def have_header(temp_name: str, key: BlobKey) -> bytes:
    """The have-file's first line; only a temp file of ``key`` in the same folder is named."""
    match = _TEMP_NAME.fullmatch(temp_name)
    if match is None or match.group(1) != key.digest:
        raise ValueError(f"{temp_name!r} is not a temp file name of blob {key.short}")
    return temp_name.encode("ascii") + b"\n"


def parse_have(text: object, count: int) -> frozenset[int] | None:
    """A peer's ``have`` string as piece indexes; None when it is not ``count`` 0/1 flags."""
    if not isinstance(text, str) or len(text) != count or text.strip("01"):
        return None
    return frozenset(i for i, flag in enumerate(text) if flag == "1")


# -- endpoints -------------------------------------------------------------------------------

def parse_endpoint(text: object) -> str:
    """``host:port`` (``[v6]:port`` for IPv6) as announced by a host's peer server."""
    if not isinstance(text, str) or len(text) > 300 or ":" not in text:
        raise BlobProtocolError(f"peer endpoint {text!r:.60} is not host:port")
    host, _, port = text.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if not _HOST.fullmatch(bare):
            raise BlobProtocolError(f"peer endpoint {text!r:.60} has no valid host") from None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise BlobProtocolError(f"peer endpoint {text!r:.60} has no valid port")
    return text


def endpoint_of(host: str, port: int) -> str:
    """``host:port`` (IPv6 hosts bracketed), validated."""
    return parse_endpoint(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """The host and port of an endpoint built by :func:`endpoint_of`."""
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)
