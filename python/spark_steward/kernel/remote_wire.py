"""The wire of spark-steward's Spark Connect commands (the thin client and the server's
command extension, ``io.sparksteward.shim.connect``): pure, no pyspark.

A command travels as a ``protobuf.Any`` of type :data:`COMMAND_TYPE` whose value holds two
length-delimited protobuf fields: 1, the request as JSON (``{"op": ..., "args": {...}}``); 2,
optionally, the serialized Relation of the DataFrame the call takes; 3, optionally, data the
call carries (a blob's bytes). The reply comes back as a
``SqlCommandResult`` relation of type :data:`REPLY_TYPE` with the same layout: 1, the reply as
JSON (``{"value": ...}`` or ``{"error": {"type": ..., "message": ...}}``); 2, optionally, the
id under which the server cached a DataFrame for the client (a ``CachedRemoteRelation``).
``Payload.java`` is the JVM twin: both refuse whatever else a neighbour sends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from spark_steward.errors import MalformedCommand as WireError

COMMAND_TYPE = "type.googleapis.com/spark_steward.Command"
REPLY_TYPE = "type.googleapis.com/spark_steward.Reply"
#: The largest request text either side reads (``Payload.MAX_TEXT``).
MAX_TEXT = 1 << 20
#: The largest reply text the client reads (a long listing; gRPC's own limit is 128 MiB).
REPLY_MAX_TEXT = 64 << 20


@dataclass(frozen=True)
class Payload:
    """The fields: the JSON text, the optional bytes beside it (a relation, a relation id) and
    the optional data (a blob's bytes)."""

    text: str
    extra: bytes | None = None
    data: bytes | None = None


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(payload: Payload) -> bytes:
    """The protobuf bytes of ``payload`` (fields 1 and 2, length-delimited)."""
    text = payload.text.encode("utf-8")
    out = _varint(1 << 3 | 2) + _varint(len(text)) + text
    for number, value in ((2, payload.extra), (3, payload.data)):
        if value is not None:
            out += _varint(number << 3 | 2) + _varint(len(value)) + value
    return out


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise WireError("varint longer than 5 bytes")


def decode(data: bytes, max_text: int = MAX_TEXT) -> Payload:
    """The payload in ``data``; WireError for anything but fields 1 (UTF-8, at most
    ``max_text`` bytes), 2 and 3, each once, in bounds."""
    text: str | None = None
    extra: bytes | None = None
    blob: bytes | None = None
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire != 2 or field not in (1, 2, 3):
            raise WireError(f"unexpected field {field} of wire type {wire}")
        length, pos = _read_varint(data, pos)
        if length > len(data) - pos:
            raise WireError(f"field {field} claims {length} bytes, {len(data) - pos} remain")
        chunk, pos = data[pos:pos + length], pos + length
        if field == 1:
            if text is not None:
                raise WireError("field 1 twice")
            if length > max_text:
                raise WireError(f"a text of {length} bytes (at most {max_text})")
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise WireError(f"field 1 is not UTF-8: {exc}") from None
        elif field == 2:
            if extra is not None:
                raise WireError("field 2 twice")
            extra = bytes(chunk)
        else:
            if blob is not None:
                raise WireError("field 3 twice")
            blob = bytes(chunk)
    if text is None:
        raise WireError("no text field")
    return Payload(text, extra, blob)


def request_text(op: str, args: Mapping[str, Any]) -> str:
    """The request JSON for ``op`` with ``args``."""
    return json.dumps({"op": op, "args": dict(args)}, separators=(",", ":"))


def parse_request(text: str) -> tuple[str, dict[str, Any]]:
    """``(op, args)`` of a request; WireError for anything else."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting past the stack
        raise WireError(f"the request is not JSON: {type(exc).__name__}") from None
    if not isinstance(body, dict) or not isinstance(body.get("op"), str) \
            or not isinstance(body.get("args", {}), dict):
        raise WireError('the request is not {"op": NAME, "args": {...}}')
    return body["op"], body.get("args", {})


def value_reply(value: Any) -> str:
    """The reply JSON of a call that returned ``value`` (JSON-able)."""
    return json.dumps({"value": value}, separators=(",", ":"))


def error_reply(kind: str, message: str) -> str:
    """The reply JSON of a call that failed with the spark-steward error class ``kind``."""
    return json.dumps({"error": {"type": kind, "message": message}}, separators=(",", ":"))


def parse_reply(text: str) -> tuple[Any, tuple[str, str] | None]:
    """``(value, None)`` or ``(None, (error type, message))``; WireError for anything else."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"the reply is not JSON: {type(exc).__name__}") from None
    if isinstance(body, dict) and "value" in body:
        return body["value"], None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("type"), str) \
            and isinstance(error.get("message"), str):
        return None, (error["type"], error["message"])
    raise WireError("the reply has neither a value nor an error")
