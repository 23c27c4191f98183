"""Durable checkpoint metadata in the storage dir (the StateHandleStore role).

Layout below the storage root::

    checkpoints/entries/<series>/<number>.json     the entry: state, owner, where the data is
    checkpoints/artifacts/<series>/<number>.json   the serialized checkpoint: schema, file list
    checkpoints/data/<series>/<number>/            the data files (written by executors)
    checkpoints/merged/<series>/<number>/          physical files a merged save wrote; later
                                                   checkpoints of the series may use them too

Every entry and artifact is an atomic, checksummed record, verified on read. Entries and
artifacts live apart from the data, so deleting a data folder never touches the metadata that
says it must be deleted.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from spark_steward.checkpoint.errors import CheckpointCorrupt
from spark_steward.errors import RecordCorrupt, StewardError
from spark_steward.checkpoint.lifecycle import CheckpointEntry, validate_series
from spark_steward.storage import Storage

log = logging.getLogger(__name__)

ROOT = "checkpoints"
ENTRIES = f"{ROOT}/entries"
ARTIFACTS = f"{ROOT}/artifacts"
DATA = f"{ROOT}/data"
MERGED = f"{ROOT}/merged"


def _name(number: int) -> str:
    return f"{number:010d}"


def entry_path(series: str, number: int) -> str:
    """The storage path of a checkpoint's metadata entry."""
    return f"{ENTRIES}/{validate_series(series)}/{_name(number)}.json"


def artifact_path(series: str, number: int) -> str:
    """The storage path of a checkpoint's artifact (schema and files)."""
    return f"{ARTIFACTS}/{validate_series(series)}/{_name(number)}.json"


def data_path(series: str, number: int) -> str:
    """The storage folder of a checkpoint's data."""
    return f"{DATA}/{validate_series(series)}/{_name(number)}"


def merged_path(series: str, number: int) -> str:
    """The creator folder of merged save ``series/number``."""
    return f"{MERGED}/{validate_series(series)}/{_name(number)}"


def parse_number(name: str) -> int | None:
    """``0000000007.json`` or ``0000000007`` → 7; None for anything that is not ours."""
    stem = name[:-5] if name.endswith(".json") else name
    return int(stem) if stem.isdigit() and len(stem) == 10 else None


# Storage.write_atomic's temp file: ``.<name>.tmp-<hex>`` on local disk, ``<name>.tmp-<hex>``
# on other filesystems with rename.
_TEMPORARY = re.compile(r"\.?\d{10}\.json\.tmp-[0-9a-f]{32}")


def is_temporary(name: str) -> bool:
    """The temp file of an entry or artifact write that died before its rename: nothing owns
    it, ever (a crashed driver leaves it beside the entries)."""
    return _TEMPORARY.fullmatch(name) is not None


class CheckpointMetadata:
    """Reads and writes checkpoint entries and artifacts as checksummed records in the storage dir.
    """
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def write_entry(self, entry: CheckpointEntry) -> None:
        """Writes ``entry``'s metadata record (replacing the previous one)."""
        self.storage.write_record(entry_path(entry.series, entry.number), entry.to_json())

    def read_entry(self, series: str, number: int) -> CheckpointEntry | None:
        """The entry of ``series``/``number``, or None when it has none."""
        rel = entry_path(series, number)
        try:
            body = self.storage.read_record(rel)
        except FileNotFoundError:
            return None
        try:
            entry = CheckpointEntry.from_json(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordCorrupt(f"{self.storage.url_of(rel)} is not a checkpoint entry: "
                                f"{exc}") from None
        if entry.key != (series, number):
            raise RecordCorrupt(f"{self.storage.url_of(rel)} holds the entry of {entry.id}")
        return entry

    def remove_entry(self, series: str, number: int) -> None:
        """Deletes a checkpoint's metadata entry."""
        self.storage.delete(entry_path(series, number))

    def write_artifact(self, series: str, number: int, body: dict[str, Any]) -> None:
        """Writes a checkpoint's artifact record."""
        self.storage.write_record(artifact_path(series, number), body)

    def read_artifact(self, series: str, number: int) -> dict[str, Any]:
        """A checkpoint's artifact record; CheckpointCorrupt when it is missing or unreadable."""
        rel = artifact_path(series, number)
        try:
            body = self.storage.read_record(rel)
        except FileNotFoundError:
            raise CheckpointCorrupt(
                f"checkpoint {series}/{number} has no artifact at {self.storage.url_of(rel)}"
            ) from None
        except RecordCorrupt as exc:
            raise CheckpointCorrupt(f"checkpoint {series}/{number}: {exc}") from None
        if not isinstance(body, dict):
            raise CheckpointCorrupt(f"checkpoint {series}/{number}: {self.storage.url_of(rel)} "
                                    "is not a checkpoint artifact")
        return body

    def remove_artifact(self, series: str, number: int) -> None:
        """Deletes a checkpoint's artifact record."""
        self.storage.delete(artifact_path(series, number))

    def series(self) -> list[str]:
        """Every series with an entry, an artifact or a data folder."""
        names: set[str] = set()
        for folder in (ENTRIES, ARTIFACTS, DATA, MERGED):
            names.update(self.storage.list_names(folder))
        return sorted(names)

    def numbers(self, series: str) -> dict[str, set[int]]:
        """Numbers seen per folder kind (``entries``, ``artifacts``, ``data``) of one series."""
        found: dict[str, set[int]] = {}
        for kind, folder in (("entries", ENTRIES), ("artifacts", ARTIFACTS), ("data", DATA)):
            found[kind] = {n for n in (parse_number(name) for name in
                                       self.storage.list_names(f"{folder}/{series}"))
                           if n is not None}
        return found

    def series_entries(self, series: str) -> list[CheckpointEntry]:
        """Every entry of ``series`` as stored now. Raises on one that cannot be read: whoever
        decides from them what to delete must not guess."""
        found = []
        for name in self.storage.list_names(f"{ENTRIES}/{validate_series(series)}"):
            number = parse_number(name)
            if number is not None:
                entry = self.read_entry(series, number)
                if entry is not None:
                    found.append(entry)
        return sorted(found, key=lambda e: e.number)

    def load(self) -> tuple[list[CheckpointEntry], list[str]]:
        """Every readable entry, and the paths of entries that failed verification (logged,
        never deleted: a corrupt entry may still own data, so a person decides)."""
        entries, corrupt = [], []
        for series in self.storage.list_names(ENTRIES):
            for name in self.storage.list_names(f"{ENTRIES}/{series}"):
                number = parse_number(name)
                if number is None:
                    continue
                try:
                    entry = self.read_entry(series, number)
                except RecordCorrupt as exc:
                    log.warning("checkpoint entry %s/%s fails verification: %s", series, name,
                                exc)
                    corrupt.append(f"{ENTRIES}/{series}/{name}")
                    continue
                except (StewardError, ValueError) as exc:
                    # Unreadable now is not corrupt, but its series is just as unsafe to sweep.
                    log.warning("could not read checkpoint entry %s/%s: %s", series, name, exc)
                    corrupt.append(f"{ENTRIES}/{series}/{name}")
                    continue
                if entry is not None:
                    entries.append(entry)
        return sorted(entries, key=lambda e: e.key), corrupt
