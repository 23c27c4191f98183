"""The checkpoint capability's errors, under the one hierarchy of :mod:`spark_steward.errors`.

Named as the ``errors`` of the capability's declaration, so each is also imported as
``from spark_steward.errors import <name>``, where users have always found it.
"""

from __future__ import annotations

from spark_steward.errors import ChecksumMismatch, StewardError


class CheckpointError(StewardError):
    """A checkpoint operation failed; the message names the series and checkpoint id."""


class CheckpointNotFound(CheckpointError):
    """No completed checkpoint with that series and id (never completed, or discarded)."""


class CheckpointCorrupt(CheckpointError, ChecksumMismatch):
    """Checkpoint data or metadata fails verification; names the series, id and file."""
