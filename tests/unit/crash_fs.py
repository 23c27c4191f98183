"""An in-memory disk that loses power on command, for the working directory's crash tests.

It keeps two views: what the running process sees, and what would survive a power cut (file
contents only once synced; names only once their directory is synced). Every create, write,
sync, rename and unlink counts as one step; ``crash_at`` raises :class:`PowerCut` before that
step. :meth:`CrashFs.after_power_cut` is the disk as the next boot finds it: unsynced contents
are torn (half of what was written), unsynced names revert unless ``keep_unsynced_names``
(modelling a filesystem that happened to write its journal, but not the data, first).
"""

from __future__ import annotations

import itertools
from pathlib import Path, PurePosixPath
from typing import Iterable

import crc32c


class PowerCut(Exception):
    """The power went at this step; nothing after it happened."""


class _NoLock:
    def release(self) -> None:
        pass


class CrashFs:
    def __init__(self, crash_at: int | None = None, *, sync_files: bool = True) -> None:
        self.crash_at = crash_at
        self.sync_files = sync_files  # False models code (or a disk) that never syncs data
        self.steps = 0
        self.trace: list[str] = []
        self.names: dict[str, int] = {}
        self.contents: dict[int, bytes] = {}
        self.versions: dict[int, int] = {}
        self.durable_names: dict[str, int] = {}
        self.durable_contents: dict[int, bytes] = {}
        self.stamps: dict[str, float] = {}
        self._inodes = itertools.count(1)
        self._clock = itertools.count(1)

    # -- the power ---------------------------------------------------------------------------

    def _step(self, what: str) -> None:
        self.steps += 1
        self.trace.append(what)
        if self.crash_at is not None and self.steps >= self.crash_at:
            raise PowerCut(f"step {self.steps}: {what}")

    def after_power_cut(self, *, keep_unsynced_names: bool = False) -> "CrashFs":
        fresh = CrashFs(sync_files=self.sync_files)
        names = self.names if keep_unsynced_names else self.durable_names
        for path, inode in names.items():
            durable = self.durable_contents.get(inode)
            current = self.contents.get(inode, b"")
            fresh.names[path] = inode
            # Files are written once: synced content survives, unsynced content is torn.
            fresh.contents[inode] = (durable if durable is not None
                                     else current[: len(current) // 2])
            fresh.versions[inode] = 0
            fresh.durable_names[path] = inode
            fresh.durable_contents[inode] = fresh.contents[inode]
        fresh._inodes = itertools.count(max(names.values(), default=0) + 1)
        return fresh

    # -- LocalFs -----------------------------------------------------------------------------

    @staticmethod
    def _key(path: Path | str) -> str:
        return str(PurePosixPath(str(path)))

    def _inode(self, path: Path) -> int:
        try:
            return self.names[self._key(path)]
        except KeyError:
            raise FileNotFoundError(str(path)) from None

    def write_new(self, path: Path, chunks: Iterable[bytes]) -> tuple[int, int]:
        key = self._key(path)
        if key in self.names:
            raise FileExistsError(key)
        self._step(f"create {key}")
        inode = next(self._inodes)
        self.names[key] = inode
        self.contents[inode] = b""
        self.versions[inode] = 0
        crc = size = 0
        for chunk in chunks:
            self._step(f"write {key}")
            self.contents[inode] += bytes(chunk)
            self.versions[inode] += 1
            crc = crc32c.crc32c(chunk, crc)
            size += len(chunk)
        self.sync_file(path)
        return crc, size

    def sync_file(self, path: Path) -> None:
        inode = self._inode(path)
        self._step(f"sync {self._key(path)}")
        if self.sync_files:
            self.durable_contents[inode] = self.contents[inode]

    def sync_dir(self, path: Path) -> None:
        self._step(f"syncdir {self._key(path)}")
        folder = self._key(path)
        for name in [n for n in self.durable_names if str(PurePosixPath(n).parent) == folder]:
            if name not in self.names:
                del self.durable_names[name]
        for name, inode in self.names.items():
            if str(PurePosixPath(name).parent) == folder:
                self.durable_names[name] = inode

    def replace(self, src: Path, dst: Path) -> None:
        inode = self._inode(src)
        self._step(f"rename {self._key(src)} -> {self._key(dst)}")
        del self.names[self._key(src)]
        self.names[self._key(dst)] = inode

    def unlink(self, path: Path) -> bool:
        key = self._key(path)
        if key not in self.names:
            return False
        self._step(f"unlink {key}")
        del self.names[key]
        return True

    def read_bytes(self, path: Path) -> bytes:
        return self.contents[self._inode(path)]

    def crc_of(self, path: Path) -> tuple[int, int]:
        data = self.read_bytes(path)
        return crc32c.crc32c(data), len(data)

    def identity(self, path: Path) -> tuple[int, int, int] | None:
        inode = self.names.get(self._key(path))
        if inode is None:
            return None
        return (inode, self.versions[inode], len(self.contents[inode]))

    def list_dir(self, path: Path) -> list[str]:
        folder = self._key(path)
        return sorted(PurePosixPath(n).name for n in self.names
                      if str(PurePosixPath(n).parent) == folder)

    def walk_files(self, path: Path) -> list[Path]:
        prefix = self._key(path) + "/"
        return [Path(n) for n in sorted(self.names) if n.startswith(prefix)]

    def makedirs(self, path: Path) -> None:
        pass  # folders are implicit (and durable)

    def touch(self, path: Path) -> float:
        stamp = float(next(self._clock))
        self.stamps[self._key(path)] = stamp
        return stamp

    def mtime(self, path: Path) -> float | None:
        return self.stamps.get(self._key(path))

    def lock(self, path: Path, *, exclusive: bool, wait: bool) -> _NoLock:
        return _NoLock()  # one process: nobody else holds anything

    # -- for assertions ----------------------------------------------------------------------

    def files_under(self, path: Path | str) -> list[str]:
        prefix = self._key(path) + "/"
        return sorted(n for n in self.names if n.startswith(prefix))
