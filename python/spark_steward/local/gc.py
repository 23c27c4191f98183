"""``spark-steward gc --local-dir``: the host-local working dirs of applications that are no
longer alive, judged by the storage dir's application records."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from spark_steward.applications import looks_like_app_id
from spark_steward.blob.gc import Deleted, Failed, GcReport, Progress, Skipped
from spark_steward.errors import StewardError
from spark_steward.lifecycle.liveness import Liveness

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry


def folder_usage(folder: Path) -> tuple[int, int]:
    """``(files, bytes)`` below ``folder``."""
    files = size = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                size += os.lstat(os.path.join(parent, name)).st_size
            except FileNotFoundError:
                continue
            files += 1
    return files, size


def collect_garbage(local_dir: str | os.PathLike[str], registry: "ApplicationRegistry", *,
                    dry_run: bool, progress: Progress | None = None) -> GcReport:
    """Removes ``<local dir>/<app id>`` of every application whose record says finished or
    crashed. A live application's folder, and one without a readable record (another storage
    dir's application, or not ours), are reported as skipped and never touched."""
    report = GcReport(dry_run)
    root = Path(local_dir)
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and looks_like_app_id(p.name))
    except FileNotFoundError:
        return report
    for done, folder in enumerate(folders, 1):
        if progress is not None:
            progress(done, len(folders), str(folder))
        app = folder.name
        try:
            record = registry.read(app)
        except (StewardError, TypeError) as exc:
            report.skipped.append(Skipped(app, f"application record unreadable: {exc}"))
            continue
        if record is None:
            report.skipped.append(Skipped(app, "no application record"))
            continue
        if registry.liveness(record) is Liveness.LIVE:
            report.skipped.append(Skipped(app, "application is live"))
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
