"""Named key-value stores on each host, for what tasks build or fetch once per host: an
unpacked model, a lookup index. Values are files of the application's working dir, checked with
crc32c, kept across Python worker and executor restarts, removed when the application ends."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Callable, Iterable, Iterator, Union
from urllib.parse import unquote

from spark_steward.checksum import crc32c_of
from spark_steward.local.errors import LocalStateError
from spark_steward.local.fs import CHUNK
from spark_steward.local.working_dir import WorkingDir, entry_name

Value = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
FOLDER = "state"


def _chunks_of(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as src:
        while chunk := src.read(CHUNK):
            yield chunk


def session_folder(session_id: str) -> str:
    """The folder of Connect session ``session_id``'s stores: ``state/.connect/<session>`` (no
    store name is encoded with a leading dot, so no application store meets it)."""
    return f"{FOLDER}/.connect/{entry_name(session_id)}"


def sweep_sessions(work: WorkingDir, session_ids: Iterable[str]) -> int:
    """Removes every store entry of the ended Connect sessions ``session_ids`` through the
    manifest (a reader holding one keeps its open file); how many entries went."""
    sessions = list(session_ids)
    prefixes = tuple(session_folder(s) + "/" for s in sessions)
    if not prefixes:
        return 0
    removed = 0
    for record in work.records():
        if record.entry.startswith(prefixes) and work.remove(record.entry):
            removed += 1
    for session in sessions:  # then the folders, with the stores' lock files
        shutil.rmtree(work.path_of(session_folder(session)), ignore_errors=True)
    return removed


class LocalState:
    """One named store of one application on this host, seen from a task.

    Keys are strings; values are bytes or files (a ``str`` or path-like value names a file whose
    content is copied in). Every read is verified: ``get`` checks the crc32c of the bytes it
    returns, ``path`` checks the file at its first use in the process.
    """

    def __init__(self, work: WorkingDir, name: str,
                 hold: Callable[[str], None] | None = None, *, owner: str = "") -> None:
        """``owner``: a Spark Connect session's id; its stores are apart from the application's
        and from other sessions' (:func:`session_folder`)."""
        self.work = work
        self.name = name
        self._folder = f"{session_folder(owner) if owner else FOLDER}/{entry_name(name)}"
        self._hold = hold

    def _entry(self, key: str) -> str:
        return f"{self._folder}/{entry_name(key)}"

    def __repr__(self) -> str:
        return f"LocalState({self.name!r} in {self.work.path_of(self._folder)})"

    # -- writes ------------------------------------------------------------------------------

    def put(self, key: str, value: Value) -> None:
        """Stores ``value`` under ``key``, replacing any previous value atomically: a reader on
        the host sees the old value or the new one, never a mix, even across a crash."""
        entry = self._entry(key)
        with self.work.writing(entry):
            self._put_locked(entry, value)

    def _put_locked(self, entry: str, value: Value) -> None:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            self.work.install(entry, capability=FOLDER, scope=self.name, chunks=[data],
                              size_hint=len(data), versioned=True, form="bytes")
        elif isinstance(value, (str, os.PathLike)):
            source = Path(value)
            if not source.is_file():
                raise LocalStateError(f"local state {self.name!r}: value for {entry!r} names "
                                      f"{source}, which is not a file")
            self.work.install(entry, capability=FOLDER, scope=self.name,
                              chunks=_chunks_of(source), size_hint=source.stat().st_size,
                              versioned=True)
        else:
            raise LocalStateError(f"local state {self.name!r}: a value must be bytes or a file "
                                  f"path, not {type(value).__name__}")

    def drop(self, key: str) -> bool:
        """Removes ``key``; returns whether it was there."""
        entry = self._entry(key)
        with self.work.writing(entry):
            return self.work.remove(entry)

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, verified; None when there is none (or it failed verification
        and was removed)."""
        entry = self._entry(key)
        lock = self.work.hold(entry)
        try:
            for _ in range(3):  # a concurrent put may replace the file between record and read
                record = self.work.record(entry)
                if record is None:
                    return None
                try:
                    data = self.work.fs.read_bytes(self.work.path_of(record.file))
                except FileNotFoundError:
                    continue
                if (crc32c_of(data), len(data)) == (record.crc32c, record.size):
                    self.work.stamp_use(entry)
                    return data
                with self.work.writing(entry):  # checks again, removes what is still wrong
                    if self.work.lookup(entry) is None:
                        return None
            return None
        finally:
            lock.release()

    def path(self, key: str) -> str | None:
        """A verified local path of ``key``'s value, or None. The file is kept (not evicted
        or removed) until the running task ends; do not write to it."""
        entry = self._entry(key)
        if self._hold is not None:
            self._hold(entry)
        record = self.work.lookup(entry)
        if record is None:
            return None
        self.work.stamp_use(entry)
        return str(self.work.path_of(record.file))

    def ls(self) -> list[str]:
        """The keys with a complete value, sorted."""
        prefix = self._folder + "/"
        return sorted(unquote(r.entry[len(prefix):]) for r in self.work.records()
                      if r.entry.startswith(prefix) and "/" not in r.entry[len(prefix):])

    def keys(self) -> list[str]:
        """Deprecated name of :meth:`ls` (one verb per act across spark-steward)."""
        warnings.warn("LocalState.keys() is deprecated: use LocalState.ls()", DeprecationWarning,
                      stacklevel=2)
        return self.ls()

    def delete(self, key: str) -> bool:
        """Deprecated name of :meth:`drop` (one verb per act across spark-steward)."""
        warnings.warn("LocalState.delete() is deprecated: use LocalState.drop()",
                      DeprecationWarning, stacklevel=2)
        return self.drop(key)

    def __contains__(self, key: str) -> bool:
        return self.work.record(self._entry(key)) is not None

    def get_or_create(self, key: str, build: Callable[[], Value]) -> bytes | str:
        """The value of ``key``, built by ``build()`` once per host.

        While one task builds, tasks in other Python workers and executors on the host wait
        and then get the stored result. ``build`` returns bytes (then bytes are returned) or a
        file path (then the verified local path of the stored copy is returned).
        """
        entry = self._entry(key)
        existing = self._existing(key)
        if existing is not None:
            return existing
        with self.work.writing(entry):
            existing = self._existing(key)
            if existing is not None:
                return existing
            value = build()
            self._put_locked(entry, value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        found = self.path(key)
        if found is None:
            raise LocalStateError(f"local state {self.name!r}: {key!r} was built but is gone "
                                  "(evicted at once? raise spark.steward.local.max-bytes)")
        return found

    def _existing(self, key: str) -> bytes | str | None:
        """What get_or_create returns for a stored value: bytes for a value built as bytes,
        the verified path for one built as a file."""
        record = self.work.record(self._entry(key))
        if record is None:
            return None
        return self.get(key) if record.form == "bytes" else self.path(key)
