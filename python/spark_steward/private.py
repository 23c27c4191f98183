"""Folders and files only the application's user can read: 0700 and 0600.

The host-local dir holds blob bytes that the blob server only hands out against the
application's secret; a world-readable copy on disk would give them to every local user. A
directory another user created first (in a shared temp dir, say) is refused rather than used,
since its owner could read, replace or plant what we put there.

The modes are passed at creation (``mkdir``/``open``), so no file is ever briefly readable; the
umask can only take bits away from them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from spark_steward.errors import ConfigError

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

_OTHERS = 0o077          # any group/other bit: tightened on a root we own
_OTHERS_WRITE = 0o022    # group/other write: someone else may have put things there
_NEW_FILE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
                   | getattr(os, "O_NOFOLLOW", 0))


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """``Path(path).mkdir(parents=True, exist_ok=True)``, but every directory it creates is 0700.

    ``Path.mkdir(mode=…, parents=True)`` gives the parents the default mode, hence the walk.
    Existing directories keep their mode.
    """
    target = Path(path)
    missing: list[Path] = []
    current = target
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():  # a file or a dangling link there: as mkdir would say
                raise
    if not target.is_dir():
        raise FileExistsError(errno.EEXIST, "File exists and is not a directory", str(target))
    return target


def open_new(path: str | os.PathLike[str], *, exclusive: bool = False) -> BinaryIO:
    """Opens ``path`` for writing like ``open(path, "wb")`` (``exclusive``: like ``"xb"``), created
    0600, never through a symbolic link (O_NOFOLLOW) and not inherited by child processes.

    A file that already exists with group/other bits is truncated and tightened to 0600.
    """
    flags = _NEW_FILE_FLAGS | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        if not exclusive and stat.S_IMODE(os.fstat(fd).st_mode) & _OTHERS:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def ensure_private_root(path: str | os.PathLike[str], *, key: str) -> Path:
    """Creates the private root ``path`` (missing parents 0700) or checks the one that is there.

    It must be a real directory (not a symbolic link) owned by this user and writable by nobody
    else; one we own that others may only read or enter is tightened to 0700. A directory on
    the way that sits in a shared sticky directory (``/tmp``) must be ours or root's too: anyone
    could have made it and could swap what is below it. Anything else raises a one-line
    :class:`ConfigError` naming ``key`` and the path.
    """
    root = Path(path)
    shown = str(path)
    euid = os.geteuid()
    _check_shared_ancestors(root, key=key, euid=euid)  # before we create anything below them
    try:
        if not os.path.lexists(root):
            make_dirs(root)
        st = os.lstat(root)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot create {shown}: {exc.strerror or exc}; "
                          "use a directory this user can create") from None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{key}: {shown} is a symbolic link; set {key} to a real directory "
                          "of your own")
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{key}: {shown} exists and is not a directory")
    if st.st_uid != euid:
        raise ConfigError(f"{key}: {shown} is owned by uid {st.st_uid}, not this user "
                          f"(uid {euid}); use a directory of your own")
    mode = stat.S_IMODE(st.st_mode)
    if mode & _OTHERS_WRITE:
        raise ConfigError(f"{key}: {shown} is writable by other users (mode {mode:04o}); "
                          "use a directory only this user can write")
    _check_shared_ancestors(root, key=key, euid=euid)  # again: one may have appeared meanwhile
    if mode & _OTHERS:
        try:
            os.chmod(root, PRIVATE_DIR_MODE, follow_symlinks=False)
        except NotImplementedError:  # no lchmod here; lstat above said it is no link
            os.chmod(root, PRIVATE_DIR_MODE)
    return root


def _check_shared_ancestors(root: Path, *, key: str, euid: int) -> None:
    """Refuses a directory on the way to ``root`` that another user created in a sticky,
    world-writable directory (``/tmp/spark-steward-<uid>`` planted before us)."""
    chain = Path(os.path.abspath(root))
    for child in chain.parents:
        parent = child.parent
        if parent == child:
            break
        try:
            parent_st = os.lstat(parent)
            child_st = os.lstat(child)
        except OSError:
            continue
        shared = stat.S_IMODE(parent_st.st_mode) & 0o002 and parent_st.st_mode & stat.S_ISVTX
        if shared and child_st.st_uid not in (euid, 0):
            raise ConfigError(f"{key}: {child} (on the way to {root}) is owned by uid "
                              f"{child_st.st_uid}, not this user (uid {euid}), in the shared "
                              f"directory {parent}; remove it or use a directory of your own")
