"""The manifest of one materialized table: every data file with its size, row count, crc32c and
modification time, and the checks that decide whether the files may still be read.

Two checks, because they run at different moments. The quick one (:func:`find_problem` with
``full=False``) runs before every query that reads the table, so it costs one listing of the
data folder and no file reads: a missing, truncated, rewritten or extra file shows in the
listing. The full one also re-reads every file against its crc32c and catches bytes changed in
place behind an unchanged size and time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Mapping

import pyarrow.parquet as pq

from spark_steward.checksum import crc32c_stream, format_crc
from spark_steward.errors import StewardError
from spark_steward.tables.errors import ManifestError
from spark_steward.storage import FileEntry, Storage

FORMAT = "spark-steward/table-manifest/1"


@dataclass(frozen=True)
class ManifestFile:
    """One data file, by its name inside the table's data folder."""

    name: str
    size: int
    rows: int
    crc32c: str
    modified: float | None

    def to_dict(self) -> dict[str, Any]:
        """The file as a JSON-able dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "ManifestFile":
        """The file a JSON dict describes."""
        return cls(str(body["name"]), int(body["size"]), int(body["rows"]),
                   str(body["crc32c"]),
                   None if body.get("modified") is None else float(body["modified"]))


@dataclass(frozen=True)
class Manifest:
    """What one materialization (``key``/``attempt``) wrote; ``schema_json`` is Spark's."""

    key: str
    attempt: str
    files: tuple[ManifestFile, ...]
    schema_json: str

    @property
    def rows(self) -> int:
        """The table's rows, summed over its files."""
        return sum(f.rows for f in self.files)

    @property
    def bytes(self) -> int:
        """The table's bytes, summed over its files."""
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as the JSON body stored in the storage dir."""
        return {"format": FORMAT, "key": self.key, "attempt": self.attempt,
                "schema_json": self.schema_json, "files": [f.to_dict() for f in self.files]}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "Manifest":
        """The manifest a JSON body holds; ValueError for an unknown format."""
        if body.get("format") != FORMAT:
            raise ValueError(f"unknown manifest format {body.get('format')!r}")
        return cls(str(body["key"]), str(body["attempt"]),
                   tuple(ManifestFile.from_dict(f) for f in body["files"]),
                   str(body["schema_json"]))


def is_data_file(name: str) -> bool:
    """Spark's markers, checksums and work folders (``_SUCCESS``, ``.part-0.crc``,
    ``_temporary/``) are not data."""
    return not (any(part.startswith(("_", ".")) for part in name.split("/")) or
                name.endswith(".crc"))


def list_data_files(storage: Storage, folder_rel: str) -> dict[str, FileEntry]:
    """``{name inside the folder: entry}`` of the data files, from one fresh listing."""
    storage.fs.invalidate_cache(storage.path(folder_rel))  # a cached listing would hide changes
    prefix = folder_rel.strip("/") + "/"
    found = {}
    for entry in storage.walk_files(folder_rel):
        name = entry.path[len(prefix):] if entry.path.startswith(prefix) else entry.path
        if is_data_file(name):
            found[name] = entry
    return found


def _describe_file(storage: Storage, name: str, listed: FileEntry) -> ManifestFile:
    rel = listed.path
    try:
        with storage.open_read(rel) as stream:
            crc, size = crc32c_stream(stream)
            stream.seek(0)
            rows = pq.read_metadata(stream).num_rows
    except FileNotFoundError:
        raise ManifestError(f"data file {storage.url_of(rel)} vanished while its manifest was "
                            "built") from None
    except StewardError:
        raise
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ManifestError(f"data file {storage.url_of(rel)} is not readable Parquet: "
                            f"{exc}") from exc
    if size != listed.size:
        raise ManifestError(f"data file {storage.url_of(rel)} changed while its manifest was "
                            f"built ({listed.size} bytes listed, {size} read)")
    return ManifestFile(name, size, int(rows), format_crc(crc), listed.modified)


def build_manifest(storage: Storage, folder_rel: str, key: str, attempt: str, schema_json: str,
                   threads: int) -> Manifest:
    """Lists the Parquet files Spark wrote into ``folder_rel`` and records each one's size, row
    count (from its footer), crc32c (streamed) and modification time, ``threads`` at a time."""
    listed = sorted(list_data_files(storage, folder_rel).items())
    if not listed:
        return Manifest(key, attempt, (), schema_json)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(listed))),
                            thread_name_prefix="steward-manifest") as pool:
        described = list(pool.map(lambda item: _describe_file(storage, *item), listed))
    return Manifest(key, attempt, tuple(described), schema_json)


def _crc_problem(storage: Storage, folder_rel: str, expected: ManifestFile) -> str | None:
    rel = f"{folder_rel.strip('/')}/{expected.name}"
    try:
        with storage.open_read(rel) as stream:
            crc, size = crc32c_stream(stream)
    except FileNotFoundError:
        return f"data file {storage.url_of(rel)} is missing"
    if size != expected.size:
        return (f"data file {storage.url_of(rel)} is {size} bytes, the manifest says "
                f"{expected.size} (truncated or rewritten)")
    if format_crc(crc) != expected.crc32c:
        return (f"data file {storage.url_of(rel)} fails verification: crc32c "
                f"{format_crc(crc)} != recorded {expected.crc32c}")
    return None


def find_problem(storage: Storage, folder_rel: str, manifest: Manifest, *, full: bool,
                 threads: int = 4) -> str | None:
    """None when the files in ``folder_rel`` are the ones ``manifest`` records, else one line
    naming the first file that differs.

    The quick check (``full=False``) is one listing: missing, truncated (size), rewritten
    (modification time) and extra data files. ``full=True`` also re-reads every file against
    its crc32c, ``threads`` at a time. A folder that cannot be listed raises StorageError.
    """
    listed = list_data_files(storage, folder_rel)
    for expected in manifest.files:
        actual = listed.get(expected.name)
        url = storage.url_of(f"{folder_rel.strip('/')}/{expected.name}")
        if actual is None:
            return f"data file {url} is missing"
        if actual.size != expected.size:
            return (f"data file {url} is {actual.size} bytes, the manifest says "
                    f"{expected.size} (truncated or rewritten)")
        if actual.modified != expected.modified:
            return (f"data file {url} was rewritten after it was materialized (modified "
                    f"{actual.modified}, the manifest says {expected.modified})")
    extra = sorted(set(listed) - {f.name for f in manifest.files})
    if extra:
        return (f"data file {storage.url_of(listed[extra[0]].path)} is not in the manifest "
                f"of {manifest.key}/{manifest.attempt}")
    if not full or not manifest.files:
        return None
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(manifest.files))),
                            thread_name_prefix="steward-verify") as pool:
        problems = list(pool.map(lambda f: _crc_problem(storage, folder_rel, f),
                                 manifest.files))
    return next((p for p in problems if p is not None), None)
