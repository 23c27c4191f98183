"""The working directory of one application on one host: every host-local file spark-steward
keeps, with a durable manifest that says who owns it and how to check it.

Layout under ``<spark.steward.local.dir>/<app id>/``::

    manifest/<entry>.rec        complete record (checksummed JSON: owner, file, size, crc32c)
    manifest/<entry>.writing    a writer's announcement (planned file and size), until it is done
    <entry dir>/<name>          the data file (``<name>~<version>`` for replaceable values)
    <entry dir>/.<name>.use     shared lock while a task uses the entry; LRU stamp (mtime)
    <entry dir>/.<name>.write   exclusive lock while one process writes or removes the entry
    <entry dir>/.<name>.tmp-*   a file being written

A write goes: announcement (synced), temp file (synced), verify, rename (directory synced),
complete record (temp, synced, renamed, directory synced), old version removed. A power cut at any
instant leaves the previous complete record and its file, or the new ones; everything else is a
left-over that :meth:`WorkingDir.recover` removes once no live process holds its write lock.
Verification is lazy: a file's crc32c is checked at its first use in each process, and again
only when the file changed (inode, mtime, size).

Sibling processes (Python workers of the executors on the host) share nothing but this
directory: ``flock`` locks, atomic renames and the records.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator
from urllib.parse import quote, unquote

from spark_steward.errors import ChecksumMismatch, RecordCorrupt
from spark_steward.local.errors import LocalSpaceFull, LocalStateError
from spark_steward.lifecycle.lru import CacheUsage, choose_evictions
from spark_steward.local.lifecycle import FileState, LocalFileRecord, left_over_files
from spark_steward.local.fs import OS_FS, FileLock, LocalFs
from spark_steward.local.space import reporting_full_disk
from spark_steward.records import decode_record, encode_record

log = logging.getLogger(__name__)

MANIFEST = "manifest"
#: Suffixes of the records under MANIFEST: complete, and announced by a writer not done yet
#: (the shim's LocalManifest.COMPLETE / WRITING).
COMPLETE = "rec"
WRITING = "writing"
#: Folders under the working dir whose files this layer writes and recovers.
MANAGED = ("blob-cache", "state")
#: Written by the executors' JVMs (the shim's ReplicaFileSystem) under JVM file locks, which
#: ``flock`` does not see: this layer reads, evicts and removes their records, never recovers
#: their writes (the JVM does, at the entry's next read).
JVM_WRITTEN = ("table-replicas",)
Produce = Callable[[Path], "tuple[int, int] | None"]


def _size_text(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


class WorkingDir:
    """The manifest and files of one application on this host, seen from one process."""

    def __init__(self, root: str | Path, app_id: str, *, fs: LocalFs = OS_FS,
                 max_bytes: int = 0, clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.app_id = app_id
        self.fs = fs
        self.max_bytes = max_bytes
        self.clock = clock
        self._verified: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.RLock()
        self._writing: dict[tuple[str, int], int] = {}  # (entry, thread): write lock depth

    # -- names -------------------------------------------------------------------------------

    def path_of(self, rel: str) -> Path:
        """The absolute path of ``rel`` inside the working dir."""
        return self.root / PurePosixPath(rel)

    def _sidecar(self, entry: str, kind: str) -> Path:
        path = self.path_of(entry)
        return path.with_name(f".{path.name}.{kind}")

    def _record_path(self, entry: str, suffix: str) -> Path:
        return self.root / MANIFEST / f"{quote(entry, safe='')}.{suffix}"

    def use_lock_path(self, entry: str) -> Path:
        """The lock file readers of ``entry`` hold shared while they use it."""
        return self._sidecar(entry, "use")

    def write_lock_path(self, entry: str) -> Path:
        """The lock file a writer of ``entry`` holds exclusively."""
        return self._sidecar(entry, "write")

    # -- locks -------------------------------------------------------------------------------

    @contextmanager
    def writing(self, entry: str) -> Iterator[None]:
        """Exclusive right to write or remove ``entry`` on this host (waits for it).

        Re-entrant within a thread: a second ``flock`` on another descriptor of the same file
        would wait for the first forever. Other threads of the process wait like other
        processes do."""
        mine = (entry, threading.get_ident())
        with self._lock:
            nested = mine in self._writing
            if nested:
                self._writing[mine] += 1
        lock = None
        if not nested:
            self.fs.makedirs(self.path_of(entry).parent)
            lock = self.fs.lock(self._sidecar(entry, "write"), exclusive=True, wait=True)
            assert lock is not None
            with self._lock:
                self._writing[mine] = 1
        try:
            yield
        finally:
            with self._lock:
                self._writing[mine] -= 1
                if self._writing[mine] <= 0:
                    del self._writing[mine]
            if lock is not None:
                lock.release()

    def _holds_write_lock(self, entry: str) -> bool:
        with self._lock:
            return self._writing.get((entry, threading.get_ident()), 0) > 0

    def hold(self, entry: str) -> FileLock:
        """A shared use lock: nothing on the host evicts or removes ``entry`` while it is held."""
        use = self.use_lock_path(entry)
        self.fs.makedirs(use.parent)
        lock = self.fs.lock(use, exclusive=False, wait=True)
        assert lock is not None
        return lock

    # -- records -----------------------------------------------------------------------------

    def _write_record(self, path: Path, record: LocalFileRecord) -> None:
        self.fs.makedirs(path.parent)
        tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            self.fs.write_new(tmp, [encode_record(record.to_json())])
            self.fs.replace(tmp, path)
        except BaseException:
            self.fs.unlink(tmp)
            raise
        self.fs.sync_dir(path.parent)

    def _read_record(self, path: Path) -> LocalFileRecord | None:
        try:
            data = self.fs.read_bytes(path)
        except FileNotFoundError:
            return None
        try:
            return LocalFileRecord.from_json(decode_record(data, str(path)))
        except (RecordCorrupt, KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring manifest record %s: %s", path, exc)
            return None

    def record(self, entry: str) -> LocalFileRecord | None:
        """The complete record of ``entry``, unverified; None when there is none."""
        return self._read_record(self._record_path(entry, COMPLETE))

    def records(self) -> list[LocalFileRecord]:
        """Every readable complete record of this application on this host."""
        found = []
        for name in self.fs.list_dir(self.root / MANIFEST):
            if name.endswith(f".{COMPLETE}") and not name.startswith("."):
                record = self._read_record(self.root / MANIFEST / name)
                if record is not None and record.entry == unquote(name[:-4]):
                    found.append(record)
        return found

    def _announcements(self) -> list[LocalFileRecord]:
        found = []
        for name in self.fs.list_dir(self.root / MANIFEST):
            if name.endswith(f".{WRITING}") and not name.startswith("."):
                record = self._read_record(self.root / MANIFEST / name)
                if record is not None:
                    found.append(record)
        return found

    # -- reads -------------------------------------------------------------------------------

    def lookup(self, entry: str, expected: tuple[int, int] | None = None) -> LocalFileRecord | None:
        """The verified complete record of ``entry``, or None.

        The file's crc32c is checked at its first use in this process (and again when the
        file changed); a file that fails, or does not match ``expected`` ``(crc32c, size)``,
        is removed with its record (under the entry's write lock, taken here unless this
        process holds it) so the caller fetches or rebuilds it.
        """
        record = self.record(entry)
        if record is None:
            return None
        path = self.path_of(record.file)
        identity = self.fs.identity(path)
        with self._lock:
            known = self._verified.get(record.file)
        if identity is not None and identity == known and \
                (expected is None or expected == (record.crc32c, record.size)):
            return record
        problem = None
        if identity is None:
            problem = "its file is missing"
        elif expected is not None and expected != (record.crc32c, record.size):
            problem = (f"it records crc32c {record.crc32c:08x}/{record.size} bytes, expected "
                       f"{expected[0]:08x}/{expected[1]} bytes")
        else:
            try:
                crc, size = self.fs.crc_of(path)
            except FileNotFoundError:
                crc, size = -1, -1
            if (crc, size) != (record.crc32c, record.size):
                problem = (f"its file {path} has crc32c {crc & 0xffffffff:08x}/{size} bytes, "
                           f"recorded {record.crc32c:08x}/{record.size} bytes")
        if problem is not None:
            if not self._holds_write_lock(entry):  # look again as the only writer: a put may
                # have just replaced it
                with self.writing(entry):
                    return self.lookup(entry, expected)
            log.warning("host-local %s of %s is not usable (%s); removed, it is fetched or "
                        "built again", entry, self.app_id, problem)
            self.remove(entry)
            return None
        with self._lock:
            self._verified[record.file] = identity  # type: ignore[assignment]
        return record

    def stamp_use(self, entry: str) -> None:
        """Records a use for LRU eviction (the use lock file's mtime; not synced)."""
        try:
            self.fs.touch(self.use_lock_path(entry))
        except FileNotFoundError:
            pass

    # -- writes ------------------------------------------------------------------------------

    def install(self, entry: str, *, capability: str, scope: str,
                produce: Produce | None = None, chunks: Iterable[bytes] | None = None,
                expected: tuple[int, int] | None = None, size_hint: int = 0,
                versioned: bool = False, form: str = "file") -> LocalFileRecord:
        """Writes ``entry`` and records it complete; the caller holds :meth:`writing`.

        The bytes come from ``chunks`` or from ``produce(temp path)``, which returns the
        ``(crc32c, size)`` it computed or None (then the temp file is read back). ``expected``
        is checked before the file takes its name (ChecksumMismatch otherwise). A ``versioned``
        entry gets a new file name, so its previous value stays complete until the new record
        replaces the old one. Raises :class:`~spark_steward.errors.LocalSpaceFull` when the
        byte bound leaves no room, :class:`~spark_steward.errors.LocalDiskFull` when the disk
        has none.
        """
        target_rel = f"{entry}~{uuid.uuid4().hex[:8]}" if versioned else entry
        target = self.path_of(target_rel)
        self.fs.makedirs(target.parent)
        previous = self.record(entry)
        announcement = LocalFileRecord(entry, target_rel, self.app_id, capability, scope,
                                       size_hint or (expected[1] if expected else 0), 0,
                                       FileState.WRITING, self.clock(), form)
        announced = self._record_path(entry, WRITING)
        tmp = target.with_name(f".{PurePosixPath(entry).name}.tmp-{uuid.uuid4().hex[:12]}")
        renamed = False
        # A full disk: LocalDiskFull naming the folder, needed and free, once the except below
        # has removed what this write made.
        with reporting_full_disk(target.parent, announcement.size):
            try:
                self._reserve(announcement, announced, exclude=entry)
                if chunks is not None:
                    crc, size = self.fs.write_new(tmp, chunks)
                else:
                    assert produce is not None
                    computed = produce(tmp)
                    self.fs.sync_file(tmp)
                    crc, size = computed if computed is not None else self.fs.crc_of(tmp)
                if expected is not None and (crc, size) != expected:
                    raise ChecksumMismatch(
                        f"new host-local copy of {entry} is wrong: crc32c {crc:08x}/{size} bytes, "
                        f"expected {expected[0]:08x}/{expected[1]} bytes")
                if size > announcement.size:
                    self._reserve(replace(announcement, size=size), announced, exclude=entry)
                self.fs.replace(tmp, target)
                renamed = True
                self.fs.sync_dir(target.parent)
                record = replace(announcement, size=size, crc32c=crc, state=FileState.COMPLETE,
                                 written_at=self.clock())
                self._write_record(self._record_path(entry, COMPLETE), record)
            except BaseException:
                self.fs.unlink(tmp)
                if renamed and (versioned or previous is None):
                    self.fs.unlink(target)
                self.fs.unlink(announced)
                raise
        self.fs.unlink(announced)
        if previous is not None and previous.file != target_rel:
            self._drop_old_version(entry, previous.file)
        self.stamp_use(entry)  # a new value counts as just used
        identity = self.fs.identity(target)
        if identity is not None:
            with self._lock:
                self._verified[target_rel] = identity
        return record

    def _drop_old_version(self, entry: str, rel: str) -> None:
        """The replaced file goes now unless a task holds the entry (it may still open the path
        it was given); then it is a left-over for the next recovery or the application's end."""
        lock = self.fs.lock(self.use_lock_path(entry), exclusive=True, wait=False)
        if lock is None:
            return
        try:
            self.fs.unlink(self.path_of(rel))
        finally:
            lock.release()

    def remove(self, entry: str) -> bool:
        """Removes ``entry``'s record, then its file (a crash between leaves a left-over file,
        never a record without its file). Returns whether there was a record."""
        record = self.record(entry)
        removed = self.fs.unlink(self._record_path(entry, COMPLETE))
        if removed:
            self.fs.sync_dir(self.root / MANIFEST)
        files = {entry} | ({record.file} if record is not None else set())
        for rel in files:
            self.fs.unlink(self.path_of(rel))
            with self._lock:
                self._verified.pop(rel, None)
        return record is not None

    # -- space -------------------------------------------------------------------------------

    def _reserve(self, announcement: LocalFileRecord, path: Path, *, exclude: str) -> None:
        """Makes room for the announced size (evicting least recently used unused entries)
        and writes the announcement, under the host-wide space lock so two writers never count
        the same free bytes."""
        self.fs.makedirs(self.root / MANIFEST)
        lock = self.fs.lock(self.root / MANIFEST / ".space", exclusive=True, wait=True)
        assert lock is not None
        try:
            if self.max_bytes > 0:
                self._make_room(announcement.size, exclude)
            self._write_record(path, announcement)
        finally:
            lock.release()

    def _make_room(self, incoming: int, exclude: str) -> None:
        reserved = sum(a.size for a in self._announcements() if a.entry != exclude)
        held: dict[str, FileLock] = {}
        try:
            occupancy = []
            for record in self.records():
                if record.entry == exclude:
                    continue
                use = self.use_lock_path(record.entry)
                used = self.fs.mtime(use)  # before locking: the lock would create the file
                try:
                    lock = self.fs.lock(use, exclusive=True, wait=False)
                except FileNotFoundError:  # its folder is gone: nobody can be using it
                    lock = None
                    in_use = False
                else:
                    in_use = lock is None
                if lock is not None:
                    held[record.entry] = lock
                occupancy.append(CacheUsage(record.entry, record.size,
                                            used if used is not None else record.written_at,
                                            in_use))
            used_bytes = sum(u.bytes for u in occupancy) + reserved
            victims = choose_evictions(occupancy, used_bytes, incoming, self.max_bytes)
            if victims is None:
                evictable = sum(u.bytes for u in occupancy if not u.in_use)
                raise LocalSpaceFull(
                    f"no room for {_size_text(incoming)} in {self.root} "
                    f"(spark.steward.local.max-bytes={self.max_bytes}): "
                    f"{_size_text(used_bytes)} used or announced, only "
                    f"{_size_text(evictable)} of it by entries no task uses")
            for entry in victims:
                self.remove(entry)
                self.fs.unlink(self.use_lock_path(entry))
                log.info("evicted host-local %s of %s (least recently used)", entry,
                         self.app_id)
        finally:
            for lock in held.values():
                lock.release()

    def usage(self) -> tuple[int, int]:
        """``(entries, bytes)`` of the complete records."""
        records = self.records()
        return len(records), sum(r.size for r in records)

    # -- recovery ----------------------------------------------------------------------------

    def recover(self) -> int:
        """Removes what killed writers left: announcements, temp files and data files that no
        complete record names, when no live process holds their entry's write lock. Complete
        files are kept unverified (checked at first use). Returns how many files went."""
        complete = self.records()
        removed = 0
        for announcement in self._announcements():
            if announcement.entry.split("/", 1)[0] in JVM_WRITTEN:
                continue
            lock = self.fs.lock(self._sidecar(announcement.entry, "write"), exclusive=True,
                                wait=False)
            if lock is None:
                continue  # a live writer
            try:
                current = self.record(announcement.entry)
                if current is None or current.file != announcement.file:
                    removed += self.fs.unlink(self.path_of(announcement.file))
                removed += self.fs.unlink(self._record_path(announcement.entry, WRITING))
            finally:
                lock.release()
        for name in self.fs.list_dir(self.root / MANIFEST):
            if ".tmp-" in name:
                removed += self.fs.unlink(self.root / MANIFEST / name)
        files = []
        for folder in MANAGED:
            for path in self.fs.walk_files(self.root / folder):
                rel = path.relative_to(self.root).as_posix()
                if path.name.startswith(".") and ".tmp-" not in path.name:
                    continue  # lock files
                files.append(rel)
        for rel in left_over_files(files, complete):
            entry = self._entry_of(rel)
            lock = self.fs.lock(self._sidecar(entry, "write"), exclusive=True, wait=False)
            if lock is None:
                continue
            try:
                current = self.record(entry)
                if current is None or current.file != rel:
                    removed += self.fs.unlink(self.path_of(rel))
            finally:
                lock.release()
        for record in complete:
            if self.fs.identity(self.path_of(record.file)) is None:
                with self.writing(record.entry):
                    current = self.record(record.entry)
                    if current is not None and self.fs.identity(
                            self.path_of(current.file)) is None:
                        self.remove(record.entry)
                        removed += 1
        if removed:
            log.info("recovered %s: removed %d left-over file(s)", self.root, removed)
        return removed

    @staticmethod
    def _entry_of(rel: str) -> str:
        """The entry a data or temp file belongs to."""
        path = PurePosixPath(rel)
        name = path.name
        if name.startswith(".") and ".tmp-" in name:
            name = name[1:name.index(".tmp-")]
        elif "~" in name:
            name = name[:name.index("~")]
        return str(path.with_name(name))

    def scratch_dir(self) -> Path:
        """Where writers spool bytes in anonymous temp files (unlinked at creation, so a crash
        leaves nothing there): the merged-checkpoint writer's partitions on their way out."""
        path = self.root / "scratch"
        self.fs.makedirs(path)
        return path



def entry_name(key: str) -> str:
    """A user key as one path segment: reversible, never hidden, never a versioned name."""
    if not isinstance(key, str) or not key:
        raise LocalStateError(f"local state key {key!r} must be a non-empty string")
    name = quote(key, safe="").replace("~", "%7E")
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) > 180:
        raise LocalStateError(f"local state key {key[:60]!r}... is too long ({len(name)} "
                              "characters encoded; at most 180)")
    return name
