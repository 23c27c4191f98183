"""Executor-side IO of file-merged checkpoints (FLIP-306): partition streams in, segments of a
few shared physical files out, and verified byte-range reads back. Knows nothing of Spark.

A task hands :func:`write_segments` its partitions as one iterator of elements: for each
partition zero or more ``b"D" + piece`` and then one ``b"E" + json`` record with the
partition's number, rows, length, crc32c and sha256. Every partition is spooled and checked
against its END record before a byte of it is stored, so bytes damaged in transit never reach a
physical file.

- **Filesystems** (*append mode*): the processes of one host share the files
  ``<folder>/<writer>-<n>.arrows``; each append holds an exclusive ``flock`` and is fsynced
  before the call returns. A file held by another process is skipped, not waited for, so a
  checkpoint ends with about one file per concurrent writer (plus rotations).
- **Object stores and other fsspec storage** (*group mode*, no append there): the call writes
  its segments one after another into objects of its own, rotating at ``max_file_size``; every
  object is complete (uploaded) before the call returns.

Nothing is ever overwritten: append mode only appends, group mode starts at the first name not
yet taken. Bytes of a failed call stay in their files unreferenced and go with their folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import posixpath
import re
import tempfile
from dataclasses import dataclass, replace
from typing import Any, Generator, Iterable, Iterator, Mapping, Sequence

from fsspec.spec import AbstractBufferedFile

from spark_steward.checksum import crc32c_of, format_crc
from spark_steward.checkpoint.errors import CheckpointCorrupt, CheckpointError
from spark_steward.errors import StorageError
from spark_steward.checkpoint.merging.lifecycle import Segment
from spark_steward.private import PRIVATE_FILE_MODE, make_dirs, open_new
from spark_steward.storage import Storage

log = logging.getLogger(__name__)

#: A partition stays in memory up to this size while it is checked, then spills to disk.
SPOOL_MEMORY = 32 << 20
#: Bytes moved per write or read call.
COPY_CHUNK = 8 << 20
SUFFIX = ".arrows"
DATA = ord("D")
END = ord("E")

_WRITER_NAME = re.compile(r"[A-Za-z0-9._-]+")
_HEX8 = re.compile(r"[0-9a-fA-F]{8}")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
#: Guard against an endless search for a free file (every one locked or full).
_MAX_FILES = 100_000


def physical_file(folder: str, writer_name: str, n: int) -> str:
    """The ``n``-th physical file of ``writer_name`` in ``folder`` (relative to the root)."""
    return posixpath.join(folder.strip("/"), f"{writer_name}-{n:04d}{SUFFIX}")


# -- the input: one verified spool per partition ---------------------------------------------


@dataclass(frozen=True)
class _EndRecord:
    partition: int
    rows: int
    length: int
    crc32c: str
    sha256: str


@dataclass
class _Partition:
    """One partition's bytes, spooled and verified against its END record."""

    end: _EndRecord
    data: Any  # tempfile.SpooledTemporaryFile, positioned anywhere

    def chunks(self) -> Iterator[bytes]:
        self.data.seek(0)
        while True:
            chunk = self.data.read(COPY_CHUNK)
            if not chunk:
                return
            yield chunk


def _parse_end(body: memoryview, where: str) -> _EndRecord:
    try:
        record = json.loads(bytes(body).decode("utf-8"))
        partition, rows, length = (record[k] for k in ("partition", "rows", "length"))
        crc, sha = record["crc32c"], record["sha256"]
        ok = (all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                  for v in (partition, rows, length))
              and isinstance(crc, str) and _HEX8.fullmatch(crc) is not None
              and isinstance(sha, str) and _HEX64.fullmatch(sha) is not None)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        text = bytes(body[:200]).decode("utf-8", "replace")
        raise CheckpointError(f"segment stream for {where}: malformed END record {text!r} (needs "
                              "partition, rows, length >= 0, crc32c of 8 and sha256 of 64 hex "
                              "digits)")
    return _EndRecord(partition, rows, length, crc.lower(), sha.lower())


class _Spool:
    """Collects one partition's pieces while hashing them."""

    def __init__(self, spool_dir: str | None) -> None:
        self.file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY, dir=spool_dir)
        self.length = 0
        self.crc = 0
        self.sha = hashlib.sha256()

    def add(self, piece: memoryview) -> None:
        self.file.write(piece)
        self.length += len(piece)
        self.crc = crc32c_of(piece, self.crc)
        self.sha.update(piece)

    def verify(self, end: _EndRecord, where: str) -> None:
        """Bytes that do not match their END record were damaged on the way: never store them."""
        crc, sha = format_crc(self.crc), self.sha.hexdigest()
        if self.length == 0 and end.length > 0:
            raise CheckpointCorrupt(
                f"segment stream for {where}: partition {end.partition}'s END record announces "
                f"{end.length} bytes but no DATA came before it")
        if (self.length, crc, sha) != (end.length, end.crc32c, end.sha256):
            raise CheckpointCorrupt(
                f"segment stream for {where}: partition {end.partition} arrived damaged: got "
                f"{self.length} bytes, crc32c {crc}, sha256 {sha}; its END record says "
                f"{end.length} bytes, crc32c {end.crc32c}, sha256 {end.sha256}")

    def close(self) -> None:
        self.file.close()


def _partitions(elements: Iterable[bytes], spool_dir: str | None, where: str
                ) -> Generator[_Partition, None, None]:
    """The verified partitions of ``elements`` in order; each spool is closed once the consumer
    asks for the next one (or stops)."""
    spool: _Spool | None = None
    seen: set[int] = set()
    last: int | None = None
    try:
        for element in elements:
            view = memoryview(element).cast("B")
            if not view:
                raise CheckpointError(f"segment stream for {where}: empty element after "
                                      f"{_after(last)}")
            if view[0] == DATA:
                if spool is None:
                    spool = _Spool(spool_dir)
                spool.add(view[1:])
            elif view[0] == END:
                end = _parse_end(view[1:], where)
                if end.partition in seen:
                    raise CheckpointError(f"segment stream for {where}: partition "
                                          f"{end.partition} came twice")
                current, spool = spool or _Spool(spool_dir), None
                try:
                    current.verify(end, where)
                    seen.add(end.partition)
                    last = end.partition
                    yield _Partition(end, current.file)
                finally:
                    current.close()
            else:
                raise CheckpointError(f"segment stream for {where}: element with unknown tag "
                                      f"{bytes(view[:1])!r} after {_after(last)} (expected "
                                      "b'D' or b'E')")
        if spool is not None:
            raise CheckpointError(f"segment stream for {where}: {spool.length} bytes of DATA "
                                  f"after {_after(last)} with no END record following (the "
                                  "stream was cut short)")
    finally:
        if spool is not None:
            spool.close()


def _after(last: int | None) -> str:
    return "the start" if last is None else f"the END of partition {last}"


# -- writing ----------------------------------------------------------------------------------


def write_segments(storage: Storage, folder: str, elements: Iterable[bytes], *,
                   writer_name: str, max_file_size: int,
                   known: Mapping[str, Segment] | None = None,
                   spool_dir: str | None = None) -> list[Segment]:
    """Stores each partition of ``elements`` as a segment below ``folder`` and returns one
    Segment per partition, in input order; every new byte is durable when this returns.

    A partition whose sha256 (and length) is in ``known``, or equals an earlier partition of
    this call, reuses that segment and writes nothing. ``writer_name`` names the physical
    files: the host on filesystems (its processes share the files), something unique per call
    elsewhere.
    """
    _check_writer(writer_name, max_file_size)
    known = known or {}
    where = storage.url_of(folder)
    written: dict[str, Segment] = {}
    found: list[Segment] = []
    group = None if storage.is_local else _GroupWriter(storage, folder, writer_name,
                                                       max_file_size)
    parts = _partitions(elements, spool_dir, where)
    try:
        for part in parts:
            end = part.end
            same = _reusable(known.get(end.sha256), end) or _reusable(written.get(end.sha256),
                                                                      end)
            if same is not None:
                found.append(replace(same, partition=end.partition))
                continue
            if group is None:
                rel, offset = _append_local(storage, folder, writer_name, max_file_size, part)
            else:
                rel, offset = group.append(end.partition, end.length, part.chunks())
            seg = Segment(partition=end.partition, file=rel, offset=offset, length=end.length,
                          rows=end.rows, crc32c=end.crc32c, sha256=end.sha256)
            written[seg.sha256] = seg
            found.append(seg)
    except BaseException:
        if group is not None:
            group.abort()
        raise
    finally:
        parts.close()  # closes the spool of a partition the loop left early
    if group is not None:
        group.finish()
    return found


def _reusable(seg: Segment | None, end: _EndRecord) -> Segment | None:
    if seg is None or seg.length != end.length or seg.crc32c.lower() != end.crc32c:
        return None
    return seg


def _check_writer(writer_name: str, max_file_size: int) -> None:
    if not _WRITER_NAME.fullmatch(writer_name) or writer_name in (".", ".."):
        raise ValueError(f"writer name {writer_name!r} must be letters, digits, '.', '_' or "
                         "'-' (it becomes part of a file name)")
    if max_file_size < 1:
        raise ValueError(f"max_file_size must be at least 1 byte, not {max_file_size}")


def _append_local(storage: Storage, folder: str, writer_name: str, max_file_size: int,
                  part: _Partition) -> tuple[str, int]:
    """Appends ``part`` to the first shared file of ``writer_name`` that is neither locked by
    another process nor too full; returns ``(file, offset)`` once the bytes are fsynced."""
    directory = storage.path(folder)
    _ensure_local_dir(storage, folder)
    length = part.end.length
    for n in range(_MAX_FILES):
        rel = physical_file(folder, writer_name, n)
        url = storage.url_of(rel)
        try:
            fd = os.open(storage.path(rel), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
                         | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
        except OSError as exc:
            raise StorageError(f"could not open {url} to append a segment: {exc}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another process appends there now: take the next file
            except OSError as exc:
                raise StorageError(f"could not lock {url} to append a segment (the filesystem "
                                   f"must support flock): {exc}") from exc
            offset, copied = -1, 0
            try:
                offset = os.fstat(fd).st_size
                if offset > 0 and offset + length > max_file_size:
                    continue
                copied = _write_all(fd, part.chunks())
                os.fsync(fd)
            except OSError as exc:
                at = f" at byte {offset}" if offset >= 0 else ""
                raise StorageError(f"could not append partition {part.end.partition}'s segment "
                                   f"({length} bytes) to {url}{at}: {exc}; whatever landed "
                                   "there is unreferenced") from exc
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        if copied != length:  # the spool holds what was verified: cannot happen
            raise CheckpointError(f"appended {copied} bytes of partition {part.end.partition} "
                                  f"to {url}, expected {length}")
        if offset == 0:  # a new file: make its name durable too
            _fsync_dir(directory, url)
        return rel, offset
    raise StorageError(f"no usable physical file among {_MAX_FILES} in {storage.url_of(folder)} "
                       f"for writer {writer_name}")


def _write_all(fd: int, chunks: Iterable[bytes]) -> int:
    """Writes every chunk, looping over short writes; returns the bytes written."""
    total = 0
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            n = os.write(fd, view)
            if n <= 0:
                raise OSError(f"write returned {n}")
            view = view[n:]
            total += n
    return total


def _ensure_local_dir(storage: Storage, folder: str) -> None:
    directory = storage.path(folder)
    if os.path.isdir(directory):
        return
    try:
        make_dirs(directory)
    except OSError as exc:
        raise StorageError(f"could not create {storage.url_of(folder)}: {exc}") from exc
    _fsync_dir(os.path.dirname(directory), storage.url_of(folder))


def _fsync_dir(directory: str, url: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"could not make the new entry {url} durable: {exc}") from exc


class _GroupWriter:
    """Segments written one after another into objects of this writer only, rotating at
    ``max_file_size``. Offsets are its own byte count: nobody else writes these objects.

    :meth:`finish` completes (uploads) every object; :meth:`abort` drops the one still open.
    """

    def __init__(self, storage: Storage, folder: str, writer_name: str,
                 max_file_size: int) -> None:
        _check_writer(writer_name, max_file_size)
        self.storage = storage
        self.folder = folder
        self.writer_name = writer_name
        self.max_file_size = max_file_size
        self._next = 0
        self._rel = ""
        self._out: Any = None
        self._size = 0
        self._ready = False
        self._wrote_local = False

    def append(self, partition: int, length: int, chunks: Iterable[bytes]) -> tuple[str, int]:
        """Writes ``chunks`` (``length`` bytes) as the next segment; ``(file, offset)``."""
        if self._out is not None and self._size > 0 and self._size + length > self.max_file_size:
            self._close_current()
        if self._out is None:
            self._open_next()
        offset = self._size
        try:
            for chunk in chunks:
                self._out.write(chunk)
                self._size += len(chunk)
        except OSError as exc:
            raise StorageError(f"could not write partition {partition}'s segment to "
                               f"{self.storage.url_of(self._rel)}: {exc}") from exc
        if self._size - offset != length:
            raise CheckpointError(f"partition {partition}'s segment for "
                                  f"{self.storage.url_of(self._rel)} had "
                                  f"{self._size - offset} bytes, expected {length}")
        return self._rel, offset

    def finish(self) -> None:
        """Completes the open object; on filesystems makes the new names durable."""
        self._close_current()
        if self._wrote_local:
            _fsync_dir(self.storage.path(self.folder), self.storage.url_of(self.folder))

    def abort(self) -> None:
        """Drops the open object: an object-store upload is aborted, a local file removed."""
        out, self._out = self._out, None
        if out is None:
            return
        url = self.storage.url_of(self._rel)
        try:
            if self.storage.is_local:
                out.close()
                os.unlink(self.storage.path(self._rel))
            elif isinstance(out, AbstractBufferedFile):
                out.discard()  # aborts a multipart upload where the backend has one
                out.closed = True  # never flush what is buffered (also not when collected)
            else:
                out.close()
        except Exception as exc:  # noqa: BLE001 - already failing; the object is unreferenced
            log.warning("could not drop the partial segment file %s: %s", url, exc)

    def _open_next(self) -> None:
        storage = self.storage
        if not self._ready:
            if storage.is_local:
                _ensure_local_dir(storage, self.folder)
            elif not storage.is_object_store:
                try:
                    storage.fs.makedirs(storage.path(self.folder), exist_ok=True)
                except OSError as exc:
                    raise StorageError(f"could not create {storage.url_of(self.folder)}: "
                                       f"{exc}") from exc
            self._ready = True
        for _ in range(_MAX_FILES):
            rel = physical_file(self.folder, self.writer_name, self._next)
            self._next += 1
            path = storage.path(rel)
            try:
                if storage.is_local:
                    try:
                        self._out = open_new(path, exclusive=True)  # closed in _close_current
                    except FileExistsError:
                        continue
                    self._wrote_local = True
                else:
                    if self._taken(path):
                        continue
                    self._out = storage.fs.open(path, "wb")
            except OSError as exc:
                raise StorageError(f"could not create {storage.url_of(rel)}: {exc}") from exc
            self._rel, self._size = rel, 0
            return
        raise StorageError(f"no free physical file name among {_MAX_FILES} in "
                           f"{storage.url_of(self.folder)} for writer {self.writer_name}")

    def _taken(self, path: str) -> bool:
        """Whether ``path`` exists (never overwrite: a retried call must not clobber segments
        an earlier attempt's record may name)."""
        fs = self.storage.fs
        fs.invalidate_cache(path)
        try:
            fs.info(path)
        except FileNotFoundError:
            return False
        return True

    def _close_current(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        try:
            if self.storage.is_local:
                try:
                    out.flush()
                    os.fsync(out.fileno())
                finally:
                    out.close()
            else:
                out.close()  # the upload completes here
        except OSError as exc:
            raise StorageError(f"could not complete {self.storage.url_of(self._rel)}: "
                               f"{exc}") from exc


# -- reading ----------------------------------------------------------------------------------


def _describe(storage: Storage, seg: Segment, label: str) -> str:
    return (f"{label}: segment of partition {seg.partition} in {storage.url_of(seg.file)} "
            f"(bytes {seg.offset}..{seg.end})")


def read_segment(storage: Storage, segment: Segment, *, label: str,
                 chunk_size: int = COPY_CHUNK) -> Iterator[bytes]:
    """The segment's bytes in pieces of at most ``chunk_size``, read by byte range.

    The crc32c is checked after the last piece (a stream cannot be checked earlier): a
    consumer sees every piece before a mismatch raises :class:`CheckpointCorrupt`, and must
    let that fail what it built. A missing or short file raises as soon as it shows.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1 byte, not {chunk_size}")
    what = _describe(storage, segment, label)
    pieces = (_read_local(storage, segment, what, chunk_size) if storage.is_local
              else _read_remote(storage, segment, what, chunk_size))
    crc = 0
    for piece in pieces:
        crc = crc32c_of(piece, crc)
        yield piece
    actual = format_crc(crc)
    if actual != segment.crc32c.lower():
        raise CheckpointCorrupt(f"{what}: crc32c {actual} != recorded {segment.crc32c} (the "
                                "bytes changed on storage)")


def _read_local(storage: Storage, seg: Segment, what: str, chunk_size: int) -> Iterator[bytes]:
    path = storage.path(seg.file)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, also when the consumer stops
    except FileNotFoundError:
        raise CheckpointCorrupt(f"{what}: the file is missing") from None
    except OSError as exc:
        raise StorageError(f"{what}: could not open the file: {exc}") from exc
    with f:
        try:
            f.seek(seg.offset)
            left = seg.length
            while left > 0:
                piece = f.read(min(chunk_size, left))
                if not piece:
                    size = os.fstat(f.fileno()).st_size
                    raise CheckpointCorrupt(f"{what}: the file has only {size} bytes "
                                            "(truncated)")
                left -= len(piece)
                yield piece
            if seg.length == 0 and os.fstat(f.fileno()).st_size < seg.offset:
                size = os.fstat(f.fileno()).st_size
                raise CheckpointCorrupt(f"{what}: the file has only {size} bytes (truncated)")
        except OSError as exc:
            raise StorageError(f"{what}: could not read the file: {exc}") from exc


def _read_remote(storage: Storage, seg: Segment, what: str, chunk_size: int
                 ) -> Iterator[bytes]:
    """Ranged reads (one GET per piece on object stores), nothing outside the segment."""
    path = storage.path(seg.file)
    if seg.length == 0:
        _check_size(storage, path, seg.end, what, None)
        return
    pos = seg.offset
    while pos < seg.end:
        want = min(chunk_size, seg.end - pos)
        try:
            piece = bytes(storage.fs.cat_file(path, start=pos, end=pos + want))
        except FileNotFoundError:
            raise CheckpointCorrupt(f"{what}: the file is missing") from None
        except OSError as exc:  # e.g. a range past the end: tell a short file from an outage
            _check_size(storage, path, seg.end, what, exc)
            raise StorageError(f"{what}: could not read bytes {pos}..{pos + want}: {exc}"
                               ) from exc
        if len(piece) != want:
            _check_size(storage, path, seg.end, what, None)
            raise CheckpointCorrupt(f"{what}: a read of bytes {pos}..{pos + want} returned "
                                    f"{len(piece)} bytes")
        pos += want
        yield piece


def _check_size(storage: Storage, path: str, end: int, what: str,
                cause: BaseException | None) -> None:
    """Raises CheckpointCorrupt if the file at ``path`` is missing or shorter than ``end``."""
    storage.fs.invalidate_cache(path)
    try:
        size = int(storage.fs.info(path).get("size") or 0)
    except FileNotFoundError:
        raise CheckpointCorrupt(f"{what}: the file is missing") from None
    except OSError as exc:
        if cause is not None:
            return  # the caller reports the original failure
        raise StorageError(f"{what}: could not look at the file: {exc}") from exc
    if size < end:
        raise CheckpointCorrupt(f"{what}: the file has only {size} bytes (truncated)")


def check_segments_exist(storage: Storage, segments: Iterable[Segment], *, label: str) -> None:
    """One cheap pass before a restore: every file the segments name exists and is long enough
    for the furthest segment in it (one metadata call per distinct file; contents are checked
    as they are read)."""
    furthest: dict[str, Segment] = {}
    for seg in segments:
        held = furthest.get(seg.file)
        if held is None or seg.end > held.end:
            furthest[seg.file] = seg
    for rel in sorted(furthest):
        seg = furthest[rel]
        path = storage.path(rel)
        what = _describe(storage, seg, label)
        storage.fs.invalidate_cache(path)
        try:
            info = storage.fs.info(path)
        except FileNotFoundError:
            raise CheckpointCorrupt(f"{what}: the file is missing") from None
        except OSError as exc:
            raise StorageError(f"{what}: could not look at the file: {exc}") from exc
        if info.get("type") == "directory":
            raise CheckpointCorrupt(f"{what}: the path is a directory, not a file")
        size = int(info.get("size") or 0)
        if size < seg.end:
            raise CheckpointCorrupt(f"{what}: the file has only {size} bytes (truncated)")


# -- copying ----------------------------------------------------------------------------------


def copy_segments(storage: Storage, segments: Sequence[Segment], folder: str, *,
                  writer_name: str, max_file_size: int, label: str) -> list[Segment]:
    """Copies ``segments`` (each verified as it is read) into new files of ``writer_name`` in
    ``folder``, so the wasteful files they sat in can go; the copies, in the same order.

    Segments that are the same bytes of the same file are copied once. Every new file is
    complete (and, on filesystems, fsynced) when this returns; on failure the file being
    written is dropped.
    """
    group = _GroupWriter(storage, folder, writer_name, max_file_size)
    copied: dict[tuple[str, int, int], tuple[str, int]] = {}
    found: list[Segment] = []
    try:
        for seg in segments:
            source = (seg.file, seg.offset, seg.length)
            if source not in copied:
                copied[source] = group.append(seg.partition, seg.length,
                                              read_segment(storage, seg, label=label))
            rel, offset = copied[source]
            found.append(replace(seg, file=rel, offset=offset))
    except BaseException:
        group.abort()
        raise
    group.finish()
    return found
