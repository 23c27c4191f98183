"""records.py: checksummed envelopes round-trip; anything torn or tampered is RecordCorrupt."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward.checksum import crc32c_of, format_crc
from spark_steward.errors import ChecksumMismatch, RecordCorrupt
from spark_steward.records import FORMAT, decode_record, encode_record

WHERE = "s3://bucket/prefix/applications/app-1.json"
BODY = {"app_id": "app-1", "pid": 4242, "started_at": 1700000000.25, "finished_at": None,
        "tags": ["a", "b"], "name": "d\u00e9mo \u2603 \U0001F600"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


def _corrupt(data: bytes) -> RecordCorrupt:
    with pytest.raises(RecordCorrupt) as info:
        decode_record(data, WHERE)
    assert WHERE in str(info.value)
    return info.value


def test_round_trip() -> None:
    data = encode_record(BODY)
    assert isinstance(data, bytes) and data.endswith(b"\n")
    assert decode_record(data, WHERE) == BODY


def test_envelope_layout() -> None:
    envelope = json.loads(encode_record(BODY))
    assert set(envelope) == {"format", "crc32c", "body"}
    assert envelope["format"] == FORMAT == 1
    canonical = json.dumps(BODY, sort_keys=True, separators=(",", ":")).encode()
    assert envelope["crc32c"] == format_crc(crc32c_of(canonical))
    assert len(envelope["crc32c"]) == 8


def test_key_order_does_not_matter() -> None:
    a = encode_record({"x": 1, "y": 2})
    b = encode_record({"y": 2, "x": 1})
    assert a == b


@given(json_values)
def test_round_trip_property(body: Any) -> None:
    assert decode_record(encode_record(body), WHERE) == body


def test_every_single_byte_flip_is_detected() -> None:
    data = encode_record({"app_id": "a", "n": 1})
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        _corrupt(bytes(flipped))


def test_a_changed_body_value_fails_verification() -> None:
    data = encode_record(BODY)
    tampered = data.replace(b'"pid": 4242', b'"pid": 4243')
    assert tampered != data
    error = _corrupt(tampered)
    assert "fails verification" in str(error)


def test_changed_digit_in_crc_fails_verification() -> None:
    envelope = json.loads(encode_record(BODY))
    crc = envelope["crc32c"]
    envelope["crc32c"] = ("0" if crc[0] != "0" else "1") + crc[1:]
    error = _corrupt(json.dumps(envelope).encode())
    assert crc in str(error) or envelope["crc32c"] in str(error)


@pytest.mark.parametrize("crc", ["00000000", "", "ZZZZZZZZ", 0, None])
def test_wrong_crc(crc: object) -> None:
    envelope = json.loads(encode_record(BODY))
    envelope["crc32c"] = crc
    _corrupt(json.dumps(envelope).encode())


def test_truncation_anywhere_is_detected() -> None:
    data = encode_record(BODY)
    # data[:-1] only drops the trailing newline and is still the complete envelope.
    for n in range(len(data) - 1):
        _corrupt(data[:n])


@pytest.mark.parametrize("fmt", [0, 2, "1", None])
def test_unknown_format(fmt: object) -> None:
    envelope = json.loads(encode_record(BODY))
    envelope["format"] = fmt
    error = _corrupt(json.dumps(envelope).encode())
    assert "unknown format" in str(error) and repr(fmt) in str(error)


def test_missing_format() -> None:
    envelope = json.loads(encode_record(BODY))
    del envelope["format"]
    assert "unknown format" in str(_corrupt(json.dumps(envelope).encode()))


@pytest.mark.parametrize("data", [
    b"",
    b"garbage",
    b"\xff\xfe\x00",
    b"[]",
    b"null",
    b"42",
    b'"body"',
    b'{"format": 1}',
    b'{"format": 1, "body": {}}',
    b'{"format": 1, "crc32c": "00000000"}',
])
def test_not_a_record(data: bytes) -> None:
    _corrupt(data)


def test_record_corrupt_is_a_checksum_mismatch() -> None:
    assert isinstance(_corrupt(b"x"), ChecksumMismatch)
