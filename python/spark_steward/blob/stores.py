"""Where blob bytes live: a host-local directory and, optionally, the durable HA storage.

Both use the same relative path ``<scopeId>/<key>``. Every write goes to a temp name and is
renamed into place only when complete and verified, so a reader never sees part of a blob, and
a crash leaves at most a temp file (``.<key>.tmp-*``), never a wrong blob under a real name.

Two levels of verification. Bytes that crossed a trust boundary (the HA storage, the network,
a file another process could have written) are checked against the key itself, their SHA-256,
before their first use on a host: a crc32c can be forged by changing four bytes, the key
cannot. Files this application wrote into its private local dir are re-checked with the cheap
crc32c, against the identity (device, inode, size, mtime and ctime) they were verified under:
ctime cannot be set back, so an in-place edit is seen even with its mtime restored. Only
regular files are ever opened as blobs: a symlink, FIFO, directory or device under a blob's
name is refused without being opened for reading (a FIFO would block the reader).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, NamedTuple


from spark_steward.blob.keys import BlobKey, blob_relpath, validate_scope_id
from spark_steward.checksum import crc32c_update, crc_of_fd
from spark_steward.blob.errors import BlobNotFound, NotRegularFile
from spark_steward.errors import ChecksumMismatch
from spark_steward.local.space import reporting_full_disk
from spark_steward.private import make_dirs, open_new

if TYPE_CHECKING:  # fsspec costs an executor's new worker ~40 ms to import
    from spark_steward.storage import Storage

log = logging.getLogger(__name__)

CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class Digest:
    """Identity of some bytes: SHA-256 key, crc32c and size."""

    key: BlobKey
    crc32c: int
    size: int


def digest_file(path: str | os.PathLike[str], copy_to: BinaryIO | None = None) -> Digest:
    """Hashes a file in one pass (optionally copying it on the way)."""
    sha = hashlib.sha256()
    crc = 0
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as src:
        while True:
            n = src.readinto(buf)  # type: ignore[attr-defined]
            if not n:
                break
            chunk = view[:n]
            sha.update(chunk)
            crc = crc32c_update(chunk, crc)
            if copy_to is not None:
                copy_to.write(chunk)
            size += n
    return Digest(BlobKey(sha.hexdigest()), crc, size)


def digest_bytes(data: bytes | bytearray | memoryview) -> Digest:
    """The SHA-256 key, crc32c and size of ``data``."""
    return Digest(BlobKey(hashlib.sha256(data).hexdigest()), crc32c_update(data), len(data))


class Received(NamedTuple):
    """What a transfer computed over the bytes it wrote: their crc32c, size and, when it
    hashed them on the way, their SHA-256 (hex)."""

    crc32c: int
    size: int
    sha256: str | None = None


Identity = tuple[int, int, int, int, int]


def identity_of(st: os.stat_result) -> Identity:
    """(device, inode, size, mtime, ctime): changes with any replacement or in-place write,
    also one whose mtime was set back afterwards (ctime cannot be)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_identity(path: Path) -> Identity | None:
    """Which regular file ``path`` is now; None when there is none (or it is not a regular
    file). A verification is remembered against it, so a changed file is checked again."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return identity_of(st) if stat.S_ISREG(st.st_mode) else None


def open_blob(path: Path) -> BinaryIO:
    """Opens the regular file at ``path`` for reading, without following a symlink and
    without blocking on a FIFO; anything else raises NotRegularFile (FileNotFoundError when
    nothing is there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        kind = "a symlink" if os.path.islink(path) else f"unreadable ({e.strerror})"
        raise NotRegularFile(f"{path} is {kind}, not a blob file; refused") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is {_kind_of(mode)}, not a regular blob file; "
                                 "refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return f"of type {stat.S_IFMT(mode):o}"


def check_key(key: BlobKey, size: int, tmp: Path, received: Received | None,
              what: str) -> Received:
    """Checks a copy that crossed a trust boundary against its key: the SHA-256 the transfer
    computed, else the file's (read back once, with its crc32c). ChecksumMismatch when it
    is other bytes, whatever their crc32c says."""
    if received is None or received.sha256 is None:
        digest = digest_file(tmp)
        received = Received(digest.crc32c, digest.size, digest.key.digest)
    if received.size != size or received.sha256 != key.digest:
        raise ChecksumMismatch(
            f"{what} is not blob {key}: {received.size} bytes hashing to "
            f"{str(received.sha256)[:16]}..., expected {size} bytes hashing to its key")
    return received


def temp_name(target: Path) -> Path:
    """A fresh hidden temp file name next to ``target``, for an atomic write."""
    return target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}")


def discard(path: Path) -> None:
    """Removes ``path``; nothing there is fine."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class LocalBlobStore:
    """``<root>/<scopeId>/<key>`` on this host; no fsync (the crc check at first use catches
    what a power cut could leave, and the HA copy is the durable one). A write the disk has
    no room for raises LocalDiskFull and leaves nothing behind."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, scope: str, key: BlobKey) -> Path:
        """Where the blob ``key`` of ``scope`` lives in this store."""
        return self.root / blob_relpath(scope, key)

    def scope_dir(self, scope: str) -> Path:
        """The folder of ``scope``'s blobs."""
        return self.root / validate_scope_id(scope)

    def has(self, scope: str, key: BlobKey) -> bool:
        """True when the store holds the blob as a regular file."""
        return self.path(scope, key).is_file()

    def install(self, scope: str, key: BlobKey, expected_size: int,
                produce: Callable[[Path], Received | None]) -> Path:
        """Lets ``produce`` fill a temp file from an untrusted source (the HA copy), checks it
        against ``key`` and renames it into place.

        ``produce`` returns what it computed over the bytes it wrote, sparing a second read
        when that includes their SHA-256; else the temp file is read back. ChecksumMismatch
        (temp removed) if what ``produce`` made is not the blob.
        """
        target = self.path(scope, key)
        with reporting_full_disk(target.parent, expected_size):
            make_dirs(target.parent)
            tmp = temp_name(target)
            try:
                check_key(key, expected_size, tmp, produce(tmp),
                          f"copy of blob {key} ({scope})")
                os.replace(tmp, target)
            except BaseException:
                discard(tmp)
                raise
        return target

    def put_file(self, scope: str, source: str | os.PathLike[str]) -> Digest:
        """Copies ``source`` in, hashing it on the way; returns its digest."""
        folder = self.scope_dir(scope)
        with reporting_full_disk(folder, os.stat(source).st_size):
            make_dirs(folder)
            tmp = folder / f".put.tmp-{uuid.uuid4().hex[:12]}"
            try:
                with open_new(tmp) as out:
                    digest = digest_file(source, copy_to=out)
                os.replace(tmp, self.path(scope, digest.key))
            except BaseException:
                discard(tmp)
                raise
        return digest

    def put_bytes(self, scope: str, data: bytes | bytearray | memoryview) -> Digest:
        """Writes ``data`` as a blob of ``scope`` (temp file, then atomic rename) and returns its
        digest."""
        digest = digest_bytes(data)
        target = self.path(scope, digest.key)
        with reporting_full_disk(target.parent, digest.size):
            make_dirs(target.parent)
            tmp = temp_name(target)
            try:
                with open_new(tmp) as out:
                    out.write(data)
                os.replace(tmp, target)
            except BaseException:
                discard(tmp)
                raise
        return digest

    def open_verified(self, scope: str, key: BlobKey, expected_crc: int, expected_size: int,
                      known: Identity | None) -> tuple[BinaryIO, Identity] | None:
        """The stored copy, opened, when it is a regular file that matches: by its crc32c,
        unless it is still the file last verified (``known`` identity). None when it is
        missing; a corrupt copy or anything but a regular file under its name is removed
        (a directory is refused: NotRegularFile)."""
        path = self.path(scope, key)
        try:
            file = open_blob(path)
        except FileNotFoundError:
            return None
        except NotRegularFile as e:
            if os.path.isdir(path) and not os.path.islink(path):
                raise
            log.warning("%s; removed, the blob is restored", e)
            discard(path)
            return None
        try:
            identity = identity_of(os.fstat(file.fileno()))
            if identity == known:
                return file, identity
            crc, size = crc_of_fd(file.fileno())
            if crc == expected_crc and size == expected_size:
                return file, identity_of(os.fstat(file.fileno()))
        except BaseException:
            file.close()
            raise
        file.close()
        log.warning("blob %s in %s is corrupt (crc32c %08x/%d bytes, expected %08x/%d); "
                    "removed", key, path.parent, crc, size, expected_crc, expected_size)
        discard(path)
        return None

    def delete(self, scope: str, key: BlobKey) -> None:
        """Removes one blob; a missing one is fine."""
        discard(self.path(scope, key))

    def delete_scope(self, scope: str) -> None:
        """Removes every blob of ``scope``."""
        shutil.rmtree(self.scope_dir(scope), ignore_errors=True)

    def delete_all(self) -> None:
        """Removes the whole store."""
        shutil.rmtree(self.root, ignore_errors=True)


class HaBlobStore:
    """The durable copy: ``<storage>/apps/<appId>/blobs/<scopeId>/<key>`` on any fsspec URL."""

    def __init__(self, storage: Storage | Callable[[], Storage], app_id: str) -> None:
        self._storage = storage
        self.app_id = app_id
        self.base = f"apps/{app_id}/blobs"

    @functools.cached_property
    def storage(self) -> Storage:
        """The storage, opened on first use when given as a factory: an executor whose blobs
        all come from a same-host link never pays for importing fsspec."""
        return self._storage() if callable(self._storage) else self._storage

    def rel(self, scope: str, key: BlobKey) -> str:
        """The storage path of a blob, relative to the storage dir."""
        return f"{self.base}/{blob_relpath(scope, key)}"

    def url_of(self, scope: str, key: BlobKey) -> str:
        """The full storage URL of a blob."""
        return self.storage.url_of(self.rel(scope, key))

    def put(self, scope: str, key: BlobKey, local_path: Path) -> None:
        """Uploads the local copy of a blob to the storage dir."""
        self.storage.upload(self.rel(scope, key), str(local_path))

    def download(self, scope: str, key: BlobKey, dest: Path) -> Received:
        """Streams the HA copy into ``dest``, hashing it on the way (whoever can write the
        storage could have replaced it: callers check the SHA-256 against the key).

        FileNotFoundError when it is not there.
        """
        crc = 0
        size = 0
        sha = hashlib.sha256()
        with self.storage.open_read(self.rel(scope, key)) as src, open_new(dest) as out:
            while chunk := src.read(CHUNK):
                crc = crc32c_update(chunk, crc)
                sha.update(chunk)
                size += len(chunk)
                out.write(chunk)
        return Received(crc, size, sha.hexdigest())

    def delete(self, scope: str, key: BlobKey) -> None:
        """Deletes one blob from the storage dir."""
        self.storage.delete(self.rel(scope, key))

    def delete_scope(self, scope: str) -> None:
        """Deletes every blob of ``scope`` from the storage dir."""
        self.storage.delete(f"{self.base}/{validate_scope_id(scope)}")

    def delete_all(self) -> None:
        """Deletes the application's whole blob folder from the storage dir."""
        self.storage.delete(self.base)

