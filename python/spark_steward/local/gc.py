"""The host-local working dirs of applications that are no longer alive, judged by the storage
dir's application records: ``spark-steward gc --local-dir`` (:func:`collect_garbage`) and the
sweep the driver and each host's first executor task run (:func:`sweep_local_folders`). Both
choose from the same folders (:func:`app_folders`).

A finished application's folders are normally gone already: removed at its ``spark.stop()`` by
the driver (its host) and by every executor still running (theirs). What these find is the
rest: applications that crashed, hosts whose executors all left before the end, hosts
unreachable at the end."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from spark_steward.applications import looks_like_app_id
from spark_steward.gc import (Deleted, Failed, GcReport, Progress, Skipped, folder_usage,
                              is_collectable, judge)

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry

log = logging.getLogger(__name__)


def app_folders(local_dir: str | os.PathLike[str]) -> list[Path]:
    """``<local dir>/<appId>`` folders (names that could be an application id of ours), sorted;
    none when ``local_dir`` does not exist."""
    root = Path(local_dir)
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and looks_like_app_id(p.name))
    except FileNotFoundError:
        return []


def dead_local_folders(local_dir: str | os.PathLike[str], registry: "ApplicationRegistry",
                       own_app: str) -> list[Path]:
    """``<local dir>/<appId>`` folders on this host whose applications are no longer alive.

    Only applications with a readable record in ``registry``'s storage are judged; a folder
    without one (another storage dir's application, say) is never touched.
    """
    return [folder for folder in app_folders(local_dir)
            if folder.name != own_app and registry.is_dead(folder.name)]


def sweep_local_folders(local_dir: str | os.PathLike[str], registry: "ApplicationRegistry",
                        own_app: str) -> list[Path]:
    """Removes the host-local folders of dead applications; returns what was removed."""
    removed = []
    for folder in dead_local_folders(local_dir, registry, own_app):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
            log.info("removed %s: its application is no longer alive", folder)
    return removed


def collect_garbage(local_dir: str | os.PathLike[str], registry: "ApplicationRegistry", *,
                    dry_run: bool, progress: Progress | None = None) -> GcReport:
    """Removes ``<local dir>/<app id>`` of every application whose record says finished or
    crashed. A live application's folder, and one without a readable record (another storage
    dir's application, or not ours), are reported as skipped and never touched."""
    report = GcReport(dry_run)
    folders = app_folders(local_dir)
    for done, folder in enumerate(folders, 1):
        if progress is not None:
            progress(done, len(folders), str(folder))
        app = folder.name
        state, why = judge(registry, app)
        if not is_collectable(state):
            report.skipped.append(Skipped(app, why))
            continue
        files, size = folder_usage(folder)
        if not dry_run:
            errors: list[str] = []
            shutil.rmtree(folder, onerror=lambda _f, path, exc: errors.append(
                f"{path}: {exc[1]}"))
            if folder.exists():
                report.failed.append(Failed(str(folder), "; ".join(errors[:3]) or
                                            "still there after removal"))
                continue
        report.deleted.append(Deleted(app, files, size))
    return report
