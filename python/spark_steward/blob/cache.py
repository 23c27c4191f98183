"""The executor's blob cache: one host-local directory shared by every Python worker of the
application on that host, coordinated with file locks.

A read is served from the host-local copy after a crc32c check at its first use in a process.
On a miss the blob comes, in order, from the driver's own copy when the driver runs on this
host (a hard link: no bytes move), from the HA store, and from the driver's blob server. Every
transfer lands in a temp file and is renamed into place only when complete and verified, so a
worker killed mid-download leaves a temp file, never a wrong blob.

Cross-process rules (``<root>/<scope>/``):

* ``.<key>.use`` — every process holding task references takes a shared ``flock``; a process
  deletes an entry only with the exclusive lock, so nothing in use on the host is deleted.
* ``.<key>.fetch`` — exclusive while one process checks and fetches, so concurrent requests
  on one host download once; the others find the verified copy when they get the lock.

References are counted per task in each process; a task's end (try/finally in the task wrapper,
or the next task in the same worker, since a worker runs one task at a time) releases them, and
unreferenced entries enter staged cleanup.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

from spark_steward.blob.keys import BlobKey, BlobRef, blob_relpath
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore, discard, file_identity
from spark_steward.errors import BlobNotFound, StewardError
from spark_steward.lifecycle.refcount import RefCounts
from spark_steward.lifecycle.staged_cleanup import StagedCleanup

log = logging.getLogger(__name__)

Entry = tuple[str, BlobKey]


@dataclass(frozen=True)
class BlobSources:
    """Where missing blobs come from, in order of preference; each may be absent."""

    driver_store: LocalBlobStore | None = None
    ha: HaBlobStore | None = None
    fetch_from_server: Callable[[BlobRef, BinaryIO], tuple[int, int]] | None = None
    """Streams the blob into the file and returns the ``(crc32c, size)`` it computed."""
    attempts: int = 3


class BlobCache:
    """Per-process view of the host-local cache of one application."""

    def __init__(self, root: str | os.PathLike[str], sources: BlobSources) -> None:
        self.store = LocalBlobStore(root)
        self.sources = sources
        self.stats: Counter[str] = Counter()
        self._refs: RefCounts[Entry] = RefCounts()
        self._staged: StagedCleanup[Entry] = StagedCleanup()
        self._task_entries: dict[int, list[Entry]] = defaultdict(list)
        self._use_locks: dict[Entry, int] = {}
        self._verified: dict[Entry, tuple[int, int]] = {}
        self._key_locks: dict[Entry, threading.Lock] = defaultdict(threading.Lock)
        self._lock = threading.RLock()

    # -- reads -------------------------------------------------------------------------------

    def get(self, ref: BlobRef, task_id: int) -> Path:
        """A verified local path of ``ref``, referenced by task ``task_id`` until it ends."""
        entry = (ref.scope, ref.key)
        path = self.store.path(ref.scope, ref.key)
        with self._key_locks[entry]:
            self._reference(entry, task_id)
            try:
                identity = file_identity(path)
                if identity is None or self._verified.get(entry) != identity:
                    self._materialize(ref, path)
                    self._verified[entry] = file_identity(path)  # type: ignore[assignment]
                else:
                    self.stats["hit"] += 1
            except BaseException:
                self._release_entry(entry, task_id)
                raise
        return path

    def _materialize(self, ref: BlobRef, path: Path) -> None:
        fetch_lock = path.with_name(f".{ref.key.digest}.fetch")
        fd = os.open(fetch_lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self.store.verify(ref.scope, ref.key, ref.crc32c, ref.size):
                self.stats["verified"] += 1
                return
            self._fetch(ref)
        finally:
            os.close(fd)

    def _fetch(self, ref: BlobRef) -> None:
        errors: list[str] = []
        src = self.sources
        if src.driver_store is not None:
            driver_copy = src.driver_store.path(ref.scope, ref.key)
            if driver_copy.is_file():
                try:
                    self.store.install(ref.scope, ref.key, ref.crc32c, ref.size,
                                       lambda tmp: self._link_or_copy(driver_copy, tmp))
                    self.stats["linked"] += 1
                    return
                except (OSError, StewardError) as exc:
                    errors.append(f"driver copy {driver_copy}: {exc}")
        for name, fill in (("ha", self._from_ha(ref)), ("server", self._from_server(ref))):
            if fill is None:
                continue
            for attempt in range(1, src.attempts + 1):
                try:
                    self.store.install(ref.scope, ref.key, ref.crc32c, ref.size, fill)
                    self.stats[name] += 1
                    return
                except FileNotFoundError as exc:
                    errors.append(f"{name}: {exc}")
                    break
                except (OSError, StewardError) as exc:
                    errors.append(f"{name} attempt {attempt}: {exc}")
                    log.warning("fetching blob %s from %s failed (attempt %d of %d): %s",
                                ref, name, attempt, src.attempts, exc)
                    if isinstance(exc, BlobNotFound):
                        break
                    if attempt < src.attempts:
                        time.sleep(min(2.0, 0.1 * 2 ** attempt))  # a brief network hiccup
        raise BlobNotFound(f"blob {ref.key} ({ref.scope}) could not be fetched: "
                           + ("; ".join(errors) or "no source configured"))

    @staticmethod
    def _link_or_copy(source: Path, tmp: Path) -> tuple[int, int] | None:
        """Links the driver's copy (no bytes move); copies when linking is not possible.
        Returns None: the result is read back and verified either way."""
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        return None

    def _from_ha(self, ref: BlobRef) -> Callable[[Path], tuple[int, int] | None] | None:
        ha = self.sources.ha
        if ha is None:
            return None
        return lambda tmp: ha.download(ref.scope, ref.key, tmp)

    def _from_server(self, ref: BlobRef) -> Callable[[Path], tuple[int, int] | None] | None:
        fetch = self.sources.fetch_from_server
        if fetch is None:
            return None

        def download(tmp: Path) -> tuple[int, int]:
            with open(tmp, "wb") as out:
                return fetch(ref, out)

        return download

    # -- references --------------------------------------------------------------------------

    def _reference(self, entry: Entry, task_id: int) -> None:
        with self._lock:
            if entry in self._task_entries.get(task_id, ()):
                return
            self._task_entries[task_id].append(entry)
            if self._refs.acquire(entry):
                self._staged.rescue(entry)
                self._hold(entry)

    def _hold(self, entry: Entry) -> None:
        """Shared lock on the entry's use file: no process on the host deletes it now."""
        if entry in self._use_locks:
            return
        scope, key = entry
        use = self.store.path(scope, key).with_name(f".{key.digest}.use")
        use.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(use, os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)
            # A deleter may have unlinked the lock file between our open and our lock.
            try:
                same = os.fstat(fd).st_ino == os.stat(use).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._use_locks[entry] = fd
                return
            os.close(fd)

    def release_task(self, task_id: int) -> None:
        """Task ``task_id`` ended (success, failure or kill): drop its references."""
        with self._lock:
            for entry in self._task_entries.pop(task_id, []):
                self._unreference(entry)

    def release_other_tasks(self, running_task: int) -> None:
        """A worker runs one task at a time: references of any other task are stale."""
        with self._lock:
            for task_id in [t for t in self._task_entries if t != running_task]:
                self.release_task(task_id)

    def _release_entry(self, entry: Entry, task_id: int) -> None:
        with self._lock:
            entries = self._task_entries.get(task_id, [])
            if entry in entries:
                entries.remove(entry)
                self._unreference(entry)

    def _unreference(self, entry: Entry) -> None:
        if self._refs.release(entry):
            fd = self._use_locks.pop(entry, None)
            if fd is not None:
                os.close(fd)
            self._staged.stage(entry)

    def referenced(self, ref: BlobRef) -> int:
        with self._lock:
            return self._refs.count((ref.scope, ref.key))

    # -- cleanup -----------------------------------------------------------------------------

    def tick(self) -> int:
        """One staged-cleanup period; returns how many entries were deleted."""
        with self._lock:
            due = [e for e in self._staged.tick() if self._refs.count(e) == 0]
            return sum(self._try_delete(entry) for entry in due)

    def drain(self) -> int:
        """Deletes every unreferenced entry this process staged (worker shutdown)."""
        with self._lock:
            due = [e for e in self._staged.drain() if self._refs.count(e) == 0]
            return sum(self._try_delete(entry) for entry in due)

    def _try_delete(self, entry: Entry) -> bool:
        scope, key = entry
        path = self.store.path(scope, key)
        use = path.with_name(f".{key.digest}.use")
        try:
            fd = os.open(use, os.O_CREAT | os.O_RDWR, 0o644)
        except FileNotFoundError:
            return False  # the scope directory is gone already
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # another process on this host uses it and will stage it itself
            discard(path)
            discard(path.with_name(f".{key.digest}.fetch"))
            discard(use)
        finally:
            os.close(fd)
        self._refs.forget(entry)
        self._verified.pop(entry, None)
        self._key_locks.pop(entry, None)
        self.stats["deleted"] += 1
        log.debug("blob cache entry %s removed", blob_relpath(scope, key))
        return True
