"""What the working directory of one application on one host holds, and what to do about it.

Pure: the records of the manifest and the recovery decision (which files are adopted, which are
left-overs of a killed writer). Eviction under the byte bound uses the LRU choice it shares with
the cached tables (:func:`spark_steward.lifecycle.lru.choose_evictions`). The IO around it is
:mod:`spark_steward.local.working_dir`.

An entry is one logical value (a cached blob, a local-state value). Its record in the manifest
is replaced atomically, so it always names either the previous complete file or the new one; a
file no complete record names is a left-over and goes, once no live writer holds it.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping


class FileState(enum.Enum):
    WRITING = "writing"
    """A writer announced the file (and its size when known) and has not finished it."""
    COMPLETE = "complete"
    """Written to a temp name, synced, verified and renamed into place."""


@dataclass(frozen=True)
class LocalFileRecord:
    """One manifest record: who owns a host-local file and how to check it."""

    entry: str
    """The entry's path under the application's working dir, e.g. ``state/model/index``."""
    file: str
    """The data file's path under the working dir (the entry itself, or a versioned name)."""
    app_id: str
    capability: str
    scope: str
    size: int
    crc32c: int
    state: FileState
    written_at: float
    form: str = "file"
    """How the owner hands the value out: ``file`` (a path) or ``bytes``."""

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON body of the working dir's manifest."""
        body = asdict(self)
        body["state"] = self.state.value
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "LocalFileRecord":
        """The record a manifest JSON body holds."""
        return cls(entry=str(body["entry"]), file=str(body["file"]), app_id=str(body["app_id"]),
                   capability=str(body["capability"]), scope=str(body["scope"]),
                   size=int(body["size"]), crc32c=int(body["crc32c"]),
                   state=FileState(body["state"]), written_at=float(body["written_at"]),
                   form=str(body.get("form", "file")))


def left_over_files(files: Iterable[str], complete: Iterable[LocalFileRecord]) -> list[str]:
    """Data files (paths under the working dir) no complete record names: written by a writer
    that died before its record, or replaced by a newer version whose writer died before it
    removed the old one. Temp files are always left-overs."""
    named = {record.file for record in complete}
    return sorted(f for f in files if f not in named)
