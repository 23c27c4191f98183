"""Test vectors of the working dir's manifest records: entry names (what a record's body and
file name hold) and the damage a record can come to (each must make it ignored).

A record is ``{"format": 1, "crc32c": "<hex>", "body": {...}}``, the crc over the canonical
JSON of the body (sorted keys, no spaces, ASCII with ``\\u`` escapes): ``records.py`` owns the
format.
"""

from __future__ import annotations

import json
import re
from typing import Callable

#: Entries by vector id: the paths of the files records describe, as either runtime names them.
ENTRIES: dict[str, str] = {
    "plain": "table-replicas/warehouse/t/part-00000.parquet",
    "space-percent-plus": "table-replicas/my tables/t%2B/part 0+1.parquet",
    "latin": "table-replicas/warehouse/city=Z\u00fcrich/part-0.parquet",
    "cjk": "table-replicas/\u8868/part-0.parquet",
    "astral": "table-replicas/\U0001f4e6/part-0.parquet",
    "quote-backslash": 'table-replicas/a"b\\c/part-0.parquet',
    "newline-tab": "table-replicas/a\nb\tc/part-0.parquet",
    "control": "table-replicas/a\x1fb/part-0.parquet",
    "delete": "table-replicas/a\x7fb/part-0.parquet",
    "local-state": "state/model/index",
}

#: Sizes and checksums at the edges of their ranges.
SIZES = (0, 1, 1 << 40)
CRCS = (0, 0x1EDC6F41, 0xFFFFFFFF)


def _edit_body(data: bytes, edit: Callable[[dict], None]) -> bytes:  # type: ignore[type-arg]
    envelope = json.loads(data)
    edit(envelope["body"])
    return json.dumps(envelope).encode()


def _flip_crc_digit(data: bytes) -> bytes:
    envelope = json.loads(data)
    crc = envelope["crc32c"]
    envelope["crc32c"] = crc[:-1] + ("1" if crc[-1] == "0" else "0")
    return json.dumps(envelope).encode()


def _other_format(data: bytes) -> bytes:
    return re.sub(rb'"format":\s*1', b'"format": 2', data)


#: Damage by vector id: each turns a record's bytes into bytes both readers ignore.
DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "size-changed": lambda data: _edit_body(data, lambda body: body.update(size=body["size"] + 1)),
    "entry-changed": lambda data: _edit_body(data, lambda body: body.update(entry="other")),
    "crc-digit": _flip_crc_digit,
    "torn": lambda data: data[:len(data) // 2],
    "empty": lambda data: b"",
    "not-json": lambda data: b"\x00\xff" + data,
    "no-body": lambda data: json.dumps({k: v for k, v in json.loads(data).items()
                                        if k != "body"}).encode(),
    "other-format": _other_format,
}

#: Where the runtimes are known to disagree: (runtime, vector) -> the difference. The suite
#: expects these to fail (strictly: a fix makes the entry go).
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {
    ("java", "usage"):
        "the JVM's byte bound (LocalManifest.usage) counts every complete record it can parse, "
        "damaged ones too; Python counts those that verify and are named by their entry. "
        "Conservative (the JVM may read a table remotely where a replica had room), but the "
        "bound is not the same number on both sides",
}
