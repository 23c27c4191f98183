"""The blob service inside tasks: the per-process :class:`~spark_steward.blob.cache.BlobCache`
built from the executor context, its staged-cleanup ticker, and the reports to the driver that
bind blobs to jobs and acknowledge transient payloads."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import BinaryIO

from spark_steward.blob import tls
from spark_steward.blob.archives import unpack_once
from spark_steward.blob.cache import BlobCache, BlobSources
from spark_steward.blob.client import BlobClient
from spark_steward.blob.keys import BlobKind, BlobRef
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore, Received
from spark_steward.config import (BLOB_FETCH_ATTEMPTS, BLOB_HA, BLOB_NETWORK_TIMEOUT,
                                  BLOB_RETENTION_INTERVAL, BLOB_SAME_HOST_LINK, STORAGE_DIR)
from spark_steward.errors import BlobNotFound, StewardError
from spark_steward.kernel.executor import ExecutorRuntime, executor_runtime

log = logging.getLogger(__name__)


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
        ha = None
        if conf.is_set(STORAGE_DIR) and conf.get(BLOB_HA):
            ha = HaBlobStore(lambda: runtime.storage, context.app_id)
        driver_store = None
        if conf.get(BLOB_SAME_HOST_LINK):
            driver_store = LocalBlobStore(runtime.work_dir / "blobs")
        sources = BlobSources(driver_store=driver_store, ha=ha,
                              fetch_from_server=self._fetch_from_server if context.server_port
                              else None, attempts=conf.get(BLOB_FETCH_ATTEMPTS))
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
        archive = self.get(ref)
        return unpack_once(archive, ref.name, self.unpack_root / ref.scope / ref.key.digest)


def executor_blobs() -> ExecutorBlobs:
    """The blob service of the running task's application in this process."""
    return executor_runtime().component("blobs", ExecutorBlobs)
