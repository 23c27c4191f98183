"""The blob service inside tasks: the per-process :class:`~spark_steward.blob.cache.BlobCache`
built from the executor context, its staged-cleanup ticker, and the reports to the driver that
bind blobs to jobs and acknowledge transient payloads."""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Callable

from spark_steward.blob import tls
from spark_steward.blob.archives import unpack_once
from spark_steward.blob.cache import BlobCache, BlobSources
from spark_steward.blob.client import BlobClient
from spark_steward.blob.keys import BlobKind, BlobRef
from spark_steward.blob.pieces import (PiecePlan, PieceRequest, endpoint_of, parse_endpoint,
                                       parse_have, split_endpoint)
from spark_steward.blob.protocol import peer_secret
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore, Received
from spark_steward.blob.swarm import Swarm, SwarmStats, fill_from_swarm
from spark_steward.blob.config_keys import (BLOB_FETCH_ATTEMPTS, BLOB_HA, BLOB_NETWORK_TIMEOUT,
                                            BLOB_PEER_CONNECTIONS, BLOB_PEER_ENABLED,
                                            BLOB_PEER_MIN_BYTES, BLOB_RETENTION_INTERVAL,
                                            BLOB_SAME_HOST_LINK)
from spark_steward.config import STORAGE_DIR
from spark_steward.private import make_dirs, open_new
from spark_steward.blob.errors import BlobNotFound, BlobProtocolError
from spark_steward.errors import StewardError
from spark_steward.kernel.executor import ExecutorRuntime, executor_runtime

log = logging.getLogger(__name__)

#: Connections to the origin per fill.
ORIGIN_CONNECTIONS = 2
#: Seconds a peer may send nothing before its connection is given up and its piece fetched
#: elsewhere (a host that lost power sends no reset).
PEER_TIMEOUT = 10.0


class ExecutorBlobs:
    """One per Python worker process and application."""

    def __init__(self, runtime: ExecutorRuntime) -> None:
        context = runtime.context
        conf = runtime.conf
        self.runtime = runtime
        self._client: BlobClient | None = None
        self._client_lock = threading.Lock()
        self._bound: set[tuple[str, str, int]] = set()
        self._files: dict[str, tuple[BlobRef, str]] = {}
        #: Where this process's last peer fetch took its pieces from (and whom it dropped).
        self.last_swarm: SwarmStats | None = None
        ha = None
        if conf.is_set(STORAGE_DIR) and conf.get(BLOB_HA):
            ha = HaBlobStore(lambda: runtime.storage, context.app_id)
        self._ha = ha
        driver_store = None
        if conf.get(BLOB_SAME_HOST_LINK):
            driver_store = LocalBlobStore(runtime.work_dir / "blobs")
        # Peer fetch needs the driver (the plan and the holders) and plain TCP: the peer
        # servers in the executor JVMs do not speak TLS, so encrypted transfers keep to one.
        peers = (conf.get(BLOB_PEER_ENABLED) and context.server_port is not None
                 and not context.server_cert)
        sources = BlobSources(driver_store=driver_store, ha=ha,
                              fetch_from_server=self._fetch_from_server if context.server_port
                              else None, attempts=conf.get(BLOB_FETCH_ATTEMPTS),
                              fill_from_peers=self._fill_from_peers if peers else None,
                              peer_min_bytes=conf.get(BLOB_PEER_MIN_BYTES))
        from spark_steward.local.executor import ExecutorWorkingDir

        work = runtime.component("working-dir", ExecutorWorkingDir).work
        self.cache = BlobCache(work, sources)
        self.unpack_root = runtime.work_dir / "unpacked"
        runtime.on_task_end(lambda scope: self.cache.release_task(scope.attempt_id))
        runtime.on_task_start(self.cache.release_other_tasks)
        self._stop = threading.Event()
        interval = conf.get(BLOB_RETENTION_INTERVAL)
        threading.Thread(target=self._tick_forever, args=(interval,), daemon=True,
                         name="spark-steward-blob-cache-cleanup").start()

    def _tick_forever(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.cache.tick()
            except Exception:
                log.exception("blob cache cleanup period failed; retried next period")

    # -- the driver connection ----------------------------------------------------------------

    def _hang_up(self) -> None:
        """Each get or lookup is a short burst: the connection is not kept between them, so a
        large cluster's idle workers never hold the driver's connection slots."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()

    def _connection(self) -> BlobClient:
        if self._client is None:
            context = self.runtime.context
            assert context.server_port is not None
            self._client = BlobClient(context.driver_host, context.server_port,
                                      context.auth_token,
                                      timeout=self.runtime.conf.get(BLOB_NETWORK_TIMEOUT),
                                      tls=tls.client_context(context.server_cert)
                                      if context.server_cert else None)
        return self._client

    def _fetch_from_server(self, ref: BlobRef, out: BinaryIO) -> Received:
        with self._client_lock:
            return self._connection().fetch(ref.key, ref.scope, out)

    # -- peer fetch ---------------------------------------------------------------------------

    def _fill_from_peers(self, ref: BlobRef, tmp: Path) -> Received:
        """Fills ``tmp`` from other executor hosts and the origin at once (blob/swarm.py)."""
        context, conf = self.runtime.context, self.runtime.conf
        timeout = conf.get(BLOB_NETWORK_TIMEOUT)
        own = self._own_endpoints()
        want = 2 * conf.get(BLOB_PEER_CONNECTIONS)

        def ask(drop: list[str]) -> dict[str, Any]:
            with self._client_lock:
                return self._connection().call("swarm", key=ref.key.digest, scope=ref.scope,
                                               serve=own, drop=drop, want=want)

        # The key first: once the driver lists this host, other hosts' fetchers may dial its
        # JVMs, which refuse them until the key is there (and they would drop this host).
        secret = self._peer_secret()
        first = ask([])
        plan = PiecePlan.from_wire(first.get("plan"), ref.size)
        # The origin serves the pieces no peer has: the HA store when there is one (the
        # driver's link stays free, as without peers), else the driver's blob server, which
        # picks the pieces. Two connections, so one's request gap is the other's transfer.
        origins = [_ServerPieces(ref, plan, None, "the HA store", ha=self._ha)
                   if self._ha is not None else
                   _ServerPieces(ref, plan, BlobClient(context.driver_host,
                                                       context.server_port or 0,
                                                       context.auth_token, timeout=timeout),
                                 "the driver") for _ in range(ORIGIN_CONNECTIONS)]
        swarm = Swarm(ref, plan, origins, lambda drop: _peer_list(ask(drop)),
                      lambda peer: _ServerPieces(ref, plan, BlobClient(
                          *split_endpoint(peer), secret, timeout=min(timeout, PEER_TIMEOUT)),
                          f"peer {peer}"),
                      connections=conf.get(BLOB_PEER_CONNECTIONS),
                      attempts=conf.get(BLOB_FETCH_ATTEMPTS), timeout=timeout,
                      peers=_peer_list(first))
        self.last_swarm = swarm.stats
        return fill_from_swarm(swarm, tmp)

    def _peer_secret(self) -> str:
        """The peer key, handed to this host's executor JVMs in ``peers/key`` (0600)."""
        secret = peer_secret(self.runtime.context.auth_token)
        folder = make_dirs(self.runtime.work_dir / "peers")
        path = folder / "key"
        try:
            if path.read_text("ascii").strip() == secret:
                return secret
        except (OSError, UnicodeDecodeError):
            pass
        spool = folder / f".key.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with open_new(spool) as f:
                f.write(secret.encode("ascii") + b"\n")
            os.replace(spool, path)
        except BaseException:
            spool.unlink(missing_ok=True)
            raise
        return secret

    def _own_endpoints(self) -> list[str]:
        """The peer servers of this host's executor JVMs, from their endpoint files."""
        found = []
        folder = self.runtime.work_dir / "peers"
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return []
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                body = json.loads((folder / name).read_text("utf-8"))
                found.append(endpoint_of(str(body["host"]), int(body["port"])))
            except (OSError, ValueError, KeyError, TypeError, StewardError) as exc:
                log.debug("peer endpoint file %s skipped: %s", folder / name, exc)
        return found[:16]

    def _report(self, ref: BlobRef, stage: int, task: int, received: bool,
                via: str | None = None) -> None:
        """Binds the blob to this stage's job on the driver (once per process and stage), and
        says where a copy just made came from (``via``, the driver's transfer counts)."""
        mark = (ref.scope, ref.key.digest, stage)
        if mark in self._bound and not received and via is None:
            return
        if any(bound[2] != stage for bound in self._bound):
            self._bound = {b for b in self._bound if b[2] == stage}  # bounded: one stage
        if self.runtime.context.server_port is None:
            return
        try:
            with self._client_lock:
                self._connection().call("use", key=ref.key.digest, scope=ref.scope,
                                        stage=stage, task=task, received=received,
                                        **({"via": via} if via else {}))
            self._bound.add(mark)
        except StewardError as exc:
            # The HA path works without the driver; the scope's final-state delete is the net.
            log.warning("could not report use of blob %s to the driver: %s", ref, exc)

    def resolve_file(self, name: str) -> tuple[BlobRef, str]:
        """The blob and form of a file added with ``sc.addFile`` (asked once per process)."""
        found = self._files.get(name)
        if found is None:
            if self.runtime.context.server_port is None:
                raise BlobNotFound(f"no blob server to resolve {name!r}")
            try:
                with self._client_lock:
                    reply = self._connection().call("resolve", name=name)
            finally:
                self._hang_up()
            found = self._files[name] = (BlobRef.from_wire(reply["ref"]), str(reply["form"]))
        return found

    # -- reads --------------------------------------------------------------------------------

    def get(self, ref: BlobRef, *, received: bool = False) -> Path:
        """The path of a verified host-local copy of ``ref``, fetched once per host and held until
        the task ends; ``received`` acknowledges a transient blob to the driver."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        task = tc.taskAttemptId() if tc is not None else -1
        stage = tc.stageId() if tc is not None else -1
        self.cache.release_other_tasks(task)
        try:
            path = self.cache.get(ref, task)
            if tc is not None:
                self._report(ref, stage, task, received and ref.kind is BlobKind.TRANSIENT,
                             self.cache.fetched_from())
        finally:
            self._hang_up()
        return path

    def unpacked(self, ref: BlobRef) -> Path:
        """The directory the archive blob ``ref`` was unpacked into, once per host."""
        archive = self.get(ref)
        return unpack_once(archive, ref.name, self.unpack_root / ref.scope / ref.key.digest)


class _ServerPieces:
    """Pieces of one blob from a blob server, a peer's or the driver's (``client``), or
    ranges of the HA copy (``ha``)."""

    def __init__(self, ref: BlobRef, plan: PiecePlan, client: BlobClient | None, label: str,
                 *, ha: HaBlobStore | None = None) -> None:
        self.ref, self.plan, self.client, self.label, self.ha = ref, plan, client, label, ha
        self._file: BinaryIO | None = None

    def have(self) -> frozenset[int] | None:
        if self.client is None:
            return None
        reply = self.client.have(self.ref.key, self.ref.scope, self.plan.size,
                                 self.plan.piece_size)
        if reply.get("complete") is True:
            return None
        have = parse_have(reply.get("have"), self.plan.count)
        if have is None:
            raise BlobProtocolError(f"{self.label} sent a malformed piece list for blob "
                                    f"{self.ref}: {str(reply.get('have'))[:60]!r}")
        return have

    def pick(self, need: frozenset[int], into: Callable[[int], memoryview]
             ) -> tuple[int, int]:
        """A piece of ``need`` the blob server chooses, received into ``into(index)``;
        ``(index, length)``, ``(-1, 0)`` when the server says wait."""
        if self.client is None:
            index = random.choice(sorted(need))
            return index, self.read(index, into(index))
        request = PieceRequest(self.ref.key, self.ref.scope, self.plan.size,
                               self.plan.piece_size, min(need))
        return self.client.piece(request, into, need)

    def read(self, index: int, into: memoryview) -> int:
        request = PieceRequest(self.ref.key, self.ref.scope, self.plan.size,
                               self.plan.piece_size, index)
        if self.client is not None:
            return self.client.piece(request, into)[1]
        assert self.ha is not None
        if self._file is None:
            self._file = self.ha.storage.open_read(self.ha.rel(self.ref.scope, self.ref.key))
        offset, length = request.span()
        self._file.seek(offset)
        got = 0
        while got < length:
            n = self._file.readinto(into[got:length])  # type: ignore[attr-defined]
            if not n:
                break
            got += n
        return got

    def abort(self) -> None:
        if self.client is not None:
            self.client.abort()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self._file is not None:
            self._file.close()


def _peer_list(reply: dict[str, Any]) -> list[str]:
    peers = reply.get("peers")
    if not isinstance(peers, list):
        raise BlobProtocolError(f"the driver's swarm reply lists no peers: {peers!r:.60}")
    return [parse_endpoint(p) for p in peers]


def executor_blobs() -> ExecutorBlobs:
    """The blob service of the running task's application in this process."""
    return executor_runtime().component("blobs", ExecutorBlobs)
