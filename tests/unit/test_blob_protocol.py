"""The blob server's framing and handshake helpers, without sockets."""

from __future__ import annotations

import io
import struct
from typing import Any, Callable

import pytest

from spark_steward.blob.protocol import (PeerClosed, auth_proof, encode_frame, exact_reader,
                                         new_nonce, proof_matches, read_frame)
from spark_steward.errors import BlobProtocolError


class _Stream:
    """A byte stream that records how much was asked of it."""

    def __init__(self, data: bytes) -> None:
        self._io = io.BytesIO(data)
        self.requested: list[int] = []

    def recv_exactly(self, n: int) -> bytes:
        self.requested.append(n)
        return self._io.read(n)

    @property
    def left(self) -> int:
        return len(self._io.getvalue()) - self._io.tell()


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("obj", [
    {"op": "get", "key": "ab" * 32, "scope": "_app"},
    {},
    {"nested": {"list": [1, 2.5, None, True], "text": "ünïcödé ✓"}},
])
def test_frame_round_trips(obj: dict[str, Any]) -> None:
    stream = _Stream(encode_frame(obj))
    assert read_frame(stream.recv_exactly, 65536) == obj
    assert stream.left == 0


def test_consecutive_frames_are_read_one_at_a_time() -> None:
    stream = _Stream(encode_frame({"n": 1}) + encode_frame({"n": 2}) + b"raw body")
    assert read_frame(stream.recv_exactly, 1024) == {"n": 1}
    assert read_frame(stream.recv_exactly, 1024) == {"n": 2}
    assert stream.left == len(b"raw body")


def test_frame_length_is_big_endian_prefix() -> None:
    frame = encode_frame({"a": 1})
    assert frame[:4] == struct.pack(">I", len(frame) - 4)


def test_oversized_declared_length_is_rejected_without_reading_the_body() -> None:
    stream = _Stream(struct.pack(">I", 2**32 - 1) + b"{}")
    with pytest.raises(BlobProtocolError, match=r"4294967295.*65536"):
        read_frame(stream.recv_exactly, 65536)
    assert stream.requested == [4]


def test_length_one_past_the_limit_is_rejected_and_the_limit_itself_accepted() -> None:
    body = b'{"p":"' + b"x" * 100 + b'"}'
    with pytest.raises(BlobProtocolError, match="exceeds the limit"):
        read_frame(_Stream(_framed(body)).recv_exactly, len(body) - 1)
    assert read_frame(_Stream(_framed(body)).recv_exactly, len(body)) == {"p": "x" * 100}


def test_zero_length_frame_is_rejected() -> None:
    with pytest.raises(BlobProtocolError, match="empty frame"):
        read_frame(_Stream(struct.pack(">I", 0)).recv_exactly, 1024)


@pytest.mark.parametrize("data, received", [
    (b"\x00\x00", "2 of 4 length bytes"),
    (_framed(b'{"op": "get"}')[:-3], "10 of 13 bytes"),
])
def test_truncated_frame_is_reported(data: bytes, received: str) -> None:
    with pytest.raises(BlobProtocolError, match=f"truncated frame.*{received}") as info:
        read_frame(_Stream(data).recv_exactly, 1024)
    assert not isinstance(info.value, PeerClosed)


def test_close_between_frames_is_a_clean_end() -> None:
    with pytest.raises(PeerClosed):
        read_frame(_Stream(b"").recv_exactly, 1024)


@pytest.mark.parametrize("body, reason", [
    (b"{not json", "not valid JSON"),
    (b'{"a": 1} trailing', "not valid JSON"),
    (b"\xff\xfe{}", "not valid UTF-8"),
    (b"[" * 50_000 + b"]" * 50_000, "not valid JSON"),   # nesting deep enough to recurse
])
def test_invalid_frame_content_is_rejected(body: bytes, reason: str) -> None:
    with pytest.raises(BlobProtocolError, match=reason):
        read_frame(_Stream(_framed(body)).recv_exactly, 1 << 20)


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"42", b"null"])
def test_json_that_is_not_an_object_is_rejected(body: bytes) -> None:
    with pytest.raises(BlobProtocolError, match="expected an object"):
        read_frame(_Stream(_framed(body)).recv_exactly, 1024)


@pytest.mark.parametrize("bad", [[1, 2], {"x": float("nan")}, {"x": {1, 2}}])
def test_encoding_something_that_is_not_a_json_object_is_a_sender_bug(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        encode_frame(bad)


def test_exact_reader_keeps_reading_short_receives_and_stops_at_eof() -> None:
    data = io.BytesIO(b"abcdefgh")

    def trickle(view: memoryview) -> int:  # one byte per call, like a slow peer
        return data.readinto(view[:1])

    recv_exactly: Callable[[int], bytes] = exact_reader(trickle)
    assert recv_exactly(5) == b"abcde"
    assert recv_exactly(10) == b"fgh"
    assert recv_exactly(1) == b""


def test_auth_proof_depends_on_secret_and_nonce() -> None:
    nonce, other_nonce = new_nonce(), new_nonce()
    assert nonce != other_nonce and len(nonce) == 64
    proof = auth_proof("s3cret", nonce)
    assert proof == auth_proof("s3cret", nonce)
    assert proof != auth_proof("s3cret!", nonce)
    assert proof != auth_proof("s3cret", other_nonce)
    assert "s3cret" not in proof


def test_proof_matches_only_the_right_answer() -> None:
    nonce = new_nonce()
    assert proof_matches("k", nonce, auth_proof("k", nonce))
    assert not proof_matches("k", nonce, auth_proof("other", nonce))
    assert not proof_matches("k", nonce, auth_proof("k", new_nonce()))
    assert not proof_matches("k", nonce, None)
    assert not proof_matches("k", nonce, 12345)
    assert not proof_matches("k", nonce, "é" * 64)
