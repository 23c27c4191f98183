"""The few filesystem calls the working directory makes, behind one small interface.

The working directory's guarantees (a crash at any instant leaves the old or the new state) rest
on the order of these calls: write a temp name, sync it, rename it, sync the directory. Keeping
them behind :class:`LocalFs` lets the unit tests replace the disk by one that loses everything
unsynced at a power cut injected before any call.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Iterable, Protocol

from spark_steward.checksum import crc32c_update, crc_of_file
from spark_steward.private import PRIVATE_FILE_MODE, make_dirs

CHUNK = 8 << 20
# Every file the working dir makes is its user's only (private.py), and never a link's target.
_CREATE = os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


class FileLock(Protocol):
    def release(self) -> None:
        """Releases the lock."""


class LocalFs(Protocol):
    """What :class:`~spark_steward.local.working_dir.WorkingDir` needs from a disk."""

    def write_new(self, path: Path, chunks: Iterable[bytes]) -> tuple[int, int]:
        """Creates ``path`` (never existing) from ``chunks``, syncs it; ``(crc32c, size)``."""

    def sync_file(self, path: Path) -> None:
        """Flushes the file's content to disk."""

    def sync_dir(self, path: Path) -> None:
        """Flushes the folder's entries to disk, so a rename in it survives a crash."""

    def replace(self, src: Path, dst: Path) -> None:
        """Renames ``src`` over ``dst`` atomically."""

    def unlink(self, path: Path) -> bool:
        """Removes ``path``; False when it was not there."""

    def read_bytes(self, path: Path) -> bytes:
        """The whole content of the file."""

    def crc_of(self, path: Path) -> tuple[int, int]:
        """``(crc32c, size)`` of ``path``; FileNotFoundError when it is not there."""

    def identity(self, path: Path) -> tuple[int, int, int] | None:
        """Which file ``path`` is now (inode, mtime, size), None when there is none."""

    def list_dir(self, path: Path) -> list[str]:
        """Names in ``path``; empty when it does not exist."""

    def walk_files(self, path: Path) -> list[Path]:
        """Every file below ``path``."""

    def makedirs(self, path: Path) -> None:
        """Creates the folder and its parents, private to this user."""

    def touch(self, path: Path) -> float:
        """Creates or stamps ``path`` with now (a use time for LRU); returns the stamp."""

    def mtime(self, path: Path) -> float | None:
        """The file's modification time, or None when it is not there."""

    def lock(self, path: Path, *, exclusive: bool, wait: bool) -> FileLock | None:
        """A lock on ``path`` (created when missing), None when ``wait`` is False and another
        process holds a conflicting one. Held until released or the process dies."""


class _Flock:
    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class OsFs:
    """The real disk: ``fsync``, ``rename`` and ``flock`` of this host."""

    def write_new(self, path: Path, chunks: Iterable[bytes]) -> tuple[int, int]:
        """Writes ``chunks`` to a new private file (refused if it exists) and returns its crc32c and
        size."""
        crc = size = 0
        fd = os.open(path, _CREATE | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                for chunk in chunks:
                    out.write(chunk)
                    crc = crc32c_update(chunk, crc)
                    size += len(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        return crc, size

    def sync_file(self, path: Path) -> None:
        """Flushes the file's content to disk (fsync)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_dir(self, path: Path) -> None:
        """Flushes the folder's entries to disk; a missing folder is fine."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        except OSError as exc:  # some filesystems refuse to sync a directory
            if exc.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        """Renames ``src`` over ``dst`` atomically (``os.replace``)."""
        os.replace(src, dst)

    def unlink(self, path: Path) -> bool:
        """Removes the file; returns whether it was there."""
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    def read_bytes(self, path: Path) -> bytes:
        """The whole content of the file."""
        return Path(path).read_bytes()

    def crc_of(self, path: Path) -> tuple[int, int]:
        """The file's crc32c and size."""
        return crc_of_file(path)

    def identity(self, path: Path) -> tuple[int, int, int] | None:
        """The file's inode, mtime (ns) and size, or None: tells a replaced file from the one
        recorded."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def list_dir(self, path: Path) -> list[str]:
        """The folder's entry names, sorted; empty when it is not a folder."""
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def walk_files(self, path: Path) -> list[Path]:
        """Every file under ``path``."""
        found: list[Path] = []
        for folder, _, names in os.walk(path):
            found.extend(Path(folder) / name for name in names)
        return found

    def makedirs(self, path: Path) -> None:
        """Creates the folder and its parents, private to this user."""
        make_dirs(path)

    def touch(self, path: Path) -> float:
        """Creates the file if needed, sets its mtime to now and returns it."""
        fd = os.open(path, _CREATE | os.O_WRONLY, PRIVATE_FILE_MODE)
        try:
            os.utime(fd)
            return os.fstat(fd).st_mtime
        finally:
            os.close(fd)

    def mtime(self, path: Path) -> float | None:
        """The file's modification time, or None when it is not there."""
        try:
            return os.stat(path).st_mtime
        except FileNotFoundError:
            return None

    def lock(self, path: Path, *, exclusive: bool, wait: bool) -> FileLock | None:
        """An flock on ``path`` (shared or exclusive); without ``wait``, None when another holder
        has it."""
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
        while True:
            fd = os.open(path, _CREATE | os.O_RDWR, PRIVATE_FILE_MODE)
            try:
                fcntl.flock(fd, mode)
            except BlockingIOError:
                os.close(fd)
                return None
            # A deleter may have unlinked the lock file between our open and our lock.
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return _Flock(fd)
            os.close(fd)


OS_FS = OsFs()
