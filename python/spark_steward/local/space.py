"""A local dir whose disk is full: the bare ``OSError: [Errno 28]`` of a write becomes
:class:`~spark_steward.errors.LocalDiskFull`, which names the folder, the bytes the write needed
and the bytes its filesystem has free, and says what to do.

The writers (the working dir's :meth:`~spark_steward.local.working_dir.WorkingDir.install`, the
driver's :class:`~spark_steward.blob.stores.LocalBlobStore`) remove their temp files before the
error leaves them, so the free bytes it reports are what is really free.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from spark_steward.config import LOCAL_DIR
from spark_steward.local.errors import LocalDiskFull

#: A full disk, or the user's quota on it used up.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_bytes(folder: Path) -> int | None:
    """Bytes this user may still write on ``folder``'s filesystem (the nearest existing folder
    above it when it is gone); None when the filesystem cannot tell."""
    for candidate in (folder, *folder.parents):
        try:
            st = os.statvfs(candidate)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return st.f_bavail * st.f_frsize
    return None


@contextmanager
def reporting_full_disk(folder: Path, needed: int) -> Iterator[None]:
    """Raises LocalDiskFull (from the OSError) when the block fails for lack of space in
    ``folder``; every other error passes unchanged.

    >>> with reporting_full_disk(store_dir, len(data)):
    ...     write_then_rename(data)   # removes its temp file when it fails
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        free = free_bytes(folder)
        shown_free = "an unknown number of bytes" if free is None else f"{free} bytes"
        shown_needed = f"{needed} bytes" if needed > 0 else "its bytes"
        raise LocalDiskFull(
            f"no room on disk for {shown_needed} in {folder}: its filesystem has {shown_free} "
            f"free ({exc.strerror}); free space there, or set {LOCAL_DIR.name} to a folder on "
            "a larger disk") from exc
