"""The streams capability's errors, under the one hierarchy of :mod:`spark_steward.errors`.

Named as the ``errors`` of the capability's declaration, so each is also imported as
``from spark_steward.errors import <name>``, where users have always found it.
"""

from __future__ import annotations

from spark_steward.errors import StewardError


class StreamError(StewardError):
    """A streaming checkpoint location cannot be found, read or dropped as asked."""


class StreamActive(StreamError):
    """A drop was refused: a run of the query may still be active, or it was active too recently."""


class Cancelled(StreamError):
    """A pack cycle stopped before a write: its run no longer owns the location."""
