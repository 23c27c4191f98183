"""crc32c helpers: the fast verification every stored artifact carries."""

from __future__ import annotations

from typing import BinaryIO

import crc32c as _crc32c

CHUNK = 4 << 20


def crc32c_of(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """crc32c of ``data``, continuing from ``value`` for streamed input."""
    return int(_crc32c.crc32c(data, value))


def crc32c_stream(stream: BinaryIO, chunk: int = CHUNK) -> tuple[int, int]:
    """Returns ``(crc32c, size)`` of everything left in ``stream``."""
    value, size = 0, 0
    buf = bytearray(chunk)
    view = memoryview(buf)
    while True:
        n = stream.readinto(view)  # type: ignore[attr-defined]
        if not n:
            return value, size
        value = crc32c_of(view[:n], value)
        size += n


def format_crc(value: int) -> str:
    """Eight lower-case hex digits, the form stored in records."""
    return f"{value & 0xFFFFFFFF:08x}"
