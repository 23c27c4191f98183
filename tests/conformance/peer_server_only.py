"""What only the executor JVM's peer blob server does (jvm-shim ``PeerServer``), next to the
suite both servers pass (tests/conformance/test_blob_serving.py, whose Java class mixes these
in and so shares its JVM): ``have`` requests, the have-files of downloads in progress (served
piece by piece as their flags say, never believed when they could lead elsewhere), links in
place of a scope, the endpoint file's life, a peer key that is not there yet, and the upload
cap.

A download in progress is laid out as the Python side lays it out: a temp file plus its
``.<key>.tmp-have`` flags beside the complete blobs in ``blob-cache/<scope>/<key>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.blob_servers import (Client, JavaPeerServer, assert_error, authenticated,
                                            fetch)
from tests.conformance.vectors.blob_wire import (COMPLETE, COMPLETE_KEY, MISSING_KEY, PIECE,
                                                 SCOPE, SECRET, SIZE, bad_requests, key_of,
                                                 piece_request, pieces)

PARTIAL = os.urandom(4 * PIECE - 100)
PARTIAL_KEY = hashlib.sha256(PARTIAL).hexdigest()
TEMP_SUFFIX = "0123456789ab"


def _write_partial(scope_dir: Path, key: str, data: bytes, flags: str,
                   suffix: str = TEMP_SUFFIX, header: str | None = None) -> Path:
    """A download in progress: the temp file (whole content: only the flags say what counts)
    and its have-file."""
    temp = scope_dir / f".{key}.tmp-{suffix}"
    temp.write_bytes(data)
    name = temp.name if header is None else header
    (scope_dir / f".{key}.tmp-have").write_bytes(f"{name}\n{flags}".encode("ascii"))
    return temp


def have(key: Any, size: Any, scope: Any = SCOPE, piece_size: Any = PIECE) -> dict[str, Any]:
    """A have request; Any, since the tests also send what no client should."""
    return {"op": "have", "key": key, "scope": scope, "size": size, "piece_size": piece_size}


HAVE_REQUESTS = [(vector, {k: v for k, v in request.items() if k != "index"} | {"op": "have"}
                  if request.get("op") == "piece" else request, field)
                 for vector, request, field in bad_requests() if field != "index"
                 and not vector.startswith("op-")]
HAVE_REQUESTS += [
    ("op-get", {**have(COMPLETE_KEY, SIZE), "op": "get"}, "op"),  # the driver's op, not a peer's
    ("op-upper", {**have(COMPLETE_KEY, SIZE), "op": "HAVE"}, "op"),
]


def _bad_have_file(scope_dir: Path, case: str) -> tuple[str, int]:
    """A download in progress whose have-file must not be believed; every piece it names is
    really there, so only the check of the have-file stands between a request and its bytes."""
    key, data = key_of(case), PARTIAL
    other = key_of(case + "-other")
    if case == "names-passwd":
        # blob-cache/_app/../../etc/passwd is <app dir>/etc/passwd: make it exist.
        target = scope_dir.parent.parent / "etc" / "passwd"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(data)
        _write_partial(scope_dir, key, data, "1111", header="../../etc/passwd")
    elif case == "names-other-key":
        _write_partial(scope_dir, other, data, "1111")
        _write_partial(scope_dir, key, b"", "1111", header=f".{other}.tmp-{TEMP_SUFFIX}")
    elif case == "names-upper-hex":
        _write_partial(scope_dir, key, data, "1111", suffix="0123456789AB")
    elif case == "names-absolute":
        temp = _write_partial(scope_dir, key, data, "1111")
        _write_partial(scope_dir, key, data, "1111", header=str(temp))
    elif case == "flags-short":
        _write_partial(scope_dir, key, data, "111")
    elif case == "flags-long":
        _write_partial(scope_dir, key, data, "11111")
    elif case == "flags-newline":
        _write_partial(scope_dir, key, data, "1111\n")
    elif case == "flags-other-chars":
        _write_partial(scope_dir, key, data, "11x1")
    elif case == "have-is-link":
        real = scope_dir.parent.parent / f"have-{case}"
        real.write_bytes(f".{key}.tmp-{TEMP_SUFFIX}\n1111".encode())
        (scope_dir / f".{key}.tmp-{TEMP_SUFFIX}").write_bytes(data)
        (scope_dir / f".{key}.tmp-have").symlink_to(real)
    elif case == "temp-is-link":
        real = scope_dir.parent.parent / f"temp-{case}"
        real.write_bytes(data)
        _write_partial(scope_dir, key, data, "1111").unlink()
        (scope_dir / f".{key}.tmp-{TEMP_SUFFIX}").symlink_to(real)
    elif case == "temp-short":
        _write_partial(scope_dir, key, data[:3 * PIECE], "1111")
    else:
        raise AssertionError(case)
    return key, len(data)


class JavaPeerServerOnly:
    """Tests of what only the JVM's server does; mixed into the suite's Java class, whose
    ``server`` (a :class:`JavaPeerServer`) they use."""

    @pytest.fixture
    def partial(self, server: JavaPeerServer) -> str:
        """A download in progress on the server's host: pieces 0 and 2 of 4 flagged."""
        if not (server.scope_dir / f".{PARTIAL_KEY}.tmp-have").exists():
            _write_partial(server.scope_dir, PARTIAL_KEY, PARTIAL, "1010")
        return PARTIAL_KEY

    # -- have ------------------------------------------------------------------------------

    def test_have_of_a_complete_blob_a_missing_one_and_another_size(
            self, server: JavaPeerServer) -> None:
        with authenticated(server.port) as client:
            assert client.request(have(COMPLETE_KEY, SIZE)) == {"ok": True, "complete": True}
            assert_error(client.request(have(MISSING_KEY, 1000)), "not_found")
            assert_error(client.request(have(COMPLETE_KEY, SIZE - 1)), "not_found")
            assert_error(client.request(have(COMPLETE_KEY, SIZE, scope="other.1")), "not_found")
            assert fetch(client, piece_request(COMPLETE_KEY, SIZE, 1)) == pieces(COMPLETE)[1]

    @pytest.mark.parametrize("request_,field", [(r, f) for _, r, f in HAVE_REQUESTS],
                             ids=[vector for vector, _, _ in HAVE_REQUESTS])
    def test_an_invalid_have_request_is_refused_and_the_connection_stays(
            self, server: JavaPeerServer, request_: dict[str, Any], field: str) -> None:
        with authenticated(server.port) as client:
            assert_error(client.request(request_), "bad_request", field)
            assert client.request(have(COMPLETE_KEY, SIZE)) == {"ok": True, "complete": True}

    # -- downloads in progress -------------------------------------------------------------

    def test_a_download_in_progress_serves_only_its_flagged_pieces(
            self, server: JavaPeerServer, partial: str) -> None:
        parts = pieces(PARTIAL)
        with authenticated(server.port) as client:
            assert client.request(have(partial, len(PARTIAL))) == {
                "ok": True, "complete": False, "have": "1010"}
            assert fetch(client, piece_request(partial, len(PARTIAL), 0)) == parts[0]
            assert fetch(client, piece_request(partial, len(PARTIAL), 2)) == parts[2]
            for index in (1, 3):
                assert_error(client.request(piece_request(partial, len(PARTIAL), index)),
                             "not_found")
            # A flag flipped later is seen by the next request.
            have_file = server.scope_dir / f".{partial}.tmp-have"
            flags = have_file.read_bytes()
            try:
                have_file.write_bytes(flags[:-1] + b"1")
                assert fetch(client, piece_request(partial, len(PARTIAL), 3)) == parts[3]
            finally:
                have_file.write_bytes(flags)

    @pytest.mark.parametrize("case", [
        "names-passwd", "names-other-key", "names-upper-hex", "names-absolute", "flags-short",
        "flags-long", "flags-newline", "flags-other-chars", "have-is-link", "temp-is-link",
        "temp-short"])
    def test_a_have_file_that_cannot_be_trusted_serves_nothing(self, server: JavaPeerServer,
                                                               case: str) -> None:
        key, size = _bad_have_file(server.scope_dir, case)
        with authenticated(server.port) as client:
            if case != "temp-short":  # its have-file is fine: only the last piece is missing
                assert_error(client.request(have(key, size)), "not_found")
            for index in range(4):
                if case == "temp-short" and index < 3:
                    assert fetch(client, piece_request(key, size, index)) == \
                        pieces(PARTIAL)[index]
                else:
                    assert_error(client.request(piece_request(key, size, index)), "not_found")

    def test_a_link_in_place_of_a_scope_is_not_followed(self, server: JavaPeerServer) -> None:
        outside = server.app_dir.parent / "outside"
        outside.mkdir(exist_ok=True)
        (outside / COMPLETE_KEY).write_bytes(COMPLETE)
        (server.scope_dir.parent / "linked.1").symlink_to(outside, target_is_directory=True)
        with authenticated(server.port) as client:
            assert_error(client.request(have(COMPLETE_KEY, SIZE, scope="linked.1")), "not_found")
            assert_error(client.request(piece_request(COMPLETE_KEY, SIZE, 0, scope="linked.1")),
                         "not_found")

    # -- the endpoint file, a key that is not there yet, the upload cap --------------------

    def test_endpoint_file_key_not_ready_and_upload_cap(self, tmp_path: Path) -> None:
        rate = 512 << 10
        srv = JavaPeerServer(tmp_path, max_connections=2, handshake_timeout=3.0,
                             network_timeout=10.0, rate=rate, key=None, executor="exec-1")
        try:
            port = srv.port  # it listens, and has written its endpoint file
            peers = srv.app_dir / "peers"
            endpoint = peers / "exec-1.json"
            assert json.loads(endpoint.read_text()) == {"host": "127.0.0.1", "port": port,
                                                        "executor": "exec-1"}
            assert stat.S_IMODE(endpoint.stat().st_mode) == 0o600
            assert stat.S_IMODE(peers.stat().st_mode) == 0o700
            assert sorted(p.name for p in peers.iterdir()) == ["exec-1.json"]  # no temp left
            with Client(srv.port) as client:
                assert_error(client.prove(), "auth", "not ready")
                assert client.closed_by_server()
            (peers / "key").write_text(SECRET)  # no newline this time
            big_piece = 128 << 10
            data = os.urandom(4 * big_piece)
            key = hashlib.sha256(data).hexdigest()
            scope_dir = srv.app_dir / "blob-cache" / "job.3"
            scope_dir.mkdir(parents=True)
            (scope_dir / key).write_bytes(data)
            with authenticated(srv.port) as client:
                started = time.monotonic()
                got = b"".join(fetch(client, piece_request(key, len(data), i, scope="job.3",
                                                           piece_size=big_piece))
                               for i in range(4))
                elapsed = time.monotonic() - started
            assert got == data
            assert elapsed >= 0.8 * len(data) / rate, elapsed  # 512 KiB at 512 KiB/s
        finally:
            srv.stop()
        assert not endpoint.exists()
        log = srv.logged()
        assert "served 4 pieces (524288 bytes); 1 failed authentications" in log, log[-2000:]
