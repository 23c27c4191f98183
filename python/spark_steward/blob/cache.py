"""The executor's blob cache: the ``blob-cache/`` folder of the application's host-local working
directory (:mod:`spark_steward.local.working_dir`), shared by every Python worker of the
application on that host and coordinated with file locks.

A read is served from the host-local copy after a crc32c check at its first use in a process;
the manifest record of a copy cached by a killed executor lets its replacement adopt it without
any transfer. Bytes from the HA store or the network are checked against the blob's key (its
SHA-256) before they take the blob's name: whoever can write the storage, or sits on the
network, could otherwise substitute what tasks run.
On a miss the blob comes, in order, from the driver's own copy when the driver runs on this
host (a hard link: no bytes move), from the HA store, and from the driver's blob server. Every
transfer lands in a temp file and is renamed into place only when complete and verified, so a
worker killed mid-download leaves a temp file, never a wrong blob. When
``spark.steward.local.max-bytes`` leaves no room, the blob is streamed into a file of the
running task instead, removed when the task ends.

Cross-process rules (``<work dir>/blob-cache/<scope>/``):

* ``.<key>.use`` — every process holding task references takes a shared ``flock``; a process
  deletes (or evicts) an entry only with the exclusive lock, so nothing in use on the host goes.
* ``.<key>.write`` — exclusive while one process checks and fetches, so concurrent requests
  on one host download once; the others find the verified copy when they get the lock.

References are counted per task in each process; a task's end (try/finally in the task wrapper,
or the next task in the same worker, since a worker runs one task at a time) releases them, and
unreferenced entries enter staged cleanup.
"""

from __future__ import annotations

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
from spark_steward.blob.stores import (HaBlobStore, LocalBlobStore, NotRegularFile, Received,
                                       check_key, discard, file_identity, open_blob, temp_name)
from spark_steward.checksum import crc_of_file
from spark_steward.blob.errors import BlobNotFound
from spark_steward.errors import ChecksumMismatch, StewardError
from spark_steward.local.errors import LocalDiskFull, LocalSpaceFull
from spark_steward.lifecycle.refcount import RefCounts
from spark_steward.lifecycle.staged_cleanup import StagedCleanup
from spark_steward.local.fs import FileLock
from spark_steward.private import make_dirs, open_new
from spark_steward.local.working_dir import WorkingDir

log = logging.getLogger(__name__)

Entry = tuple[str, BlobKey]


@dataclass(frozen=True)
class BlobSources:
    """Where missing blobs come from, in order of preference; each may be absent."""

    driver_store: LocalBlobStore | None = None
    ha: HaBlobStore | None = None
    fetch_from_server: Callable[[BlobRef, BinaryIO], Received | None] | None = None
    """Streams the blob into the file and returns what it computed over the bytes."""
    attempts: int = 3
    fill_from_peers: Callable[[BlobRef, Path], Received] | None = None
    """Fills the temp file from other hosts and the origin at once (blob/swarm.py)."""
    peer_min_bytes: int = 16 << 20


class BlobCache:
    """Per-process view of the host-local cache of one application."""

    FOLDER = "blob-cache"

    def __init__(self, working_dir: WorkingDir | str | os.PathLike[str],
                 sources: BlobSources) -> None:
        self.work = (working_dir if isinstance(working_dir, WorkingDir)
                     else WorkingDir(Path(working_dir), ""))
        self.sources = sources
        self.stats: Counter[str] = Counter()
        self._refs: RefCounts[Entry] = RefCounts()
        self._staged: StagedCleanup[Entry] = StagedCleanup()
        self._task_entries: dict[int, list[Entry]] = defaultdict(list)
        self._task_streams: dict[int, list[Path]] = defaultdict(list)
        self._use_locks: dict[Entry, FileLock] = {}
        self._verified: dict[Entry, tuple[int, int]] = {}
        self._key_locks: dict[Entry, threading.Lock] = defaultdict(threading.Lock)
        self._lock = threading.RLock()
        self._last = threading.local()  # where this thread's last get() took the bytes from

    def fetched_from(self) -> str | None:
        """Where this thread's last :meth:`get` took the blob's bytes from (``linked``,
        ``peers``, ``ha``, ``server``), None when it found a verified copy in the cache."""
        return getattr(self._last, "source", None)

    def entry(self, scope: str, key: BlobKey) -> str:
        """The working-dir entry name of a blob's cached copy."""
        return f"{self.FOLDER}/{blob_relpath(scope, key)}"

    def path(self, scope: str, key: BlobKey) -> Path:
        """The local path where a blob's cached copy lives (whether or not it is there)."""
        return self.work.path_of(self.entry(scope, key))

    # -- reads -------------------------------------------------------------------------------

    def get(self, ref: BlobRef, task_id: int) -> Path:
        """A verified local path of ``ref``, referenced by task ``task_id`` until it ends."""
        entry = (ref.scope, ref.key)
        path = self.path(ref.scope, ref.key)
        self._last.source = None
        with self._key_locks[entry]:
            self._reference(entry, task_id)
            try:
                identity = file_identity(path)
                if identity is None or self._verified.get(entry) != identity:
                    streamed = self._materialize(ref, task_id)
                    if streamed is not None:
                        return streamed
                    self._verified[entry] = file_identity(path)  # type: ignore[assignment]
                else:
                    self.stats["hit"] += 1
                self.work.stamp_use(self.entry(ref.scope, ref.key))
            except BaseException:
                self._release_entry(entry, task_id)
                raise
        return path

    def _materialize(self, ref: BlobRef, task_id: int) -> Path | None:
        """Adopts a verified copy or fetches one; returns a task-private path instead when the
        byte bound leaves no room in the cache."""
        name = self.entry(ref.scope, ref.key)
        with self.work.writing(name):
            if self.work.lookup(name, expected=(ref.crc32c, ref.size)) is not None:
                self.stats["verified"] += 1
                return None
            try:
                self._fetch(ref, lambda fill: self.work.install(
                    name, capability="blobs", scope=ref.scope, produce=fill,
                    expected=(ref.crc32c, ref.size)), shared=True)
                return None
            except LocalDiskFull:
                raise  # a task file would be on the same full disk
            except LocalSpaceFull as full:
                log.warning("streaming blob %s for task %d outside the cache: %s", ref.key,
                            task_id, full)
        stream_dir = make_dirs(self.work.root / "streams")
        path = stream_dir / f"{task_id}-{ref.scope}-{ref.key.digest}"

        def install(fill: Callable[[Path], tuple[int, int] | None]) -> None:
            tmp = temp_name(path)
            try:
                computed = fill(tmp)
                crc, size = computed if computed is not None else crc_of_file(tmp)
                if (crc, size) != (ref.crc32c, ref.size):
                    raise ChecksumMismatch(
                        f"streamed copy of blob {ref.key} ({ref.scope}) is wrong: crc32c "
                        f"{crc:08x}/{size} bytes, expected {ref.crc32c:08x}/{ref.size} bytes")
                os.replace(tmp, path)
            except BaseException:
                discard(tmp)
                raise

        self._fetch(ref, install)
        with self._lock:
            self._task_streams[task_id].append(path)
        self.stats["streamed"] += 1
        return path

    def _fetch(self, ref: BlobRef, install: Callable[[Callable[[Path], tuple[int, int] | None]],
                                                     object], *, shared: bool = False) -> None:
        """Installs ``ref`` from the first source that delivers it. ``shared``: into the
        cache, where this host's peer servers can serve it while it fills."""
        errors: list[str] = []
        src = self.sources
        if src.driver_store is not None:
            driver_copy = src.driver_store.path(ref.scope, ref.key)
            if file_identity(driver_copy) is not None:  # a regular file, not through a link
                try:
                    install(lambda tmp: self._link_or_copy(driver_copy, tmp))
                    self.stats["linked"] += 1
                    self._last.source = "linked"
                    return
                except LocalSpaceFull:
                    raise
                except (OSError, StewardError) as exc:
                    errors.append(f"driver copy {driver_copy}: {exc}")
        peers = src.fill_from_peers
        if shared and peers is not None and ref.size >= max(1, src.peer_min_bytes):
            try:
                install(_checked_against_key(ref, lambda tmp: peers(ref, tmp), "peers"))
                self.stats["peers"] += 1
                self._last.source = "peers"
                return
            except LocalSpaceFull:
                raise
            except (OSError, StewardError) as exc:
                errors.append(f"peers: {exc}")
                log.warning("fetching blob %s from peers failed, fetching it whole: %s", ref,
                            exc)
        for name, source in (("ha", self._from_ha(ref)), ("server", self._from_server(ref))):
            if source is None:
                continue
            fill = _checked_against_key(ref, source, name)
            for attempt in range(1, src.attempts + 1):
                try:
                    install(fill)
                    self.stats[name] += 1
                    self._last.source = name
                    return
                except LocalSpaceFull:
                    raise
                except FileNotFoundError as exc:
                    errors.append(f"{name}: {exc}")
                    break
                except (OSError, StewardError) as exc:
                    errors.append(f"{name} attempt {attempt}: {exc}")
                    log.warning("fetching blob %s from %s failed (attempt %d of %d): %s",
                                ref, name, attempt, src.attempts, exc)
                    if isinstance(exc, BlobNotFound) or (
                            name == "ha" and isinstance(exc, ChecksumMismatch)):
                        break  # a stored copy that is other bytes stays so: next source
                    if attempt < src.attempts:
                        time.sleep(min(2.0, 0.1 * 2 ** attempt))  # a brief network hiccup
        raise BlobNotFound(f"blob {ref.key} ({ref.scope}) could not be fetched: "
                           + ("; ".join(errors) or "no source configured"))

    @staticmethod
    def _link_or_copy(source: Path, tmp: Path) -> tuple[int, int] | None:
        """Links the driver's copy (no bytes move); copies when linking is not possible.
        Returns None: the result is read back and verified either way. Neither follows a
        symlink put under the blob's name: only a regular file is taken."""
        try:
            os.link(source, tmp, follow_symlinks=False)
        except OSError:
            with open_blob(source) as src, open_new(tmp) as out:
                shutil.copyfileobj(src, out, 8 << 20)
        if file_identity(tmp) is None:
            raise NotRegularFile(f"{source} is not a regular blob file; refused")
        return None

    def _from_ha(self, ref: BlobRef) -> Callable[[Path], Received | None] | None:
        ha = self.sources.ha
        if ha is None:
            return None
        return lambda tmp: ha.download(ref.scope, ref.key, tmp)

    def _from_server(self, ref: BlobRef) -> Callable[[Path], Received | None] | None:
        fetch = self.sources.fetch_from_server
        if fetch is None:
            return None

        def download(tmp: Path) -> Received | None:
            with open_new(tmp) as out:
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
        if entry not in self._use_locks:
            self._use_locks[entry] = self.work.hold(self.entry(*entry))

    def release_task(self, task_id: int) -> None:
        """Task ``task_id`` ended (success, failure or kill): drop its references."""
        with self._lock:
            for entry in self._task_entries.pop(task_id, []):
                self._unreference(entry)
            for path in self._task_streams.pop(task_id, []):
                discard(path)

    def release_other_tasks(self, running_task: int) -> None:
        """A worker runs one task at a time: references of any other task are stale."""
        with self._lock:
            for task_id in [t for t in {*self._task_entries, *self._task_streams}
                            if t != running_task]:
                self.release_task(task_id)

    def _release_entry(self, entry: Entry, task_id: int) -> None:
        with self._lock:
            entries = self._task_entries.get(task_id, [])
            if entry in entries:
                entries.remove(entry)
                self._unreference(entry)

    def _unreference(self, entry: Entry) -> None:
        if self._refs.release(entry):
            lock = self._use_locks.pop(entry, None)
            if lock is not None:
                lock.release()
            self._staged.stage(entry)

    def referenced(self, ref: BlobRef) -> int:
        """How many running tasks of this process hold ``ref``'s cached copy."""
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
        name = self.entry(scope, key)
        use = self.work.use_lock_path(name)
        try:
            lock = self.work.fs.lock(use, exclusive=True, wait=False)
        except FileNotFoundError:
            return False  # the scope directory is gone already
        if lock is None:
            return False  # another process on this host uses it and will stage it itself
        try:
            with self.work.writing(name):
                self.work.remove(name)
                discard(self.work.write_lock_path(name))  # waiters re-open it (inode check)
            discard(use)
        finally:
            lock.release()
        self._refs.forget(entry)
        self._verified.pop(entry, None)
        self._key_locks.pop(entry, None)
        self.stats["deleted"] += 1
        log.debug("blob cache entry %s removed", name)
        return True


def _checked_against_key(ref: BlobRef, fill: Callable[[Path], Received | None], source: str
                         ) -> Callable[[Path], tuple[int, int]]:
    """``fill`` from an untrusted ``source``, its result checked against ``ref``'s key before
    the file can take the blob's name; returns the ``(crc32c, size)`` the installer records."""
    def produce(tmp: Path) -> tuple[int, int]:
        received = fill(tmp)
        got = check_key(ref.key, ref.size, tmp,
                        received if isinstance(received, Received) else None,
                        f"copy of blob {ref.key.short} ({ref.scope}) from {source}")
        return got.crc32c, got.size
    return produce
