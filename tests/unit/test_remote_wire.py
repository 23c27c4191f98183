"""The wire of spark-steward's Spark Connect commands (kernel/remote_wire.py): its two fields
against protobuf's own encoder and parser (they are ``google.protobuf.Any``'s layout), every way
a neighbour's bytes can be wrong, seeded fuzz, and the request/reply JSON. The decoder reads
bytes from any client holding a Connect session, so it must refuse cleanly, never crash."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from spark_steward.errors import MalformedCommand, StewardError
from spark_steward.kernel.remote_wire import (MAX_TEXT, Payload, WireError, decode, encode,
                                              error_reply, parse_reply, parse_request,
                                              request_text, value_reply)

# The keys of the two fields: field 1 and field 2, wire type 2 (length-delimited).
TEXT_KEY, EXTRA_KEY = b"\x0a", b"\x12"


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, chunk: bytes, wire: int = 2) -> bytes:
    return varint(number << 3 | wire) + varint(len(chunk)) + chunk


def refused(data: bytes, fragment: str) -> None:
    with pytest.raises(MalformedCommand, match=re.escape(fragment)):
        decode(data)


# Texts around the varint boundaries of their byte length (1, 2, 3 and 4 bytes of length), in
# ASCII and in multi-byte UTF-8 (the length is in bytes, not characters).
TEXTS = {
    "empty": "",
    "one": "x",
    "json": request_text("checkpoints.save", {"series": "s", "retained": 3}),
    "ascii-127": "a" * 127,
    "ascii-128": "a" * 128,
    "ascii-16383": "b" * 16383,
    "ascii-16384": "b" * 16384,
    "utf8-2byte-128": "é" * 64,
    "utf8-3byte-129": "€" * 43,
    "utf8-4byte-128": "\U0001F600" * 32,
    "utf8-mixed-16384": ("aé€\U0001F600" * 1638) + "a€",  # 10 * 1638 + 1 + 3 bytes
    "nul-and-controls": "\x00\x01\n\t\x7f",
    "max-text": "c" * MAX_TEXT,  # 2**20: the largest text either side reads
}
EXTRAS: dict[str, bytes | None] = {
    "none": None,
    "empty": b"",
    "nul": b"\x00",
    "ff": b"\xff",
    "all-bytes": bytes(range(256)),
    "len-127": b"\x00" * 127,
    "len-128": b"\xff" * 128,
    "len-16384": bytes(range(256)) * 64,
    "large": random.Random(7).randbytes(MAX_TEXT + 3),  # extra has no limit of its own
}


def test_the_sample_texts_sit_on_the_boundaries_they_claim() -> None:
    lengths = {name: len(text.encode("utf-8")) for name, text in TEXTS.items()}
    assert lengths["utf8-2byte-128"] == 128 and lengths["utf8-3byte-129"] == 129
    assert lengths["utf8-4byte-128"] == 128 and lengths["utf8-mixed-16384"] == 16384
    assert lengths["max-text"] == 2 ** 20


@pytest.mark.parametrize("extra", list(EXTRAS.values()), ids=list(EXTRAS))
@pytest.mark.parametrize("text", list(TEXTS.values()), ids=list(TEXTS))
def test_the_encoding_is_protobufs_any_byte_for_byte(text: str, extra: bytes | None) -> None:
    ours = encode(Payload(text, extra))
    theirs = any_pb2.Any(type_url=text, value=extra or b"").SerializeToString()
    # protobuf (proto3) writes no empty field; the wire always writes field 1, and field 2
    # whenever extra is not None, even empty. Apart from those two zero-length fields, which
    # sit where protobuf would have put them (fields in number order), the bytes are protobuf's.
    expected = (TEXT_KEY + b"\x00" if text == "" else b"") + theirs \
        + (EXTRA_KEY + b"\x00" if extra == b"" else b"")
    assert ours == expected
    # protobuf reads our bytes as the very message it would have written.
    parsed = any_pb2.Any()
    parsed.ParseFromString(ours)
    assert parsed == any_pb2.Any(type_url=text, value=extra or b"")
    # And we read our own bytes back exactly, None and b"" kept apart.
    assert decode(ours) == Payload(text, extra)


@pytest.mark.parametrize("extra", list(EXTRAS.values()), ids=list(EXTRAS))
@pytest.mark.parametrize("text", list(TEXTS.values()), ids=list(TEXTS))
def test_protobufs_encoding_decodes_to_the_same_payload(text: str, extra: bytes | None) -> None:
    theirs = any_pb2.Any(type_url=text, value=extra or b"").SerializeToString()
    if text == "":
        # protobuf writes nothing for an empty type_url, and the wire requires field 1: refused.
        # (Never met: both encoders always write field 1, and a request is never empty JSON.)
        refused(theirs, "no text field")
        return
    # Where protobuf omitted an empty value, field 2 is absent: None, which proto3 cannot tell
    # from b"". Every other extra comes back as is.
    assert decode(theirs) == Payload(text, extra or None)


@pytest.mark.parametrize("length", [2 ** 21 - 1, 2 ** 21], ids=["3-byte-length", "4-byte-length"])
def test_a_text_past_the_limit_encodes_like_protobuf_but_is_refused(length: int) -> None:
    text = "d" * length
    ours = encode(Payload(text))
    assert ours == any_pb2.Any(type_url=text).SerializeToString()
    refused(ours, f"a text of {length} bytes (at most {MAX_TEXT})")


def test_one_byte_past_max_text_is_refused_and_max_text_is_not() -> None:
    assert decode(encode(Payload("e" * MAX_TEXT))).text == "e" * MAX_TEXT
    refused(encode(Payload("e" * (MAX_TEXT + 1))), f"a text of {MAX_TEXT + 1} bytes")
    # Multi-byte: the limit counts bytes.
    refused(encode(Payload("é" * (MAX_TEXT // 2) + "x")), f"a text of {MAX_TEXT + 1} bytes")


@pytest.mark.parametrize("data, payload", [
    (field(2, b"rel") + field(1, b"t"), Payload("t", b"rel")),  # fields in any order
    (TEXT_KEY + b"\x81\x00" + b"t", Payload("t")),  # an overlong (non-minimal) length
    (b"\x8a\x80\x80\x80\x00" + b"\x01t", Payload("t")),  # a key of 5 bytes: the longest
    (TEXT_KEY + b"\x81\x80\x80\x80\x00" + b"t", Payload("t")),  # a length of 5 bytes
    (field(1, b"") + field(2, b""), Payload("", b"")),
    (field(1, b"t") + field(2, b"\xff\xfe"), Payload("t", b"\xff\xfe")),  # extra is not text
], ids=["order-2-1", "overlong-length", "5-byte-key", "5-byte-length", "both-empty",
        "binary-extra"])
def test_what_protobuf_accepts_within_the_two_fields_is_accepted(data: bytes,
                                                                  payload: Payload) -> None:
    assert decode(data) == payload
    parsed = any_pb2.Any()
    parsed.ParseFromString(data)
    assert (parsed.type_url, parsed.value) == (payload.text, payload.extra or b"")


OK = field(1, b"{}")

ADVERSARIAL = {
    "empty-input": (b"", "no text field"),
    "only-extra": (field(2, b"x"), "no text field"),
    "key-truncated": (b"\x8a", "truncated varint"),
    "length-missing": (TEXT_KEY, "truncated varint"),
    "length-truncated": (TEXT_KEY + b"\x80", "truncated varint"),
    "length-truncated-after-4": (TEXT_KEY + b"\xff\xff\xff\xff", "truncated varint"),
    "second-key-truncated": (OK + b"\x92", "truncated varint"),
    "length-6-bytes": (TEXT_KEY + b"\x80\x80\x80\x80\x80\x00", "varint longer than 5 bytes"),
    "length-10-bytes": (TEXT_KEY + b"\xff" * 9 + b"\x01", "varint longer than 5 bytes"),
    "key-6-bytes": (b"\x8a\x80\x80\x80\x80\x00\x01t", "varint longer than 5 bytes"),
    "text-past-end": (TEXT_KEY + b"\x05abc", "field 1 claims 5 bytes, 3 remain"),
    "extra-past-end": (OK + EXTRA_KEY + b"\x02a", "field 2 claims 2 bytes, 1 remain"),
    "length-4GiB": (TEXT_KEY + b"\xff\xff\xff\xff\x0f", "field 1 claims 4294967295 bytes, 0"),
    "length-max-5-bytes": (TEXT_KEY + b"\xff\xff\xff\xff\x7f", "claims 34359738367 bytes"),
    "text-varint": (b"\x08\x01", "unexpected field 1 of wire type 0"),
    "text-fixed64": (b"\x09" + b"\x00" * 8, "unexpected field 1 of wire type 1"),
    "text-start-group": (b"\x0b", "unexpected field 1 of wire type 3"),
    "text-end-group": (b"\x0c", "unexpected field 1 of wire type 4"),
    "text-fixed32": (b"\x0d" + b"\x00" * 4, "unexpected field 1 of wire type 5"),
    "text-wire-6": (b"\x0e", "unexpected field 1 of wire type 6"),
    "text-wire-7": (b"\x0f", "unexpected field 1 of wire type 7"),
    "extra-varint": (OK + b"\x10\x01", "unexpected field 2 of wire type 0"),
    "extra-fixed64": (OK + b"\x11" + b"\x00" * 8, "unexpected field 2 of wire type 1"),
    "extra-fixed32": (OK + b"\x15" + b"\x00" * 4, "unexpected field 2 of wire type 5"),
    "field-4": (OK + field(4, b"x"), "unexpected field 4 of wire type 2"),
    "field-4-first": (field(4, b"x") + OK, "unexpected field 4 of wire type 2"),
    "data-twice": (OK + field(3, b"x") + field(3, b"y"), "field 3 twice"),
    "data-varint": (OK + b"\x18\x01", "unexpected field 3 of wire type 0"),
    "field-0": (field(0, b"x") + OK, "unexpected field 0 of wire type 2"),
    "field-max": (OK + field(2 ** 29 - 1, b"x"), f"unexpected field {2 ** 29 - 1} of wire type 2"),
    "field-past-32-bits": (b"\xff\xff\xff\xff\x7f", f"unexpected field {2 ** 32 - 1} of wire "
                           "type 7"),
    "field-1-twice": (OK + field(1, b"{}"), "field 1 twice"),
    "field-1-twice-first-empty": (field(1, b"") + field(1, b"x"), "field 1 twice"),
    "field-2-twice": (OK + field(2, b"a") + field(2, b"b"), "field 2 twice"),
    "field-2-twice-empty": (field(2, b"") + OK + field(2, b""), "field 2 twice"),
    "text-over-max": (field(1, b"a" * (MAX_TEXT + 1)), f"a text of {MAX_TEXT + 1} bytes"),
    "text-ff": (field(1, b"\xff"), "field 1 is not UTF-8"),
    "text-surrogate": (field(1, b"\xed\xa0\x80"), "field 1 is not UTF-8"),
    "text-overlong-nul": (field(1, b"\xc0\x80"), "field 1 is not UTF-8"),
    "text-past-unicode": (field(1, b"\xf4\x90\x80\x80"), "field 1 is not UTF-8"),
    "text-cut-char": (field(1, "€".encode()[:2]), "field 1 is not UTF-8"),
    "text-bad-after-good": (field(1, b'{"op":"\xe9"}'), "field 1 is not UTF-8"),
}


@pytest.mark.parametrize("data, fragment", list(ADVERSARIAL.values()), ids=list(ADVERSARIAL))
def test_anything_else_is_refused_saying_what_is_wrong(data: bytes, fragment: str) -> None:
    refused(data, fragment)


def test_a_refusal_is_a_steward_error_and_a_value_error() -> None:
    assert WireError is MalformedCommand
    with pytest.raises(StewardError):
        decode(b"")
    with pytest.raises(ValueError):
        decode(b"")


def mutated(rng: random.Random) -> bytes:
    """A valid payload with a few random edits (so the fuzz reaches past the first key)."""
    text = "".join(rng.choice("a{}\":é€\U0001F600") for _ in range(rng.randrange(6)))
    extra = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(6))
    data = bytearray(encode(Payload(text, extra)))
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        edit = rng.randrange(4)
        at = rng.randrange(len(data) + 1)
        if edit == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif edit == 1:
            data.insert(at, rng.randrange(256))
        elif edit == 2:
            del data[at:at + rng.randrange(1, 3)]
        else:
            data[at:at] = rng.choice([TEXT_KEY, EXTRA_KEY, b"\x80", b"\xff"])
    return bytes(data)


def test_fuzz_decode_returns_a_payload_or_refuses_and_agrees_with_protobuf() -> None:
    rng = random.Random(20240517)
    accepted = refusals = 0
    for case in range(20_000):
        if case % 2:
            data = mutated(rng)
        else:
            data = rng.choice([b"", TEXT_KEY, EXTRA_KEY]) + rng.randbytes(rng.randrange(12))
        try:
            payload = decode(data)
        except MalformedCommand as exc:
            assert str(exc), data
            refusals += 1
            continue
        except Exception as exc:  # the decoder's contract: nothing else, ever
            pytest.fail(f"decode({data!r}) raised {type(exc).__name__}: {exc}")
        accepted += 1
        assert isinstance(payload, Payload) and isinstance(payload.text, str)
        assert payload.extra is None or type(payload.extra) is bytes
        # What we accept, protobuf reads the same (it also accepts more: repeats, unknowns).
        parsed = any_pb2.Any()
        try:
            parsed.ParseFromString(data)
        except DecodeError:
            pytest.fail(f"decode accepted {data!r}, protobuf refuses it")
        assert (parsed.type_url, parsed.value) == (payload.text, payload.extra or b""), data
        assert decode(encode(payload)) == payload
    # The fuzz reached both outcomes often enough to mean something.
    assert accepted > 500 and refusals > 3000, (accepted, refusals)


# -- request and reply JSON ------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    {}, {"series": "s", "retained": 3, "flag": True, "none": None},
    {"nested": {"a": [1, 2.5, "x"]}}, {"ünï": "cödé \U0001F600", "quote": "\"\\\n"},
], ids=["none", "scalars", "nested", "unicode"])
def test_a_request_round_trips(args: dict[str, Any]) -> None:
    text = request_text("checkpoints.save", args)
    assert parse_request(text) == ("checkpoints.save", args)
    # It travels as ASCII JSON, whatever the args hold.
    assert text.isascii()
    assert decode(encode(Payload(text))).text == text


@pytest.mark.parametrize("text, expected", [
    ('{"op": "a"}', ("a", {})),  # args may be left out
    ('{"op":"a","args":{}}', ("a", {})),
    (' {"args": {"k": 1}, "op": "b", "more": 0} ', ("b", {"k": 1})),  # extra keys ignored
    ('{"op": ""}', ("", {})),  # an empty op is the router's problem (unknown op)
], ids=["no-args", "empty-args", "reordered", "empty-op"])
def test_request_shapes_accepted(text: str, expected: tuple[str, dict[str, Any]]) -> None:
    assert parse_request(text) == expected


SHAPE = 'the request is not {"op": NAME, "args": {...}}'


@pytest.mark.parametrize("text, fragment", [
    ("", "the request is not JSON"),
    ("op=a", "the request is not JSON"),
    ('{"op": "a"', "the request is not JSON"),
    ("[]", SHAPE), ('["op", "a"]', SHAPE), ('"a"', SHAPE), ("1", SHAPE), ("null", SHAPE),
    ("{}", SHAPE), ('{"args": {}}', SHAPE),
    ('{"op": 1}', SHAPE), ('{"op": null}', SHAPE), ('{"op": ["a"]}', SHAPE),
    ('{"op": "a", "args": []}', SHAPE), ('{"op": "a", "args": null}', SHAPE),
    ('{"op": "a", "args": "k=1"}', SHAPE),
], ids=["empty", "not-json", "cut", "list", "pair", "string", "number", "null", "no-op",
        "args-no-op", "op-int", "op-null", "op-list", "args-list", "args-null", "args-str"])
def test_request_refusals(text: str, fragment: str) -> None:
    with pytest.raises(MalformedCommand, match=re.escape(fragment)):
        parse_request(text)


@pytest.mark.parametrize("parse", [parse_request, parse_reply], ids=["request", "reply"])
def test_deeply_nested_json_is_refused_as_malformed(parse: Any) -> None:
    with pytest.raises(MalformedCommand):
        parse("[" * 100_000)  # well under MAX_TEXT


@pytest.mark.parametrize("value", [
    None, 0, -1, 2 ** 63, 1.5, "", "x", "ünï \U0001F600", True, False, [], [1, "a", None],
    {"error": {"type": "T", "message": "m"}}, {"value": 1},
], ids=lambda v: repr(v))
def test_a_value_reply_round_trips(value: Any) -> None:
    assert parse_reply(value_reply(value)) == (value, None)


@pytest.mark.parametrize("kind, message", [
    ("StewardError", "spark-steward: boom"), ("CheckpointNotFound", ""),
    ("NotAttached", "ünï\nsecond line \"quoted\""),
], ids=["steward", "empty-message", "unicode-multiline"])
def test_an_error_reply_round_trips(kind: str, message: str) -> None:
    assert parse_reply(error_reply(kind, message)) == (None, (kind, message))


def test_a_value_wins_over_an_error_and_null_is_a_value() -> None:
    assert parse_reply('{"value": null}') == (None, None)
    assert parse_reply('{"value": 2, "error": {"type": "T", "message": "m"}}') == (2, None)


NEITHER = "the reply has neither a value nor an error"


@pytest.mark.parametrize("text, fragment", [
    ("", "the reply is not JSON"), ("value=1", "the reply is not JSON"),
    ("{}", NEITHER), ("[]", NEITHER), ("null", NEITHER), ('"value"', NEITHER), ("1", NEITHER),
    ('{"values": 1}', NEITHER), ('{"error": null}', NEITHER), ('{"error": "boom"}', NEITHER),
    ('{"error": ["T", "m"]}', NEITHER), ('{"error": {}}', NEITHER),
    ('{"error": {"type": "T"}}', NEITHER), ('{"error": {"message": "m"}}', NEITHER),
    ('{"error": {"type": 1, "message": "m"}}', NEITHER),
    ('{"error": {"type": "T", "message": null}}', NEITHER),
    ('{"error": {"type": "T", "message": ["m"]}}', NEITHER),
], ids=["empty", "not-json", "empty-object", "list", "null", "string", "number", "other-key",
        "error-null", "error-str", "error-list", "error-empty", "no-message", "no-type",
        "type-int", "message-null", "message-list"])
def test_reply_refusals(text: str, fragment: str) -> None:
    with pytest.raises(MalformedCommand, match=re.escape(fragment)):
        parse_reply(text)
