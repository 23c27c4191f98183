"""Issue 21 through real sockets and real files: the blob server, depot, stores and executor
cache under someone who lacks the secret, someone who can write a copy of a blob, odd files
under a blob's name and a flood of made-up ``use`` reports.

Every test runs a good client next to the attack and shows it is served, as in
test_blob_server_requests.py (the same style of server, built directly; here with the real
BlobDepot, LocalBlobStore and HaBlobStore behind it). Forged copies have the blob's size *and*
crc32c (tests/spark/scripts/crc32c_forge.py): only a check against the key can tell them apart.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import crc32c
import pytest

from spark_steward.blob import client as client_module
from spark_steward.blob import server as server_module
from spark_steward.blob import stores as stores_module
from spark_steward.blob.cache import BlobCache, BlobSources
from spark_steward.blob.client import BlobClient
from spark_steward.blob.depot import BlobDepot
from spark_steward.blob.keys import BlobKey, BlobKind, BlobRef
from spark_steward.blob.lifecycle import PENDING_STAGES_KEPT, RECEIVING_TASKS_KEPT
from spark_steward.blob.protocol import encode_frame
from spark_steward.blob.server import BlobServer, LocatedBlob
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore, Received
from spark_steward.errors import BlobNotFound, BlobServerUnavailable, StewardError
from spark_steward.storage import Storage
from tests.faults import blob_wire
from tests.spark.scripts.crc32c_forge import forged_twin

SECRET = "hardening-secret-9d2e"
SCOPE = "_app"
APP = "app-1"
SCRIPTS = Path(__file__).parent / "scripts"

DATA = os.urandom((1 << 20) + 4321)
OTHER = os.urandom((512 << 10) + 77)


# -- fixtures ---------------------------------------------------------------------------------

@pytest.fixture
def ha_storage(tmp_path: Path) -> Storage:
    return Storage.from_url(str(tmp_path / "ha"))


def make_depot(tmp_path: Path, ha_storage: Storage | None, io_timeout: float = 10.0
               ) -> BlobDepot:
    return BlobDepot(LocalBlobStore(tmp_path / "local"),
                     HaBlobStore(ha_storage, APP) if ha_storage is not None else None,
                     io_timeout=io_timeout)


@pytest.fixture
def depot(tmp_path: Path, ha_storage: Storage) -> BlobDepot:
    return make_depot(tmp_path, ha_storage)


Serve = Callable[..., tuple[BlobServer, tuple[str, int]]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """``serve(depot or (locate, on_message), **options)``: a started server on 127.0.0.1."""
    servers: list[BlobServer] = []

    def start(backend: BlobDepot | tuple[Any, Any], **options: Any
              ) -> tuple[BlobServer, tuple[str, int]]:
        locate, on_message = ((backend.locate, backend.handle_message)
                              if isinstance(backend, BlobDepot) else backend)
        server = BlobServer(host="127.0.0.1", port=0, secret=SECRET, locate=locate,
                            on_message=on_message, **{"timeout": 30.0, **options})
        servers.append(server)
        return server, server.start()

    yield start
    for server in servers:
        server.close()


def ha_file(tmp_path: Path, ref: BlobRef) -> Path:
    return tmp_path / "ha" / "apps" / APP / "blobs" / ref.scope / ref.key.digest


def local_file(depot: BlobDepot, ref: BlobRef) -> Path:
    return depot.local.path(ref.scope, ref.key)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_once(address: tuple[str, int], key: BlobKey, *, timeout: float = 5.0) -> bytes:
    """One get on a fresh connection, hung up afterwards: what an executor's get does."""
    with BlobClient(*address, SECRET, timeout=timeout) as client:
        out = io.BytesIO()
        received = client.fetch(key, SCOPE, out)
    assert received.sha256 == sha(out.getvalue()) and received.size == len(out.getvalue())
    return out.getvalue()


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


class GoodClient(threading.Thread):
    """A well-behaved executor next to the attack: fetches ``key`` again and again, each get on
    a fresh connection with the executor's retries, and checks every byte against ``data``."""

    def __init__(self, address: tuple[str, int], key: BlobKey, data: bytes, *,
                 attempts: int = 3, pause: float = 0.01) -> None:
        super().__init__(name="good-client", daemon=True)
        self.address, self.key, self.data = address, key, data
        self.attempts, self.pause = attempts, pause
        self.stop = threading.Event()
        self.served = 0        # gets that returned the right bytes
        self.tries = 0         # connections tried
        self.refusals: list[str] = []   # tries that failed (retried)
        self.lost: list[str] = []       # gets that failed after every retry
        self.wrong = 0         # gets that returned other bytes: must never happen

    def get(self) -> bool:
        problem = ""
        for attempt in range(1, self.attempts + 1):
            self.tries += 1
            try:
                data = fetch_once(self.address, self.key)
            except (BlobServerUnavailable, OSError) as e:
                problem = f"{type(e).__name__}: {e}"
                self.refusals.append(problem)
                time.sleep(min(2.0, 0.1 * 2 ** attempt))  # as BlobCache retries
                continue
            if data != self.data:
                self.wrong += 1
                return False
            self.served += 1
            return True
        self.lost.append(problem)
        return False

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.get()
            except Exception as e:  # BlobNotFound and the like: reported by assert_served
                self.lost.append(f"{type(e).__name__}: {e}")
                return
            self.stop.wait(self.pause)

    def __enter__(self) -> GoodClient:
        self.start()
        wait_for(lambda: self.served > 0 or bool(self.lost), 10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive()

    def assert_served(self, at_least: int = 1) -> None:
        assert self.wrong == 0, "the good client got wrong bytes"
        assert not self.lost, f"good gets failed after every retry: {self.lost[:3]}"
        assert self.served >= at_least, f"only {self.served} gets served"


RawConnection = functools.partial(blob_wire.RawConnection, secret=SECRET)


def in_thread(work: Callable[[], Any], name: str) -> tuple[threading.Thread, list[Any]]:
    """Runs ``work`` in a thread; the list gets its result or the exception it raised."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as e:  # handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, outcome


def finished(thread: threading.Thread, outcome: list[Any], seconds: float) -> Any:
    thread.join(seconds)
    assert not thread.is_alive(), f"{thread.name} did not finish within {seconds}s"
    return outcome[0]


# -- 1. idle sockets and slow handshakes ------------------------------------------------------

def test_idle_sockets_from_many_addresses_do_not_lock_out_a_good_client(
        depot: BlobDepot, serve: Serve) -> None:
    """An attacker process holds idle connections from 127.0.0.2 (64 of them, per-peer bound
    4) and from 38 more addresses (8 each: 300+ sockets for a global bound of 16), re-opening
    each one the server drops, for 5 s. The good executor still gets (nearly) every try
    served, every get within its retries, and the server's threads stay bounded."""
    ref = depot.put_bytes(OTHER)
    bounds = {"max_unauthenticated": 16, "max_unauthenticated_per_peer": 4,
              "max_connections": 8, "handshake_timeout": 0.5}
    srv, (host, port) = serve(depot, **bounds)
    threads_before = threading.active_count()
    most_threads = [threads_before]
    sampling = threading.Event()

    def sample_threads() -> None:
        while not sampling.wait(0.005):
            most_threads[0] = max(most_threads[0], threading.active_count())

    sampler = threading.Thread(target=sample_threads, daemon=True)
    sampler.start()
    sources = ["127.0.0.2=64", *(f"127.0.0.{i}=8" for i in range(3, 41))]
    attacker = subprocess.Popen([sys.executable, str(SCRIPTS / "idle_socket_attacker.py"),
                                 host, str(port), "5", *sources],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    good = GoodClient((host, port), ref.key, OTHER, pause=0.0)
    durations: list[float] = []
    try:
        wait_for(lambda: srv.stats.connections_dropped > 50, 10)  # the attack is on
        started = time.monotonic()
        while attacker.poll() is None and time.monotonic() - started < 8:
            began = time.monotonic()
            good.get()
            durations.append(time.monotonic() - began)
        out, err = attacker.communicate(timeout=30)
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait(10)
        sampling.set()
        sampler.join(5)
    assert attacker.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    stats = srv.stats
    refused = len(good.refusals)
    summary = (f"attacker {report}; good client: {good.served} gets served, {good.tries} tries, "
               f"{refused} refused ({good.refusals[:2]}), {len(good.lost)} lost, get took "
               f"{statistics.median(durations):.3f}s median, {max(durations):.3f}s at most; server "
               f"{stats}; most threads {most_threads[0]} (before {threads_before})")
    assert report["opened"] > 1000 and stats.connections_dropped > 500, summary
    assert good.wrong == 0, summary
    # At least a get a second. With two busy loops beside the test on this machine's 2 cores
    # a get took ~1 s (the attacker fills the accept queue: SYNs wait for a retransmit) and
    # 5-6 were served, before the thread bound as after it.
    assert good.served >= 4, summary
    assert not good.lost, "gets failed after every retry: " + summary
    assert refused <= max(3, 0.05 * good.tries), summary
    # The server holds at most max_connections + 2 * max_unauthenticated connection threads
    # (the next test shows the bound itself); 8 more for threads past their unregistering and
    # the test's own.
    bound = 2 * bounds["max_unauthenticated"] + bounds["max_connections"] + 8
    assert most_threads[0] < threads_before + bound, summary
    # Slower than without the attack (~2 ms: it waits behind the attacker's connections in
    # the accept queue; observed 0.13-0.25 s median here), but nowhere near a timeout.
    assert statistics.median(durations) < 2.0, summary
    # Afterwards: the attacker's connections are gone and the server is as good as new.
    wait_for(lambda: srv.stats.connections_unauthenticated == 0, 5)
    wait_for(lambda: srv.stats.connections_open == 0, 5)
    assert fetch_once((host, port), ref.key) == OTHER


def test_connection_threads_stay_bounded_when_dropped_ones_end_late(
        depot: BlobDepot, serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dropped handshake's thread normally ends at once: its socket is shut down. On a
    starved CPU those threads run late; here the shutdown does nothing at all, so each ends
    only at its handshake deadline. 40 idle connections against 4 in the handshake and 2
    authenticated: the server fills its 2 + 2 * 4 connection threads and holds no more (the
    rest wait in the accept queue), and once the idle sockets go a good client is served."""
    monkeypatch.setattr(server_module._Connection, "cut", lambda self: None)
    ref = depot.put_bytes(OTHER)
    srv, address = serve(depot, max_unauthenticated=4, max_unauthenticated_per_peer=4,
                         max_connections=2, handshake_timeout=1.0)
    idle = [socket.create_connection(address) for _ in range(40)]
    most = 0
    try:
        wait_for(lambda: srv.stats.connections_dropped >= 6)  # the first round is in
        sampled_until = time.monotonic() + 2.5  # two handshake deadlines: rounds end, refill
        while time.monotonic() < sampled_until:
            most = max(most, srv.stats.connections_open)
            time.sleep(0.002)
    finally:
        for sock in idle:
            sock.close()
    assert most == 2 + 2 * 4, f"most connection threads {most}; server {srv.stats}"
    assert srv.stats.connections_dropped >= 12, srv.stats  # and later rounds came in
    assert fetch_once(address, ref.key, timeout=10.0) == OTHER
    wait_for(lambda: srv.stats.connections_open == 0, 10)


# -- 2. a thread that cannot start ------------------------------------------------------------

class _Starts:
    """The server module's view of ``threading``: Thread.start fails ``failures`` times once
    armed, as it does under a container's pids limit ("can't start new thread")."""

    def __init__(self) -> None:
        self.failures = 0
        self.failed = 0
        self.lock = threading.Lock()
        starts = self

        class Thread(threading.Thread):
            def start(self) -> None:
                with starts.lock:
                    fail = starts.failures > 0
                    if fail:
                        starts.failures -= 1
                        starts.failed += 1
                if fail:
                    raise RuntimeError("can't start new thread")
                super().start()

        self.Thread = Thread

    def __getattr__(self, name: str) -> Any:
        return getattr(threading, name)


def test_connection_threads_that_cannot_start_refuse_only_their_connections(
        depot: BlobDepot, serve: Serve, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    ref = depot.put_bytes(OTHER)
    starts = _Starts()
    monkeypatch.setattr(server_module, "threading", starts)
    srv, address = serve(depot)
    caplog.set_level(logging.WARNING, logger="spark_steward.blob.server")
    tries = len(client_module._HANDSHAKE_RETRY_PAUSES) + 1  # a client's handshake attempts
    n = tries + 2
    with BlobClient(*address, SECRET, timeout=5) as connected:  # authenticated before
        out = io.BytesIO()
        connected.fetch(ref.key, SCOPE, out)
        assert out.getvalue() == OTHER
        # Every try of one client finds no thread: it gives up, naming the server.
        starts.failures = tries
        with pytest.raises(BlobServerUnavailable, match=f"{address[0]}:{address[1]}"):
            fetch_once(address, ref.key)
        # The connection that was already up is served meanwhile.
        out = io.BytesIO()
        connected.fetch(ref.key, SCOPE, out)
        assert out.getvalue() == OTHER
        # Two failures are absorbed by the next client's own retries.
        starts.failures = 2
        fetch_once(address, ref.key)
    assert starts.failed == n
    # The acceptor lives on: new connections are served again.
    with GoodClient(address, ref.key, OTHER) as good:
        wait_for(lambda: good.served >= 3)
    good.assert_served(3)
    stats = srv.stats
    assert stats.thread_start_failures == n
    assert stats.connections_refused == n
    wait_for(lambda: srv.stats.connections_open == 0)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR
              and "can't start new thread" in r.getMessage()]
    assert errors, [r.getMessage() for r in caplog.records]
    assert "no thread could be started" in errors[0].getMessage()
    assert len(errors) == 1, "a storm of failures is throttled in the log"
    started = time.monotonic()
    srv.close()  # must not raise
    assert time.monotonic() - started < 6
    with pytest.raises(BlobServerUnavailable):
        fetch_once(address, ref.key, timeout=2)


# -- 3. verification against the key ----------------------------------------------------------

def _edit_in_place(path: Path, data: bytes) -> None:
    """Rewrites ``path`` in place (same inode and size) and sets its times back."""
    st = os.stat(path)
    time.sleep(0.02)  # past the coarse timestamp tick of the write that made the file
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size,
                                                                st.st_mtime_ns)


def test_local_copy_edited_in_place_with_its_mtime_restored_is_checked_again(
        depot: BlobDepot, serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """The identity a verification is remembered under includes the ctime, which cannot be set
    back: an in-place edit is checked again (crc32c: the local dir is this application's own,
    private) and a copy that fails is replaced from HA. A same-crc forgery of the *local* copy
    passes that cheap check by design (only the application's user can write there); the
    trust boundaries are the HA copy and the network, below."""
    ref = depot.put_bytes(DATA)
    other = depot.put_bytes(OTHER)
    checks: list[int] = []
    real_crc_of_fd = stores_module.crc_of_fd

    def counting_crc_of_fd(fd: int) -> tuple[int, int]:
        checks.append(fd)
        return real_crc_of_fd(fd)

    monkeypatch.setattr(stores_module, "crc_of_fd", counting_crc_of_fd)
    _, address = serve(depot)
    path = local_file(depot, ref)
    with GoodClient(address, other.key, OTHER) as good:
        assert fetch_once(address, ref.key) == DATA
        assert fetch_once(address, ref.key) == DATA
        assert checks == [], "unchanged since the put: served from the remembered identity"
        # Other bytes, other crc32c: detected although inode, size and mtime are unchanged.
        garbled = bytes(b ^ 0x5A for b in DATA[:4096]) + DATA[4096:]
        _edit_in_place(path, garbled)
        assert fetch_once(address, ref.key) == DATA, "restored from HA"
        assert checks, "the in-place edit was not noticed"
        assert path.read_bytes() == DATA
        assert fetch_once(address, ref.key) == DATA
        checked = len(checks)
        # Other bytes, same crc32c: still seen as changed and checked again.
        _edit_in_place(path, forged_twin(DATA))
        fetch_once(address, ref.key)
        assert len(checks) == checked + 1, "the in-place edit was not noticed"
    good.assert_served()


def test_ha_copy_with_forged_bytes_of_the_same_crc_is_refused_everywhere(
        tmp_path: Path, depot: BlobDepot, ha_storage: Storage, serve: Serve) -> None:
    """Someone who can write the HA storage replaces a blob's copy there with other bytes of
    the same size and crc32c. The executor cache refuses it and takes the blob from the
    driver; once the driver's own copy is gone too, the driver's restore refuses it, and the
    blob is a clear not-found naming its key, on the driver and on executors. The forged bytes
    never take the blob's name anywhere."""
    ref = depot.put_bytes(DATA)
    other = depot.put_bytes(OTHER)
    forged = forged_twin(DATA)
    assert crc32c.crc32c(forged) == ref.crc32c and len(forged) == ref.size
    ha_file(tmp_path, ref).write_bytes(forged)
    _, address = serve(depot)
    ha = HaBlobStore(ha_storage, APP)
    with GoodClient(address, other.key, OTHER) as good:
        def from_server(r: BlobRef, out: BinaryIO) -> Received:
            with BlobClient(*address, SECRET, timeout=5) as client:
                return client.fetch(r.key, r.scope, out)

        # An executor with both sources: the HA copy is refused, the driver serves the blob.
        cache = BlobCache(tmp_path / "cache-1", BlobSources(ha=ha, fetch_from_server=from_server,
                                                            attempts=2))
        assert cache.get(ref, 1).read_bytes() == DATA
        assert (cache.stats["ha"], cache.stats["server"]) == (0, 1)
        # The driver's copy goes: its restore from HA must refuse the forged bytes.
        local_file(depot, ref).unlink()
        with pytest.raises(BlobNotFound, match=f"HA copy of blob {ref.key}"):
            depot.locate(ref.key, SCOPE)
        with pytest.raises(BlobNotFound, match=ref.key.digest):
            fetch_once(address, ref.key)
        assert not local_file(depot, ref).exists()
        assert [p.name for p in local_file(depot, ref).parent.iterdir()] == [other.key.digest], \
            "no temp file left behind"
        # A fresh executor: every source refuses, the error names the key and both sources.
        cache = BlobCache(tmp_path / "cache-2", BlobSources(ha=ha, fetch_from_server=from_server,
                                                            attempts=2))
        with pytest.raises(BlobNotFound, match=ref.key.digest) as info:
            cache.get(ref, 1)
        # A stored copy that is other bytes is not downloaded again: the next source is asked.
        assert "ha attempt 1" in str(info.value) and "ha attempt 2" not in str(info.value)
        assert "server" in str(info.value)
        assert not cache.path(ref.scope, ref.key).exists()
        assert cache.referenced(ref) == 0
        # An executor with the HA store alone.
        ha_only = BlobCache(tmp_path / "cache-3", BlobSources(ha=ha, attempts=1))
        with pytest.raises(BlobNotFound, match=ref.key.digest):
            ha_only.get(ref, 1)
        assert not ha_only.path(ref.scope, ref.key).exists()
    good.assert_served()
    for root in ("cache-1", "cache-2", "cache-3", "local"):
        for path in (tmp_path / root).rglob("*"):
            if path.is_file() and path.stat().st_size == len(forged):
                assert path.read_bytes() != forged, f"forged bytes kept in {path}"


@pytest.mark.parametrize("into", ["file", "memory"])
def test_server_sending_forged_bytes_with_the_right_crc_is_refused_by_the_executor(
        tmp_path: Path, serve: Serve, into: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server (or anyone on the path) sends other bytes with the blob's own crc32c: the
    transfer's crc check passes, the executor cache's check against the key does not, and the
    bytes never take the blob's name. ``memory``: the cache cannot stream into a file (as for a
    non-regular target), so the client copies through user space and hashes per chunk."""
    ref = BlobRef(BlobKey(sha(DATA)), SCOPE, BlobKind.PERMANENT, len(DATA), crc32c.crc32c(DATA))
    honest = BlobKey(sha(OTHER))
    forged_path, honest_path = tmp_path / "forged", tmp_path / "honest"
    forged_path.write_bytes(forged_twin(DATA))
    honest_path.write_bytes(OTHER)

    def locate(key: BlobKey, scope: str) -> LocatedBlob:
        if key == ref.key:
            return LocatedBlob(open(forged_path, "rb"), ref.size, ref.crc32c)
        if key == honest:
            return LocatedBlob(open(honest_path, "rb"), len(OTHER), crc32c.crc32c(OTHER))
        raise BlobNotFound(f"blob {key} is not stored")

    srv, address = serve((locate, lambda op, request: {}))
    if into == "memory":
        from spark_steward.blob import client as client_module

        monkeypatch.setattr(client_module, "_splice_body", lambda *args: None)
    with BlobClient(*address, SECRET, timeout=5) as client:
        raw = client.fetch(ref.key, SCOPE, io.BytesIO())
    assert raw.crc32c == ref.crc32c and raw.sha256 != ref.key.digest, "the crc is forged"

    def from_server(r: BlobRef, out: BinaryIO) -> Received:
        with BlobClient(*address, SECRET, timeout=5) as client:
            return client.fetch(r.key, r.scope, out)

    with GoodClient(address, honest, OTHER) as good:
        cache = BlobCache(tmp_path / "cache", BlobSources(fetch_from_server=from_server,
                                                          attempts=2))
        with pytest.raises(BlobNotFound, match=ref.key.digest) as info:
            cache.get(ref, 1)
        assert "server attempt 2" in str(info.value) and f"is not blob {ref.key}" in \
            str(info.value)
        assert not cache.path(ref.scope, ref.key).exists()
        leftovers = [p for p in (tmp_path / "cache").rglob("*")
                     if p.is_file() and p.stat().st_size == ref.size]
        assert leftovers == [], f"forged bytes left in the cache: {leftovers}"
        assert cache.referenced(ref) == 0
        # The honest blob from the same server is cached as usual.
        honest_ref = BlobRef(honest, SCOPE, BlobKind.PERMANENT, len(OTHER), crc32c.crc32c(OTHER))
        assert cache.get(honest_ref, 2).read_bytes() == OTHER
    good.assert_served()
    # raw fetch + 2 refused attempts + the honest get + the good client's (counted after the
    # last byte left, which the client may have read first)
    wait_for(lambda: srv.stats.blobs_served == 4 + good.served)



def _with_and_without_ha(tmp_path: Path, ha_storage: Storage, serve: Serve, **options: Any
                         ) -> Iterator[tuple[bool, BlobDepot, BlobRef, BlobRef, tuple[str, int]]]:
    """A served depot holding DATA and OTHER, first with an HA store, then without one."""
    for with_ha in (True, False):
        root = tmp_path / ("with-ha" if with_ha else "without-ha")
        depot = make_depot(root, ha_storage if with_ha else None, **options)
        ref = depot.put_bytes(DATA)
        other = depot.put_bytes(OTHER)
        _, address = serve(depot)
        yield with_ha, depot, ref, other, address

def test_symlink_under_a_blobs_name_is_never_followed(
        tmp_path: Path, ha_storage: Storage, serve: Serve) -> None:
    """A symlink from the driver's store to a file outside it, with forged bytes of the blob's
    crc32c: the target is never served; the link is removed and the blob restored from HA, or
    (without HA) the blob is not found."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "payload"
    forged = forged_twin(DATA)
    target.write_bytes(forged)
    for with_ha, depot, ref, other, address in _with_and_without_ha(tmp_path, ha_storage, serve):
        path = local_file(depot, ref)
        with GoodClient(address, other.key, OTHER) as good:
            path.unlink()
            path.symlink_to(target)
            if with_ha:
                assert fetch_once(address, ref.key) == DATA
                assert path.is_file() and not path.is_symlink()
                assert path.read_bytes() == DATA
            else:
                with pytest.raises(BlobNotFound, match=ref.key.digest):
                    fetch_once(address, ref.key)
                assert not path.is_symlink() and not path.exists()
        good.assert_served()
        assert target.read_bytes() == forged, "the link's target is left alone"


def test_symlink_in_the_drivers_store_is_not_followed_by_a_same_host_executor(
        tmp_path: Path, depot: BlobDepot, ha_storage: Storage, serve: Serve) -> None:
    """An executor on the driver's host links the driver's copy instead of transferring it
    (same-host link). A symlink under the blob's name there, to a file outside the store with
    forged bytes of the blob's crc32c, must be refused as the server refuses it: the task gets
    the true bytes (from HA or the server), never the link target's."""
    ref = depot.put_bytes(DATA)
    other = depot.put_bytes(OTHER)
    _, address = serve(depot)
    target = tmp_path / "outside"
    target.write_bytes(forged_twin(DATA))
    path = local_file(depot, ref)
    path.unlink()
    path.symlink_to(target)

    def from_server(r: BlobRef, out: BinaryIO) -> Received:
        with BlobClient(*address, SECRET, timeout=5) as client:
            return client.fetch(r.key, r.scope, out)

    with GoodClient(address, other.key, OTHER) as good:
        cache = BlobCache(tmp_path / "cache", BlobSources(
            driver_store=depot.local, ha=HaBlobStore(ha_storage, APP),
            fetch_from_server=from_server))
        got = cache.get(ref, 1).read_bytes()
        stats = dict(cache.stats)
    good.assert_served()
    assert got == DATA, (f"the task got the symlink target's forged bytes (same crc32c); "
                         f"cache sources used: {stats}")


# -- 5. odd files under a blob's name, slow restores ------------------------------------------

def test_fifo_under_a_blobs_name_blocks_nothing(
        tmp_path: Path, ha_storage: Storage, serve: Serve) -> None:
    """A FIFO (nobody writing) under a blob's name: the request returns at once (restored from
    HA, or not found without HA) while another blob is fetched and a put goes on."""
    for with_ha, depot, ref, other, address in _with_and_without_ha(tmp_path, ha_storage, serve,
                                                                    io_timeout=2.0):
        path = local_file(depot, ref)
        with GoodClient(address, other.key, OTHER) as good:
            path.unlink()
            os.mkfifo(path)
            served_before = good.served
            started = time.monotonic()
            request, outcome = in_thread(lambda: fetch_once(address, ref.key), "fifo-get")
            put, put_outcome = in_thread(lambda: depot.put_bytes(os.urandom(1000)), "put")
            def task_and_job_events() -> str:
                depot.job_started(7, SCOPE, [70])
                depot.task_ended(700, True)
                depot.job_ended(7, True)
                return "done"

            events, event_outcome = in_thread(task_and_job_events, "events")
            result = finished(request, outcome, 3)
            elapsed = time.monotonic() - started
            assert isinstance(finished(put, put_outcome, 3), BlobRef)
            assert finished(events, event_outcome, 3) == "done"
            wait_for(lambda: good.served > served_before)
        good.assert_served()
        assert elapsed < 2, f"the FIFO request took {elapsed:.2f}s"
        if with_ha:
            assert result == DATA
            assert path.is_file() and path.read_bytes() == DATA
        else:
            assert isinstance(result, BlobNotFound) and ref.key.digest in str(result)
            assert not path.exists()


def test_directory_under_a_blobs_name_is_a_clean_not_found(
        depot: BlobDepot, serve: Serve) -> None:
    """A directory under a blob's name: a ``not_found`` reply naming the blob, no ``internal``
    error or traceback, the connection stays usable and other clients are served."""
    ref = depot.put_bytes(DATA)
    other = depot.put_bytes(OTHER)
    srv, address = serve(depot)
    path = local_file(depot, ref)
    path.unlink()
    path.mkdir()
    (path / "inside").write_bytes(b"x")
    with GoodClient(address, other.key, OTHER) as good:
        conn = RawConnection(address)
        try:
            for _ in range(3):
                reply = conn.request({"op": "get", "key": ref.key.digest, "scope": SCOPE})
                assert reply["error"] == "not_found", reply
                assert ref.key.digest in reply["message"] or ref.key.short in reply["message"], \
                    reply
                assert "Traceback" not in reply["message"] and "Error" not in reply["message"]
            header = conn.request({"op": "get", "key": other.key.digest, "scope": SCOPE})
            assert header["ok"] is True and header["size"] == len(OTHER)
            assert conn._recv_exactly(len(OTHER)) == OTHER
        finally:
            conn.close()
        with pytest.raises(BlobNotFound):
            fetch_once(address, ref.key)
    good.assert_served()
    assert path.is_dir(), "a directory is refused, not removed"


class GatedStorage(Storage):
    """HA storage whose reads wait for ``gate``: a slow or hung HA store."""

    gate: threading.Event
    reading: threading.Event

    def open_read(self, rel: str) -> Any:
        self.reading.set()
        assert self.gate.wait(30)
        return super().open_read(rel)


def test_a_slow_restore_delays_only_its_own_blob(tmp_path: Path, serve: Serve) -> None:
    """While one blob's restore from a hung HA store holds that blob's lock, other blobs are
    served, puts and task/job events go through, and a second request for the same blob gets
    a clear failure after io_timeout instead of waiting."""
    base = Storage.from_url(str(tmp_path / "ha"))
    storage = GatedStorage(base.fs, base.root, base.url)
    storage.gate, storage.reading = threading.Event(), threading.Event()
    storage.gate.set()
    depot = BlobDepot(LocalBlobStore(tmp_path / "local"), HaBlobStore(storage, APP),
                      io_timeout=0.5)
    ref = depot.put_bytes(DATA)
    other = depot.put_bytes(OTHER)
    _, address = serve(depot)
    storage.gate.clear()
    local_file(depot, ref).unlink()
    try:
        with GoodClient(address, other.key, OTHER) as good:
            first, first_outcome = in_thread(lambda: fetch_once(address, ref.key, timeout=30),
                                             "restoring-get")
            assert storage.reading.wait(5)
            served_before = good.served
            started = time.monotonic()
            assert isinstance(depot.put_bytes(os.urandom(5000)), BlobRef)
            depot.job_started(1, SCOPE, [10])
            depot.job_ended(1, True)
            with pytest.raises(StewardError, match=f"{ref.key.short}.*retry later"):
                fetch_once(address, ref.key)
            assert time.monotonic() - started < 3
            wait_for(lambda: good.served > served_before + 2)
            assert first.is_alive(), "the first request still waits for the hung HA store"
            storage.gate.set()
            assert finished(first, first_outcome, 10) == DATA
        good.assert_served()
    finally:
        storage.gate.set()


# -- 6. use bookkeeping -----------------------------------------------------------------------

def _flood_use(address: tuple[str, int], requests: Iterator[dict[str, Any]], count: int
               ) -> list[dict[str, Any]]:
    """Sends ``count`` requests on one authenticated connection, pipelined (a writer thread
    sends while this one reads the replies); returns the distinct replies."""
    conn = RawConnection(address, source="127.0.0.2")
    conn.sock.settimeout(60)
    sent: list[BaseException] = []

    def write() -> None:
        try:
            batch = []
            for request in requests:
                batch.append(encode_frame(request))
                if len(batch) == 500:
                    conn.sock.sendall(b"".join(batch))
                    batch = []
            conn.sock.sendall(b"".join(batch))
        except BaseException as e:
            sent.append(e)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    replies: dict[str, dict[str, Any]] = {}
    try:
        for _ in range(count):
            reply = conn.read()
            replies.setdefault(json.dumps(reply, sort_keys=True), reply)
    finally:
        writer.join(30)
        conn.close()
    assert not sent
    return list(replies.values())


def test_made_up_use_reports_stay_bounded(depot: BlobDepot, serve: Serve) -> None:
    """60,000 ``use`` reports with new stage and task ids (a client holding the secret, or a
    buggy one): what the ledger keeps of them is bounded, and so is the blob's pin."""
    permanent = depot.put_bytes(DATA)
    transient = depot.put_bytes(OTHER, kind=BlobKind.TRANSIENT, receivers=2)
    _, address = serve(depot)
    count = 60_000

    def requests() -> Iterator[dict[str, Any]]:
        for i in range(count):
            ref = permanent if i % 2 == 0 else transient
            yield {"op": "use", "key": ref.key.digest, "scope": SCOPE, "stage": 1_000_000 + i,
                   "task": 5_000_000 + i, "received": True}

    with GoodClient(address, permanent.key, DATA) as good:
        started = time.monotonic()
        replies = _flood_use(address, requests(), count)
        elapsed = time.monotonic() - started
    good.assert_served()
    assert replies == [{"ok": True, "bound": True}]
    ledger = depot.ledger
    assert len(ledger._pending_stages) <= PENDING_STAGES_KEPT
    assert len(ledger._stages) <= PENDING_STAGES_KEPT
    assert len(ledger._tasks) <= RECEIVING_TASKS_KEPT
    assert ledger.count(SCOPE, permanent.key.digest) <= PENDING_STAGES_KEPT
    assert ledger.count(SCOPE, transient.key.digest) == 2, "receipts of unknown tasks count nothing"
    assert elapsed < 30


def test_made_up_stages_release_the_blob_once_jobs_show_they_do_not_exist(
        depot: BlobDepot, serve: Serve) -> None:
    """Stages no job named, reported through a real socket, must not pin a blob for the rest
    of the application: after a job starts that names none of them and a cleanup period or
    two, the blob is unreferenced again (staged, then deleted) as it was before the reports."""
    ref = depot.put_bytes(DATA)
    other = depot.put_bytes(OTHER)
    depot.register_file("other.bin", other, "file")  # pinned: survives the cleanup periods
    _, address = serve(depot)
    count = PENDING_STAGES_KEPT + 500

    def requests() -> Iterator[dict[str, Any]]:
        for i in range(count):
            yield {"op": "use", "key": ref.key.digest, "scope": SCOPE, "stage": 1_000 + i,
                   "task": 9_000 + i}

    with GoodClient(address, other.key, OTHER) as good:
        assert _flood_use(address, requests(), count) == [{"ok": True, "bound": True}]
        ledger = depot.ledger
        assert 0 < ledger.count(SCOPE, ref.key.digest) <= PENDING_STAGES_KEPT
        # The application's real job: its stages are none of the reported ones.
        depot.job_started(1, SCOPE, [50_000, 50_001])
        depot.job_ended(1, True)
        depot.tick()
        depot.tick()
        pinned = ledger.count(SCOPE, ref.key.digest)
        pending = len(ledger._pending_stages)
    good.assert_served()
    assert pinned == 0, (f"blob still pinned by {pinned} references ({pending} stages no job "
                         "named are kept) after a job start and two cleanup periods")
    assert not ledger.is_tracked(SCOPE, ref.key.digest) or ledger.is_staged(SCOPE,
                                                                            ref.key.digest)


def test_idle_sockets_from_the_good_clients_own_address_do_not_lock_it_out(
        depot: BlobDepot, serve: Serve) -> None:
    """A neighbour on the executor's own host (same source address) holds 1,000 idle sockets
    and re-opens each one dropped, for 6 s, against the shipped bounds. Its sockets push the
    good client's handshakes out too, but the client tries a cut handshake again at once (a
    few times, jittered) and the executor's own retries follow: no get is lost."""
    ref = depot.put_bytes(OTHER)
    srv, (host, port) = serve(depot, max_unauthenticated=64, max_unauthenticated_per_peer=8,
                              max_connections=256, handshake_timeout=5.0)
    attacker = subprocess.Popen([sys.executable, str(SCRIPTS / "idle_socket_attacker.py"),
                                 host, str(port), "6", "127.0.0.1=1000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    good = GoodClient((host, port), ref.key, OTHER, pause=0.0)
    try:
        wait_for(lambda: srv.stats.connections_dropped > 100, 10)  # the attack is on
        good.start()
        attacker.communicate(timeout=30)
    finally:
        good.stop.set()
        good.join(30)
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait()
    summary = f"good client {good.served} served, {len(good.refusals)} retried, " \
              f"lost {good.lost[:2]}; server {srv.stats}"
    assert good.wrong == 0 and not good.lost, summary
    assert good.served >= 3, summary
    assert srv.stats.connections_dropped > 1000, summary
