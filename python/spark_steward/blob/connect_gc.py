"""What a crashed Spark Connect server's sessions left of ``spark.addArtifacts`` in Spark's own
folders, collected by ``spark-steward gc``.

A server's runtime names, at the first artifact a session adds, the folders Spark keeps every
session's artifacts in on the driver host (the artifact store ``artifacts-<uuid>`` in the JVM's
temp dir, the driver's copies ``userFiles-<uuid>`` in ``spark.local.dir``) in
``apps/<appId>/connect/spark-folders.json``. When the server dies without stopping, Spark's
shutdown hook never deletes them; ``gc``, run on that host, does, once the application is dead.

Only folders that are exactly what Spark makes are deleted: an absolute path to a real folder
(not a link) named ``artifacts-<uuid>`` or ``userFiles-<uuid>``, owned by the user running
``gc``; the list is kept while a folder it names is another user's or could not be deleted, so
its owner's run (or the next) finds it. A record of another host is skipped (the folders are
not here to delete).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from spark_steward.applications import OWNED_DIR, ApplicationRegistry, this_place
from spark_steward.errors import StewardError, StorageError
from spark_steward.gc import (Deleted, Failed, GcReport, Progress, Skipped, folder_usage,
                              is_collectable, judge)

#: Below ``apps/<appId>/``: the folders a Connect server's runtime named.
SPARK_FOLDERS_FILE = "connect/spark-folders.json"
_SPARK_FOLDER = re.compile(r"(artifacts|userFiles)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                           r"[0-9a-f]{4}-[0-9a-f]{12}")


def spark_folders_path(app_id: str) -> str:
    """``apps/<appId>/connect/spark-folders.json``."""
    return f"{OWNED_DIR}/{app_id}/{SPARK_FOLDERS_FILE}"


def refusal(folder: str, uid: int) -> str | None:
    """Why ``folder`` must not be deleted, or None when it is a Spark folder this user owns
    (or gone already). A refusal that names another user or an unreadable folder is one
    another run may not meet (:func:`for_another_run`)."""
    path = Path(folder)
    if "\0" in folder or not path.is_absolute() or ".." in path.parts:
        return "not an absolute path"
    if not _SPARK_FOLDER.fullmatch(path.name):
        return "not named as Spark names its artifact folders"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder (a link or a file)"
    if info.st_uid != uid:
        return f"owned by uid {info.st_uid}, not {uid}"
    return None


#: Refusals another user's run may not meet: the folder's list is kept for it.
_OTHER_RUN = ("cannot be read", "owned by uid")


def for_another_run(refused: str) -> bool:
    """Whether refusal ``refused`` leaves the folder to another run (its owner's)."""
    return refused.startswith(_OTHER_RUN)


def _folders(body: Any) -> list[str] | None:
    folders = body.get("folders") if isinstance(body, dict) else None
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        return None
    return folders


def collect_spark_folders(registry: ApplicationRegistry, *, dry_run: bool,
                          progress: Progress | None = None,
                          uid: int | None = None) -> GcReport:
    """Deletes the Spark artifact folders dead Connect servers on this host named, then their
    list. Live applications, unreadable records and other hosts' servers are skipped."""
    storage = registry.storage
    report = GcReport(dry_run=dry_run)
    uid = os.getuid() if uid is None else uid
    here = this_place()
    try:
        apps = [a for a in storage.list_names(OWNED_DIR)
                if storage.exists(spark_folders_path(a))]
    except StorageError as exc:
        report.failed.append(Failed(OWNED_DIR, str(exc)))
        return report
    for done, app in enumerate(apps, 1):
        if progress is not None:
            progress(done, len(apps), spark_folders_path(app))
        state, why = judge(registry, app)
        if not is_collectable(state):
            report.skipped.append(Skipped(app, why))
            continue
        record = registry.read(app)
        if record is None or record.host != here.host or (
                record.boot_id and here.boot_id and record.boot_id != here.boot_id):
            report.skipped.append(Skipped(app, f"its Spark folders are on host "
                                               f"{record.host if record else '?'}"))
            continue
        try:
            folders = _folders(storage.read_record(spark_folders_path(app)))
        except (StewardError, ValueError) as exc:
            folders, why = None, str(exc)
        else:
            why = "not a list of folders"
        if folders is None:
            report.failed.append(Failed(spark_folders_path(app), why))
            continue
        files = size = 0
        keep_list = found_any = False
        for folder in folders:
            refused = refusal(folder, uid)
            if refused is not None:
                report.skipped.append(Skipped(app, f"{folder} left alone: {refused}"))
                keep_list = keep_list or for_another_run(refused)
                continue
            path = Path(folder)  # normalized: "x/." and "x/" name folder x
            if not os.path.lexists(path):
                continue  # gone already (Spark deletes them at a clean stop)
            found = folder_usage(path)
            if not dry_run:
                errors: list[str] = []
                shutil.rmtree(path, onerror=lambda _f, p, e: errors.append(f"{p}: {e[1]}"))
                if os.path.lexists(path):
                    report.failed.append(Failed(folder, "; ".join(errors[:3])
                                                or "still there after removal"))
                    keep_list = True
                    continue
            found_any = True
            files, size = files + found[0], size + found[1]
        if found_any:
            report.deleted.append(Deleted(app, files, size))
        if not dry_run and not keep_list:
            try:
                storage.delete(spark_folders_path(app))
                storage.remove_empty_folder(spark_folders_path(app).rsplit("/", 1)[0])
            except StorageError as exc:
                report.failed.append(Failed(spark_folders_path(app), str(exc)))
    return report
