"""Real small or read-only filesystems for tests: a tmpfs mounted on a fresh folder (needs root),
always unmounted when the block ends, also when the test fails."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def tmpfs(mount_point: Path, options: str = "size=1m") -> Iterator[Path]:
    """A tmpfs mounted on ``mount_point`` (created) with ``options``: ``size=1m`` for a disk
    that fills up, ``ro,size=1m`` for one nobody can write, not even root."""
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                   check=True, capture_output=True, text=True)
    try:
        yield mount_point
    finally:
        done = subprocess.run(["umount", str(mount_point)], capture_output=True, text=True)
        if done.returncode != 0:  # something still open: detach it now, fail loudly
            subprocess.run(["umount", "-l", str(mount_point)], check=True)
            raise AssertionError(f"umount {mount_point} failed: {done.stderr.strip()}")
