"""Checksummed JSON envelopes for durable metadata records.

A record on storage is ``{"format": 1, "crc32c": "<hex>", "body": {...}}`` where the crc covers
the canonical JSON of ``body``. Encoding and verification are pure; :mod:`spark_steward.storage`
does the IO. A torn or tampered record is reported, never returned as data.
"""

from __future__ import annotations

import json
from typing import Any

from spark_steward.checksum import crc32c_of, format_crc
from spark_steward.errors import RecordCorrupt

FORMAT = 1


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode_record(body: Any) -> bytes:
    """Serialized envelope for ``body`` (any JSON value)."""
    envelope = {"format": FORMAT, "crc32c": format_crc(crc32c_of(_canonical(body))), "body": body}
    return json.dumps(envelope, sort_keys=True, indent=1).encode("utf-8") + b"\n"


def decode_record(data: bytes, where: str) -> Any:
    """The verified body of an envelope; raises RecordCorrupt naming ``where``."""
    try:
        envelope = json.loads(data.decode("utf-8"))
        body, crc = envelope["body"], envelope["crc32c"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise RecordCorrupt(f"metadata record {where} is not readable (torn or not ours)") from None
    if envelope.get("format") != FORMAT:
        raise RecordCorrupt(f"metadata record {where} has unknown format {envelope.get('format')!r}")
    actual = format_crc(crc32c_of(_canonical(body)))
    if actual != crc:
        raise RecordCorrupt(
            f"metadata record {where} fails verification: crc32c {actual} != recorded {crc}")
    return body
