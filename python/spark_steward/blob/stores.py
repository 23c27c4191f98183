"""Where blob bytes live: a host-local directory and, optionally, the durable HA storage.

Both use the same relative path ``<scopeId>/<key>``. Every write goes to a temp name and is
renamed into place only when complete and verified, so a reader never sees part of a blob, and
a crash leaves at most a temp file (``.<key>.tmp-*``), never a wrong blob under a real name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

import crc32c as _crc32c

from spark_steward.blob.keys import BlobKey, blob_relpath, validate_scope_id
from spark_steward.checksum import crc_of_file
from spark_steward.errors import ChecksumMismatch

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
            crc = _crc32c.crc32c(chunk, crc)
            if copy_to is not None:
                copy_to.write(chunk)
            size += n
    return Digest(BlobKey(sha.hexdigest()), crc, size)


def digest_bytes(data: bytes | bytearray | memoryview) -> Digest:
    return Digest(BlobKey(hashlib.sha256(data).hexdigest()), _crc32c.crc32c(data), len(data))


def file_identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` is now (inode, mtime); None when there is none. A verification is
    remembered against it, so a replaced or rewritten file is checked again."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def temp_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}")


def discard(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class LocalBlobStore:
    """``<root>/<scopeId>/<key>`` on this host; no fsync (the crc check at first use catches
    what a power cut could leave, and the HA copy is the durable one)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, scope: str, key: BlobKey) -> Path:
        return self.root / blob_relpath(scope, key)

    def scope_dir(self, scope: str) -> Path:
        return self.root / validate_scope_id(scope)

    def has(self, scope: str, key: BlobKey) -> bool:
        return self.path(scope, key).is_file()

    def install(self, scope: str, key: BlobKey, expected_crc: int, expected_size: int,
                produce: Callable[[Path], tuple[int, int] | None]) -> Path:
        """Lets ``produce`` create a temp file, verifies it, renames it into place.

        ``produce`` returns ``(crc32c, size)`` when it computed them from the bytes it wrote
        (a streamed download), sparing a second read; else the temp file is read back.
        ChecksumMismatch (temp removed) if what ``produce`` made is not the blob.
        """
        target = self.path(scope, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(target)
        try:
            computed = produce(tmp)
            crc, size = computed if computed is not None else crc_of_file(tmp)
            if crc != expected_crc or size != expected_size:
                raise ChecksumMismatch(
                    f"copy of blob {key} ({scope}) is wrong: crc32c {crc:08x}/{size} bytes, "
                    f"expected {expected_crc:08x}/{expected_size} bytes")
            os.replace(tmp, target)
        except BaseException:
            discard(tmp)
            raise
        return target

    def put_file(self, scope: str, source: str | os.PathLike[str]) -> Digest:
        """Copies ``source`` in, hashing it on the way; returns its digest."""
        scope_dir = self.scope_dir(scope)
        scope_dir.mkdir(parents=True, exist_ok=True)
        tmp = scope_dir / f".put.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with open(tmp, "wb") as out:
                digest = digest_file(source, copy_to=out)
            os.replace(tmp, self.path(scope, digest.key))
        except BaseException:
            discard(tmp)
            raise
        return digest

    def put_bytes(self, scope: str, data: bytes | bytearray | memoryview) -> Digest:
        digest = digest_bytes(data)
        target = self.path(scope, digest.key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(target)
        try:
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, target)
        except BaseException:
            discard(tmp)
            raise
        return digest

    def verify(self, scope: str, key: BlobKey, expected_crc: int, expected_size: int) -> bool:
        """True when the stored copy exists and matches; a mismatching copy is removed."""
        path = self.path(scope, key)
        try:
            crc, size = crc_of_file(path)
        except FileNotFoundError:
            return False
        if crc == expected_crc and size == expected_size:
            return True
        log.warning("blob %s in %s is corrupt (crc32c %08x/%d bytes, expected %08x/%d); "
                    "removed", key, path.parent, crc, size, expected_crc, expected_size)
        discard(path)
        return False

    def delete(self, scope: str, key: BlobKey) -> None:
        discard(self.path(scope, key))

    def delete_scope(self, scope: str) -> None:
        shutil.rmtree(self.scope_dir(scope), ignore_errors=True)

    def delete_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class HaBlobStore:
    """The durable copy: ``<storage>/apps/<appId>/blobs/<scopeId>/<key>`` on any fsspec URL."""

    def __init__(self, storage: Storage, app_id: str) -> None:
        self.storage = storage
        self.app_id = app_id
        self.base = f"apps/{app_id}/blobs"

    def rel(self, scope: str, key: BlobKey) -> str:
        return f"{self.base}/{blob_relpath(scope, key)}"

    def url_of(self, scope: str, key: BlobKey) -> str:
        return self.storage.url_of(self.rel(scope, key))

    def put(self, scope: str, key: BlobKey, local_path: Path) -> None:
        self.storage.upload(self.rel(scope, key), str(local_path))

    def download(self, scope: str, key: BlobKey, dest: Path) -> tuple[int, int]:
        """Streams the HA copy into ``dest``; returns its ``(crc32c, size)``.

        FileNotFoundError when it is not there.
        """
        crc = 0
        size = 0
        with self.storage.open_read(self.rel(scope, key)) as src, open(dest, "wb") as out:
            while chunk := src.read(CHUNK):
                crc = _crc32c.crc32c(chunk, crc)
                size += len(chunk)
                out.write(chunk)
        return crc, size

    def delete(self, scope: str, key: BlobKey) -> None:
        self.storage.delete(self.rel(scope, key))

    def delete_scope(self, scope: str) -> None:
        self.storage.delete(f"{self.base}/{validate_scope_id(scope)}")

    def delete_all(self) -> None:
        self.storage.delete(self.base)

