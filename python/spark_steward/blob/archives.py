"""Unpacks archive blobs (``.zip``, ``.whl``, ``.jar``, ``.tar``, ``.tar.gz``, ``.tgz``) safely,
once per host: into a temp directory, then renamed into place, under a file lock."""

from __future__ import annotations

import fcntl
import os
import shutil
import tarfile
import uuid
import zipfile
from pathlib import Path

from spark_steward.errors import StewardError

_ZIP = (".zip", ".whl", ".jar", ".egg")
_TAR = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


class ArchiveError(StewardError):
    """An archive blob cannot be unpacked (unknown format, unsafe member, corrupt)."""


def archive_format(name: str) -> str | None:
    """``"zip"``, ``"tar"`` or None for a file name."""
    lower = name.lower()
    if lower.endswith(_ZIP):
        return "zip"
    if lower.endswith(_TAR):
        return "tar"
    return None


def _extract(archive: Path, fmt: str, dest: Path) -> None:
    if fmt == "zip":
        with zipfile.ZipFile(archive) as zf:
            root = dest.resolve()
            for member in zf.namelist():
                target = (dest / member).resolve()
                if root != target and root not in target.parents:
                    raise ArchiveError(f"archive {archive} has an unsafe member {member!r}")
            zf.extractall(dest)
    else:
        with tarfile.open(archive) as tf:
            # The "data" filter refuses absolute paths, links out of the tree and devices.
            tf.extractall(dest, filter="data")


def unpack_once(archive: Path, name: str, dest: Path) -> Path:
    """``dest`` holding the unpacked ``archive`` (named ``name``); unpacks it only if absent.

    Concurrent callers on one host wait for the first one; a crash leaves a temp directory
    beside ``dest``, never a half-unpacked ``dest``.
    """
    fmt = archive_format(name)
    if fmt is None:
        raise ArchiveError(f"cannot unpack {name!r}: not a .zip, .whl, .jar, .tar, .tar.gz or "
                           ".tgz file")
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock = dest.with_name(f".{dest.name}.unpack")
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if dest.is_dir():
            return dest
        tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            _extract(archive, fmt, tmp)
            os.replace(tmp, dest)
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
            raise ArchiveError(f"cannot unpack {name} ({archive}): {exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os.close(fd)
    return dest
