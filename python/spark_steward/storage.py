"""A thin layer over fsspec: one storage root, atomic small-object writes, listing, idempotent
recursive delete, checksummed records.

Any fsspec URL works: ``file://`` (the embedded default), ``memory://`` for unit tests, ``s3://``
and friends for durable HA storage. Paths given to :class:`Storage` methods are relative to the
root and use ``/``; they are validated so nothing escapes the root.

On a local filesystem every folder and file written here is its user's only (0700/0600,
:mod:`spark_steward.private`): blob HA copies and checkpoint data must not be readable by every
user of the host. Spark's and the JVM's own writes below (cached-table Parquet, checkpoint
data) land in folders created here first, so they are out of other users' reach too. Other
backends keep their own access control.
"""

from __future__ import annotations

import difflib
import logging
import os
import posixpath
import pwd
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.registry import known_implementations

from spark_steward import records
from spark_steward.errors import OutcomeUnknown, StorageBackendMissing, StorageError
from spark_steward.private import make_dirs, open_new

log = logging.getLogger(__name__)

def _io_errors() -> tuple[type[BaseException], ...]:
    """What a backend raises for a failed operation: OSError, and the errors of botocore (s3fs
    passes "could not connect to the endpoint" through untranslated). Used as ``except
    _io_errors()``, evaluated only when something is raised, so botocore is never imported
    here: a botocore error can only come from a botocore already loaded."""
    botocore = sys.modules.get("botocore.exceptions")
    return ((OSError,) if botocore is None
            else (OSError, botocore.BotoCoreError, botocore.ClientError))


# Object stores make a single PUT atomic and have no cheap rename.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oss",
                            "memory"})


@dataclass(frozen=True)
class FileEntry:
    """One file below the root: its relative path, size in bytes and, where the backend lists
    it, modification time (epoch seconds; informative, so not part of equality)."""

    path: str
    size: int
    modified: float | None = field(default=None, compare=False)


def _modified(info: dict[str, Any]) -> float | None:
    """Modification time of an fsspec info dict, whatever the backend calls it."""
    for key in ("mtime", "LastModified", "last_modified", "created", "updated"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None


def _with_scheme(url: str) -> str:
    """``url``, a bare path made a ``file://`` URL."""
    return url if "://" in url else "file://" + os.path.abspath(url)


def _missing_backend(url: str, protocol: str, exc: ImportError) -> StorageBackendMissing:
    spec = known_implementations.get(protocol, {})
    package = str(spec.get("class", "")).split(".", 1)[0]
    hint = spec.get("err", "") or str(exc)
    install = f"; pip install {package}" if package and package != "fsspec" else ""
    return StorageBackendMissing(
        f"storage URL {url} needs an fsspec backend for {protocol}://: {hint}{install}")


def check_protocol(url: str) -> str:
    """The protocol of ``url`` (the innermost of a ``a::b://`` chain) once fsspec knows it and
    its backend imports; nothing is opened. An unknown protocol raises StorageError naming it
    (and the nearest known one), a known one whose package is missing StorageBackendMissing
    naming the ``pip install``.

    >>> check_protocol("fiel:///x")
    Traceback (most recent call last):
    StorageError: storage URL fiel:///x has an unknown protocol fiel:// (did you mean file://?)
    """
    url = _with_scheme(url)
    protocols = [part.split("://", 1)[0] for part in url.split("::")]
    for protocol in protocols:
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as exc:
            raise _missing_backend(url, protocol, exc) from None
        except ValueError:
            near = difflib.get_close_matches(protocol, sorted(known_implementations), n=1)
            guess = f"did you mean {near[0]}://?" if near else \
                "e.g. file:///path or s3://bucket/path"
            raise StorageError(f"storage URL {url} has an unknown protocol {protocol}:// "
                               f"({guess})") from None
    return protocols[-1]


def _clean_relative(rel: str) -> str:
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise StorageError(f"path {rel!r} escapes the storage root")
    return "/".join(parts)


class Storage:
    """One storage root. Build it with :meth:`from_url`."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, url: str,
                 options: dict[str, Any] | None = None) -> None:
        self.fs = fs
        self.options = dict(options or {})
        self.root = root.rstrip("/") or "/"
        self.url = url
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = protocol
        self.is_local = isinstance(fs, LocalFileSystem)
        self.is_object_store = protocol in _OBJECT_STORES

    @classmethod
    def from_url(cls, url: str, **options: Any) -> "Storage":
        """Storage rooted at ``url``; a missing backend names the package to install."""
        url = _with_scheme(url)
        check_protocol(url)
        try:
            fs, root = fsspec.core.url_to_fs(url, **options)
        except ImportError as exc:
            raise _missing_backend(url, url.split("://", 1)[0], exc) from None
        except ValueError as exc:
            raise StorageError(f"storage URL {url} is not usable: {exc}") from None
        return cls(fs, root, url, options)

    # -- paths -----------------------------------------------------------------------------

    def path(self, rel: str = "") -> str:
        """Full backend path of ``rel``."""
        rel = _clean_relative(rel)
        return posixpath.join(self.root, rel) if rel else self.root

    def url_of(self, rel: str = "") -> str:
        """A URL Spark or another process can open for ``rel``."""
        rel = _clean_relative(rel)
        return self.url.rstrip("/") + ("/" + rel if rel else "")

    def require_writable(self) -> None:
        """Raises StorageError, naming the storage dir, the user and what to do, when this
        user cannot create files in it (or, while it does not exist yet, in the folder it would
        be created in). A probe file is created and removed; only local storage is probed,
        other backends report their own error at the first write."""
        if not self.is_local:
            return
        folder = self.root
        while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)  # the nearest existing folder: mkdir starts there
        probe = os.path.join(folder, f".spark-steward-probe-{uuid.uuid4().hex}")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as exc:
            uid = os.geteuid()
            try:
                user = f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
            except KeyError:
                user = f"uid {uid}"
            where = "" if folder == self.root else \
                f" (it does not exist yet and cannot be created in {folder})"
            raise StorageError(
                f"storage dir {self.root} is not writable by user {user}{where}: "
                f"{exc.strerror or exc}; make it writable for the user the Spark driver runs as "
                "(chown/chmod, or mount it read-write), or choose another storage dir"
            ) from exc

    # -- writes ----------------------------------------------------------------------------

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Writes ``data`` so readers see the old object or the new one, never a mix.

        Filesystems: temp name in the same directory, fsync, rename. Object stores: one PUT.
        """
        target = self.path(rel)
        try:
            if self.is_local:
                self._write_local(target, data)
            elif self.is_object_store:
                self.fs.pipe_file(target, data)
            else:
                tmp = f"{target}.tmp-{uuid.uuid4().hex}"
                self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, target)
        except StorageError:
            raise
        except _io_errors() as exc:
            if self.is_local:
                raise StorageError(f"could not write {self.url_of(rel)}: {exc}") from exc
            raise OutcomeUnknown(f"write of {self.url_of(rel)} may not have landed: {exc}") from exc

    @staticmethod
    def _write_local(target: str, data: bytes) -> None:
        directory = os.path.dirname(target)
        make_dirs(directory)
        tmp = os.path.join(directory, f".{os.path.basename(target)}.tmp-{uuid.uuid4().hex}")
        try:
            with open_new(tmp, exclusive=True) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def upload(self, rel: str, local_path: str) -> None:
        """Copies a local file to ``rel`` so readers never see part of it (streamed, any size).

        Filesystems: temp name beside the target, fsync, rename. Object stores: one upload that
        becomes visible only when complete (multipart completion is atomic).
        """
        target = self.path(rel)
        try:
            if self.is_object_store:
                self.fs.put_file(local_path, target)
                return
            directory = posixpath.dirname(target)
            if self.is_local:
                make_dirs(directory)
            else:
                self.fs.makedirs(directory, exist_ok=True)
            tmp = posixpath.join(directory, f".{posixpath.basename(target)}.tmp-{uuid.uuid4().hex}")
            try:
                if self.is_local:
                    with open(local_path, "rb") as src, open_new(tmp, exclusive=True) as dst:
                        shutil.copyfileobj(src, dst, 8 << 20)
                        dst.flush()
                        os.fsync(dst.fileno())
                    os.replace(tmp, target)
                else:
                    self.fs.put_file(local_path, tmp)
                    self.fs.mv(tmp, target)
            except BaseException:
                try:
                    self.fs.rm(tmp)
                except (FileNotFoundError, OSError):
                    pass
                raise
        except _io_errors() as exc:
            if self.is_local:
                raise StorageError(f"could not write {self.url_of(rel)}: {exc}") from exc
            raise OutcomeUnknown(f"upload of {self.url_of(rel)} may not have landed: "
                                 f"{exc}") from exc

    def open_read(self, rel: str) -> BinaryIO:
        """A binary stream of ``rel``; FileNotFoundError when absent."""
        try:
            return self.fs.open(self.path(rel), "rb")  # type: ignore[no-any-return]
        except FileNotFoundError:
            raise
        except _io_errors() as exc:
            raise StorageError(f"could not read {self.url_of(rel)}: {exc}") from exc

    def write_record(self, rel: str, body: Any) -> None:
        """Atomically writes a checksummed metadata record."""
        self.write_atomic(rel, records.encode_record(body))

    # -- reads -----------------------------------------------------------------------------

    def read_bytes(self, rel: str) -> bytes:
        """Whole object; raises FileNotFoundError when absent."""
        try:
            return bytes(self.fs.cat_file(self.path(rel)))
        except FileNotFoundError:
            raise
        except _io_errors() as exc:
            raise StorageError(f"could not read {self.url_of(rel)}: {exc}") from exc

    def read_record(self, rel: str) -> Any:
        """Verified body of a record; RecordCorrupt names the path, FileNotFoundError if absent."""
        return records.decode_record(self.read_bytes(rel), self.url_of(rel))

    def exists(self, rel: str) -> bool:
        """True when something is stored at ``rel``."""
        return bool(self.fs.exists(self.path(rel)))

    def list_names(self, rel: str = "") -> list[str]:
        """Names of the direct children of ``rel`` (empty when it does not exist), sorted."""
        base = self.path(rel)
        try:
            entries = self.fs.ls(base, detail=False)
        except FileNotFoundError:
            return []
        except _io_errors() as exc:
            raise StorageError(f"could not list {self.url_of(rel)}: {exc}") from exc
        own = base.rstrip("/")
        return sorted({posixpath.basename(str(e).rstrip("/")) for e in entries
                       if str(e).rstrip("/") != own})

    def walk_files(self, rel: str = "") -> Iterator[FileEntry]:
        """Every file below ``rel`` with its size, paths relative to the root."""
        base = self.path(rel)
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return
        except _io_errors() as exc:
            raise StorageError(f"could not list {self.url_of(rel)}: {exc}") from exc
        prefix = self.root.rstrip("/") + "/"
        for full, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            full = str(full)
            relpath = full[len(prefix):] if full.startswith(prefix) else full
            yield FileEntry(relpath, int(info.get("size") or 0), _modified(info))

    def last_modified(self, rel: str = "") -> float | None:
        """Newest modification time (epoch seconds) of ``rel`` or anything below it; None when
        it does not exist or the backend reports no times."""
        base = self.path(rel)
        try:
            found = dict(self.fs.find(base, detail=True, withdirs=True))
            if not found:
                found = {base: self.fs.info(base)}
        except FileNotFoundError:
            return None
        except _io_errors() as exc:
            raise StorageError(f"could not list {self.url_of(rel)}: {exc}") from exc
        times = [t for t in (_modified(info) for info in found.values()) if t is not None]
        return max(times) if times else None

    def usage(self, rel: str = "") -> tuple[int, int]:
        """``(files, bytes)`` below ``rel``."""
        files = total = 0
        for entry in self.walk_files(rel):
            files += 1
            total += entry.size
        return files, total

    # -- deletes ---------------------------------------------------------------------------

    def delete(self, rel: str) -> bool:
        """Removes ``rel`` and everything below it; True if something was there. Idempotent."""
        target = self.path(rel)
        if target == self.root:
            raise StorageError(f"refusing to delete the storage root {self.url}")
        # info(), not exists(): fsspec's exists() answers False on any error, and a delete
        # that wrongly believes nothing is there lets the metadata go before the data.
        try:
            self.fs.info(target)
        except FileNotFoundError:
            return False
        except _io_errors() as exc:
            raise StorageError(f"could not delete {self.url_of(rel)}: {exc}") from exc
        try:
            self.fs.rm(target, recursive=True)
        except FileNotFoundError as exc:
            # Something below vanished mid-delete (a concurrent delete of a subfolder): only
            # done if nothing is left; otherwise fail so the caller retries.
            self.fs.invalidate_cache(target)
            try:
                self.fs.info(target)
            except FileNotFoundError:
                return True
            raise StorageError(f"could not delete {self.url_of(rel)}: its content changed "
                               f"during the delete ({exc})") from exc
        except _io_errors() as exc:
            raise StorageError(f"could not delete {self.url_of(rel)}: {exc}") from exc
        self.fs.invalidate_cache(target)
        if self.is_object_store:
            self._check_gone(rel, target)
        return True

    def remove_empty_folder(self, rel: str) -> bool:
        """Removes the folder ``rel`` if it is empty (filesystems only: object stores have no
        folders). Never removes anything else, so it is safe against a concurrent writer."""
        if not self.is_local:
            return False
        try:
            os.rmdir(self.path(rel))
            return True
        except OSError:
            return False

    def _check_gone(self, rel: str, target: str) -> None:
        """S3's multi-object delete answers 200 and lists refused keys in its body, which s3fs
        ignores: look again, so a denied delete is a failure and gets retried."""
        try:
            left = self.fs.find(target)
        except FileNotFoundError:
            return
        except _io_errors() as exc:
            raise StorageError(f"could not check the delete of {self.url_of(rel)}: {exc}") from exc
        if left:
            raise StorageError(f"could not delete {self.url_of(rel)}: {len(left)} object(s) are "
                               "still there (delete refused, e.g. access denied)")
