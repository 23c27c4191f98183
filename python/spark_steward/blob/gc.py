"""What blobs the HA storage dir holds, per application, and garbage collection of the blobs of
applications that are no longer alive. No Spark: the ``spark-steward blobs`` and ``gc`` commands
run this against any storage URL.

Layout read here: ``apps/<appId>/blobs/<scopeId>/<key>`` with ``key`` 64 lowercase hex digits
(a SHA-256) and ``scopeId`` either ``_app`` or ``<name>.<n>``. Interrupted uploads leave temp
files beside their target (``.<key>.tmp-<uuid>`` on local filesystems, ``<key>.tmp-<uuid>`` on
other non-object stores); they are counted apart from the blobs and go with their folder.

An application's blobs are collected only when its record exists, is readable and says it is no
longer alive (finished, or crashed by the liveness rules); a live application and one without a
readable record are left alone and reported as skipped: absence of proof is not death. The
report and the liveness verdict are the shared ones of :mod:`spark_steward.gc`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spark_steward.applications import OWNED_DIR, ApplicationRegistry
from spark_steward.blob.keys import BlobKey, validate_scope_id
from spark_steward.blob.errors import InvalidBlobKey
from spark_steward.errors import StorageError
from spark_steward.gc import (Deleted, Failed, GcReport, Progress, Skipped, application_liveness,
                              is_collectable, judge)
from spark_steward.storage import FileEntry, Storage

log = logging.getLogger(__name__)

#: The capability folder of the blob service below ``apps/<appId>/``.
BLOBS_DIR = "blobs"

TEMP_MARK = ".tmp-"


def blobs_path(app_id: str) -> str:
    """``apps/<appId>/blobs``: the HA blob folder of one application."""
    return f"{OWNED_DIR}/{app_id}/{BLOBS_DIR}"


def is_temp_name(name: str) -> bool:
    """True for the temp file of an interrupted atomic write (``.<key>.tmp-<uuid>``)."""
    return TEMP_MARK in name


@dataclass(frozen=True)
class StoredBlob:
    """One blob in the HA storage dir; ``path`` is relative to the storage root."""

    app_id: str
    scope: str
    key: str
    size: int
    path: str


@dataclass(frozen=True)
class TempFile:
    """A temp file an interrupted write left in a scope directory."""

    app_id: str
    scope: str
    name: str
    size: int
    path: str


@dataclass(frozen=True)
class BlobScan:
    """Everything below ``apps/*/blobs``: blobs, temp files and anything else found there."""

    blobs: list[StoredBlob] = field(default_factory=list)
    temp_files: list[TempFile] = field(default_factory=list)
    #: Files that are neither a blob nor a temp file (a bad key or scope name, nested dirs).
    other_files: list[FileEntry] = field(default_factory=list)


def _blob_app_ids(storage: Storage, app_id: str | None) -> list[str]:
    if app_id is not None:
        return [app_id]
    return storage.list_names(OWNED_DIR)


def scan_blobs(storage: Storage, app_id: str | None = None) -> BlobScan:
    """Every file below ``apps/<app>/blobs`` of every application (or only ``app_id``)."""
    scan = BlobScan()
    for app in _blob_app_ids(storage, app_id):
        base = blobs_path(app)
        prefix = base + "/"
        for entry in storage.walk_files(base):
            rest = entry.path[len(prefix):] if entry.path.startswith(prefix) else entry.path
            parts = rest.split("/")
            if len(parts) != 2:
                scan.other_files.append(entry)
                continue
            scope, name = parts
            if is_temp_name(name):
                scan.temp_files.append(TempFile(app, scope, name, entry.size, entry.path))
                continue
            try:
                validate_scope_id(scope)
                key = BlobKey(name)
            except InvalidBlobKey:
                scan.other_files.append(entry)
                continue
            scan.blobs.append(StoredBlob(app, scope, key.digest, entry.size, entry.path))
    return scan


# -- usage -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlobUsage:
    """Blobs one application has in the storage dir."""

    app_id: str
    liveness: str
    scopes: int
    blobs: int
    bytes: int
    temp_files: int
    temp_bytes: int = 0


def usage_by_application(registry: ApplicationRegistry) -> list[BlobUsage]:
    """Per application with files below ``apps/<app>/blobs``, sorted by application id.

    ``scopes`` counts scope directories holding a blob or a temp file; ``bytes`` is the size
    of the blobs, ``temp_bytes`` that of the temp files.
    """
    scan = scan_blobs(registry.storage)
    apps = sorted({b.app_id for b in scan.blobs} | {t.app_id for t in scan.temp_files})
    result = []
    for app in apps:
        blobs = [b for b in scan.blobs if b.app_id == app]
        temps = [t for t in scan.temp_files if t.app_id == app]
        scopes = {b.scope for b in blobs} | {t.scope for t in temps}
        result.append(BlobUsage(app, application_liveness(registry, app), len(scopes),
                                len(blobs), sum(b.size for b in blobs), len(temps),
                                sum(t.size for t in temps)))
    return result


# -- garbage collection ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Doomed:
    app_id: str
    scopes: list[tuple[str, int, int]]  # (path, files, bytes) of each entry below blobs/


def _plan(registry: ApplicationRegistry, report: GcReport) -> list[_Doomed]:
    storage = registry.storage
    doomed = []
    for app in storage.list_names(OWNED_DIR):
        base = blobs_path(app)
        if not storage.exists(base):
            continue
        state, why = judge(registry, app)
        if not is_collectable(state):
            report.skipped.append(Skipped(app, why))
            continue
        # One listing per application, grouped by the entry below blobs/ it belongs to.
        usage: dict[str, tuple[int, int]] = {}
        for entry in storage.walk_files(base):
            name = entry.path[len(base) + 1:].split("/", 1)[0]
            files, size = usage.get(name, (0, 0))
            usage[name] = (files + 1, size + entry.size)
        names = sorted(set(storage.list_names(base)) | set(usage))
        doomed.append(_Doomed(app, [(f"{base}/{name}", *usage.get(name, (0, 0)))
                                    for name in names]))
    return doomed


def collect_garbage(registry: ApplicationRegistry, *, dry_run: bool,
                    progress: Progress | None = None) -> GcReport:
    """Deletes ``apps/<app>/blobs`` of every application that is no longer alive.

    One recursive delete per scope directory (``progress`` advances after each), then one of
    the emptied ``blobs`` folder. A failing delete is reported in ``failed`` and the rest goes
    on; an application with a failed scope keeps its ``blobs`` folder for the next run.
    Idempotent: a second run finds nothing to delete. ``dry_run`` deletes nothing and reports
    what would be deleted.
    """
    storage = registry.storage
    report = GcReport(dry_run=dry_run)
    doomed = _plan(registry, report)
    if dry_run:
        report.deleted = [Deleted(d.app_id, sum(f for _, f, _ in d.scopes),
                                  sum(b for _, _, b in d.scopes)) for d in doomed]
        return report
    total = sum(len(d.scopes) for d in doomed)
    done = 0
    for app in doomed:
        files = size = removed = 0
        app_failed = False
        for path, scope_files, scope_bytes in app.scopes:
            try:
                storage.delete(path)
                removed += 1
                files += scope_files
                size += scope_bytes
            except StorageError as exc:
                log.warning("could not delete %s: %s", storage.url_of(path), exc)
                report.failed.append(Failed(path, str(exc)))
                app_failed = True
            done += 1
            if progress is not None:
                progress(done, total, path)
        if not app_failed:
            base = blobs_path(app.app_id)
            try:
                storage.delete(base)
            except StorageError as exc:
                log.warning("could not delete %s: %s", storage.url_of(base), exc)
                report.failed.append(Failed(base, str(exc)))
        if removed or not app_failed:
            report.deleted.append(Deleted(app.app_id, files, size))
    return report
