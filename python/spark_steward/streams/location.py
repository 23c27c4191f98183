"""One streaming checkpoint location, read and cleaned from Python through fsspec.

Spark names locations with Hadoop URLs (``file:/x``, ``s3a://b/k``); they map to fsspec's
(``file:///x``, ``s3://b/k``). The JVM side records the deletes Spark asked for that failed as
intents in ``<location>/_steward/deletes/`` (one small JSON file each, written whole by rename);
this module retries them, sweeps Spark's leftover temp files and removes whole locations.
Every path read from an intent is checked to stay inside the location, outside our own folder.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from spark_steward.errors import StewardError, StorageError
from spark_steward.streams.errors import StreamError
from spark_steward.streams.lifecycle.packs import PACK_NAME, PACKS_FOLDER
from spark_steward.streams.lifecycle.locations import (INTENTS_FOLDER, OWN_FOLDER,
                                                       rewritten_since_asked, temp_sweepable)
from spark_steward.storage import Storage

log = logging.getLogger(__name__)

_SCHEMES = {"s3a": "s3", "s3n": "s3", "gs": "gs", "wasbs": "abfs", "abfss": "abfs"}
_MAX_INTENT_BYTES = 64 << 10
#: Backslashes (which Storage reads as separators), NUL and other control characters.
_BAD_CHARACTERS = re.compile(r"[\\\x00-\x1f\x7f]")


def fsspec_url(location: str) -> str:
    """The fsspec URL of a Hadoop location URL (``file:/x`` -> ``file:///x``)."""
    if location.startswith("file:"):
        return "file://" + "/" + location[len("file:"):].lstrip("/")
    scheme, sep, rest = location.partition("://")
    if sep and scheme in _SCHEMES:
        return f"{_SCHEMES[scheme]}://{rest}"
    return location


def checksum_sidecar(rel: str) -> str:
    """Hadoop's checksum file of ``rel`` on local file systems (``dir/.name.crc``), which
    Spark's own delete removes with the file."""
    folder, name = posixpath.split(rel)
    return posixpath.join(folder, f".{name}.crc")


@dataclass
class Survey:
    """What one listing of a location found."""

    files: int = 0
    bytes: int = 0
    newest: float | None = None
    temps: list[str] = field(default_factory=list)  # sweepable now
    intents: int = 0
    packs: int = 0  # FLIP-306 packs (each holds many of Spark's files)


class Location:
    """One streaming checkpoint location (a Hadoop URL) opened through fsspec."""
    def __init__(self, location: str, options: dict[str, Any] | None = None) -> None:
        self.location = location
        try:
            self.storage = Storage.from_url(fsspec_url(location), **(options or {}))
        except StewardError as exc:
            raise StreamError(f"streaming checkpoint location {location}: {exc}") from exc

    def exists(self) -> bool:
        """True when the location's folder exists."""
        return self.storage.exists("")

    def survey(self, *, now: float, query_active: bool, horizon: float) -> Survey:
        """Files, bytes and newest change of the location, with the temp files that may go."""
        found = Survey()
        for entry in self.storage.walk_files(""):
            found.files += 1
            found.bytes += entry.size
            if entry.modified is not None:
                found.newest = max(found.newest or 0.0, entry.modified)
            folder, name = posixpath.split(entry.path)
            if folder == INTENTS_FOLDER and name.endswith(".json") and not name.startswith("."):
                found.intents += 1
                continue
            if folder == PACKS_FOLDER and PACK_NAME.fullmatch(name):
                found.packs += 1
                continue
            if folder.startswith(PACKS_FOLDER) and name.startswith(".") and ".tmp" in name:
                # our own temp files (a packer or a JVM killed mid-write)
                if not query_active or (entry.modified is not None
                                        and now - entry.modified >= horizon):
                    found.temps.append(entry.path)
                continue
            if temp_sweepable(posixpath.basename(entry.path), entry.modified, now=now,
                              query_active=query_active, horizon=horizon):
                found.temps.append(entry.path)
        return found

    def sweep_temps(self, paths: list[str]) -> int:
        """Deletes the temp files a survey found; returns how many went."""
        gone = 0
        for path in paths:
            self.storage.delete(path)
            gone += 1
        if gone:
            log.info("swept %d temp file(s) left by killed writers from %s", gone, self.location)
        return gone

    def pending_intents(self) -> list[str]:
        """The names of the recorded deletes that failed and wait to be retried."""
        return [n for n in self.storage.list_names(INTENTS_FOLDER)
                if n.endswith(".json") and not n.startswith(".")]

    def retry_intents(self) -> int:
        """Retries every recorded failed delete; returns how many it settled. Raises
        StorageError at the first that still fails (the caller's retry strategy waits)."""
        if not self._resolves_inside(INTENTS_FOLDER, exact=True):
            log.warning("ignoring %s/%s: it leads outside the location (a symlink)",
                        self.location, INTENTS_FOLDER)
            return 0
        settled = 0
        for name in self.pending_intents():
            intent = f"{INTENTS_FOLDER}/{name}"
            try:
                target, asked_ms = self._target_of(intent)
            except FileNotFoundError:
                continue  # settled meanwhile by another cleaner
            if target is not None and rewritten_since_asked(self.storage.last_modified(target),
                                                            asked_ms):
                log.info("kept %s/%s: Spark wrote it again after its delete failed",
                         self.location, target)
            elif target is not None:
                self._delete_file(target)  # idempotent; raises while the storage fails
                self._delete_file(checksum_sidecar(target))
                log.info("deleted %s/%s, which Spark's delete had left", self.location, target)
            self.storage.delete(intent)
            settled += 1
        return settled

    def _delete_file(self, rel: str) -> None:
        """Deletes ``rel``; a symlink (also a dangling one) is removed itself, never followed."""
        if self.storage.is_local and os.path.islink(self.storage.path(rel)):
            try:
                os.unlink(self.storage.path(rel))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"could not delete {self.location}/{rel}: {exc}") from exc
            return
        self.storage.delete(rel)

    def _resolves_inside(self, rel: str, *, exact: bool = False) -> bool:
        """On a local file system, whether ``rel`` (its folder, or itself with ``exact``) is
        still inside the location once symlinks are resolved; always true elsewhere."""
        if not self.storage.is_local:
            return True
        root = os.path.realpath(self.storage.root)
        target = self.storage.path(rel) if exact else os.path.dirname(self.storage.path(rel))
        real = os.path.realpath(target)
        wanted = os.path.join(root, rel) if exact else None
        if wanted is not None:
            return not os.path.lexists(target) or real == wanted
        return real == root or real.startswith(root + os.sep)

    def _target_of(self, intent: str) -> tuple[str | None, object]:
        """The relative path an intent names and when the delete was asked (its ``time``, epoch
        ms, as written); path None (the intent is dropped, logged) when it is unreadable or
        names anything outside the location's Spark files. FileNotFoundError when the intent
        vanished (settled by another cleaner)."""
        try:
            data = self.storage.read_bytes(intent)
            if len(data) > _MAX_INTENT_BYTES:
                raise ValueError(f"{len(data)} bytes")
            body = json.loads(data)
            if not isinstance(body, dict):
                raise ValueError(f"a {type(body).__name__}, not an object")
            path, asked_ms = body["path"], body.get("time")
            if not isinstance(path, str):
                raise ValueError(f"path is {type(path).__name__}")
        except FileNotFoundError:
            raise
        except (StorageError, ValueError, KeyError, TypeError) as exc:
            log.warning("dropping the unreadable delete intent %s/%s: %s", self.location,
                        intent, exc)
            return None, None
        parts = path.split("/")
        if (not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts)
                or parts[0] == OWN_FOLDER or _BAD_CHARACTERS.search(path)
                or not self._resolves_inside(path)):
            log.warning("dropping the delete intent %s/%s: it names %r, not a file of the "
                        "location", self.location, intent, path[:200])
            return None, None
        return path, asked_ms

    def delete_all(self) -> None:
        """Removes everything in the location, then the location itself; idempotent. Our own
        folder goes last, so an interrupted drop still has its intents."""
        names = self.storage.list_names("")
        for name in sorted(names, key=lambda n: n == OWN_FOLDER):
            self.storage.delete(name)
        if self.storage.is_local:
            try:
                self.storage.fs.rmdir(self.storage.root)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"could not remove {self.location}: {exc}") from exc
        if self.storage.list_names(""):
            raise StorageError(f"{self.location} is not empty after the drop (a writer is "
                               "still adding files)")


def survey_or_none(location: Location, **kwargs: Any) -> Survey | None:
    """A survey, or None (logged) when the location cannot be listed."""
    try:
        return location.survey(**kwargs)
    except StewardError as exc:
        log.warning("could not list %s: %s", location.location, exc)
        return None
