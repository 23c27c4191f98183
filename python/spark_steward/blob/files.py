"""Transparent mode: ``sc.addFile``, ``sc.addArchive`` and ``SparkFiles.get`` through the blob
service, for existing jobs.

A local file (or directory, with ``recursive=True``, or archive) added from a session with
spark-steward on becomes a permanent blob of the application scope, registered under the name
Spark would give it (the file name, or the ``#alias`` of an archive). ``SparkFiles.get(name)``
then returns, on executors and on the driver, a path with that same name inside the
application's local folder: a verified copy of a file, or the unpacked directory of a directory
or archive. Spark itself never sees these files, so it does not ship them unverified to every
executor. Remote URLs (``hdfs://``, ``http://``), ``addPyFile`` and sessions with
spark-steward off keep Spark's own behaviour.
"""

from __future__ import annotations

import logging
import os
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlparse

from spark_steward.blob.archives import archive_format, unpack_once
from spark_steward.blob.keys import BlobRef
from spark_steward.blob.config_keys import BLOB_TRANSPARENT
from spark_steward.blob.errors import BlobNotFound, BlobServerUnavailable
from spark_steward.errors import StewardError
from spark_steward.kernel import patches
from spark_steward.private import make_dirs, open_new

if TYPE_CHECKING:
    from pyspark import SparkContext

    from spark_steward.blob.service import BlobService

log = logging.getLogger(__name__)

FILE, DIRECTORY, ARCHIVE = "file", "dir", "archive"
_bypass = threading.local()


def local_source(path: str) -> Path | None:
    """The local path behind ``path`` (plain or ``file:``), or None for remote URLs."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(parsed.path if parsed.scheme == "file" else path.split("#", 1)[0])
    return None


def materialize(ref: BlobRef, form: str, name: str, blob_path: Path, files_root: Path) -> Path:
    """``<files_root>/<key>/<name>``: the named file or unpacked directory SparkFiles returns."""
    dest = files_root / ref.key.digest / name
    if form == FILE:
        # Re-linked when the verified copy was replaced (re-fetched after corruption).
        if not dest.exists() or dest.stat().st_ino != blob_path.stat().st_ino:
            make_dirs(dest.parent)
            tmp = dest.with_name(f".{name}.tmp-{os.getpid()}-{threading.get_ident()}")
            try:
                os.link(blob_path, tmp)
            except OSError:
                import shutil

                with open(blob_path, "rb") as src, open_new(tmp) as out:
                    shutil.copyfileobj(src, out, 8 << 20)
            os.replace(tmp, dest)
        return dest
    archive_name = ref.name if form == ARCHIVE else f"{name}.tar"
    return unpack_once(blob_path, archive_name, dest)


class TransparentFiles:
    """The driver's half: decides per call whether a file goes through the blob service."""

    def add(self, sc: "SparkContext", path: str, recursive: bool, archive: bool) -> bool:
        """True when ``path`` was registered as a blob (Spark must then not ship it)."""
        if getattr(_bypass, "active", False):
            return False
        service = _transparent_service(sc)
        source = local_source(path)
        if service is None or source is None:
            return False
        name = path.split("#", 1)[1] if archive and "#" in path else source.name
        if archive:
            if archive_format(source.name) is None:
                raise StewardError(f"addArchive({path!r}): not a .zip, .jar, .tar.gz, .tgz or "
                                   ".tar file")
            form = ARCHIVE
        elif source.is_dir():
            if not recursive:
                raise StewardError(f"addFile({path!r}) is a directory: pass recursive=True, as "
                                   "Spark requires")
            form = DIRECTORY
        else:
            form = FILE
        if not source.exists():
            raise StewardError(f"addFile({path!r}): no such file or directory {source}")
        if form == DIRECTORY:
            with tempfile.TemporaryDirectory(prefix="steward-addfile-") as tmp:
                packed = Path(tmp) / f"{name}.tar"
                with tarfile.open(packed, "w") as tar:
                    tar.add(source, arcname=".")
                ref = service.require_depot().put_file(packed, name=f"{name}.tar")
        else:
            ref = service.require_depot().put_file(source, name=source.name)
        service.require_depot().register_file(name, ref, form)
        log.info("%s %s goes through spark-steward as blob %s", "addArchive" if archive
                 else "addFile", path, ref)
        return True


def executor_get(name: str) -> str | None:
    """``SparkFiles.get(name)`` inside a task, or None when the name is not ours."""
    from spark_steward.blob.executor import executor_blobs
    from spark_steward.kernel.executor import current_context

    if current_context() is None:
        return None
    blobs = executor_blobs()
    if not blobs.runtime.conf.get(BLOB_TRANSPARENT):
        return None
    try:
        ref, form = blobs.resolve_file(name)
    except (BlobNotFound, BlobServerUnavailable):
        return None  # not ours, or the driver cannot say: Spark's own lookup
    return str(materialize(ref, form, name, blobs.get(ref), blobs.runtime.work_dir / "files"))


def driver_get(name: str) -> str | None:
    """``SparkFiles.get(name)`` on the driver, or None when the name is not ours."""
    service = _driver
    if service is None or service.depot is None or not service.running:
        return None
    try:
        ref, form = service.depot.resolve(name)
    except BlobNotFound:
        return None
    located = service.require_depot().local_path(ref.key, ref.scope)
    assert service.local_app_dir is not None
    return str(materialize(ref, form, name, located, service.local_app_dir / "files"))


_driver: "BlobService | None" = None


def _transparent_service(sc: "SparkContext") -> "BlobService | None":
    """The blob service when transparent file handling is on for ``sc``'s session in use."""
    service = _driver
    return service if service is not None and service.transparent_for(sc) else None


# -- interceptions (installed by spark_steward.kernel.patches) ------------------------------

_FILES = TransparentFiles()


def _sparkfiles_get(proceed: Callable[..., str], cls: Any, filename: str) -> str:
    """``SparkFiles.get``: ours first (cheap: one check per call for foreign names)."""
    found = executor_get(filename)
    if found is None:
        found = driver_get(filename)
    return found if found is not None else proceed(cls, filename)


def _add_file(proceed: Callable[..., None], sc: "SparkContext", path: str,
              recursive: bool = False) -> None:
    if not _FILES.add(sc, path, recursive, archive=False):
        proceed(sc, path, recursive)


def _add_archive(proceed: Callable[..., None], sc: "SparkContext", path: str) -> None:
    if not _FILES.add(sc, path, False, archive=True):
        proceed(sc, path)


def _add_py_file(proceed: Callable[..., None], sc: "SparkContext", path: str) -> None:
    # Python dependencies go on executors' sys.path through Spark's own mechanism.
    _bypass.active = True
    try:
        proceed(sc, path)
    finally:
        _bypass.active = False


def executor_setup() -> None:
    """Run once in each executor process (``BlobService.executor_setup``)."""
    patches.intercept("SparkFiles.get", "blobs", _sparkfiles_get)


def driver_setup(service: "BlobService") -> None:
    """The blob service's driver hook (``BlobService.driver_hooks``): the driver's
    interceptions, served by ``service`` until the next attach replaces it."""
    global _driver
    _driver = service
    patches.intercept("SparkContext.addFile", "blobs", _add_file)
    patches.intercept("SparkContext.addArchive", "blobs", _add_archive)
    patches.intercept("SparkContext.addPyFile", "blobs", _add_py_file)
    patches.intercept("SparkFiles.get", "blobs", _sparkfiles_get)
