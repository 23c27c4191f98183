"""Unpacks archive blobs (``.zip``, ``.whl``, ``.jar``, ``.tar``, ``.tar.gz``, ``.tgz``) safely,
once per host: into a temp directory, then renamed into place, under a file lock. What is
unpacked is its user's only, like everything in the local dir (private.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tarfile
import uuid
import zipfile
from pathlib import Path

from spark_steward.blob.errors import ArchiveError
from spark_steward.errors import StewardError
from spark_steward.private import PRIVATE_FILE_MODE, make_dirs

_ZIP = (".zip", ".whl", ".jar", ".egg")
_TAR = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


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


def _keep_private(tree: Path) -> None:
    """Takes group and other bits off everything unpacked (archives carry their own modes; the
    owner's, such as an executable bit, stay). Links are left alone: chmod would follow them."""
    for folder, dirs, files in os.walk(tree):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) & 0o077:
                os.chmod(path, stat.S_IMODE(mode) & 0o700)


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
    make_dirs(dest.parent)
    lock = dest.with_name(f".{dest.name}.unpack")
    fd = os.open(lock, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if dest.is_dir():
            return dest
        tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            make_dirs(tmp)  # 0700 before the first member lands in it
            _extract(archive, fmt, tmp)
            _keep_private(tmp)
            os.replace(tmp, dest)
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
            raise ArchiveError(f"cannot unpack {name} ({archive}): {exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os.close(fd)
    return dest
