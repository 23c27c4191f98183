"""The local capability's errors, under the one hierarchy of :mod:`spark_steward.errors`.

Named as the ``errors`` of the capability's declaration, so each is also imported as
``from spark_steward.errors import <name>``, where users have always found it.
"""

from __future__ import annotations

from spark_steward.errors import StewardError


class LocalStateError(StewardError):
    """Host-local state was misused or is unusable; the message names the key or path."""


class LocalSpaceFull(LocalStateError):
    """spark.steward.local.max-bytes leaves no room even after evicting every unused entry."""


class LocalDiskFull(LocalSpaceFull):
    """The local dir's filesystem ran out of space (ENOSPC) during a write; names the folder,
    the bytes the write needed and the bytes free. Nothing of the write is left behind."""
