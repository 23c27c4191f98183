"""The cached-table capability's errors, under the one hierarchy of :mod:`spark_steward.errors`.

Named as the ``errors`` of the capability's declaration, so each is also imported as
``from spark_steward.errors import <name>``, where users have always found it.
"""

from __future__ import annotations

from spark_steward.errors import StewardError


class CacheError(StewardError):
    """A cached-table operation failed; the message names the table key."""


class InvalidTableKey(CacheError, ValueError):
    """A cached-table key, token, digest or attempt id is malformed; the message names it."""


class TableStateError(CacheError):
    """An illegal cached-table state change (e.g. completing a table marked for deletion)."""


class TableReplaced(CacheError):
    """complete() found the table's entry gone, marked or of another attempt: a cleanup or
    another materialization took the key over, so this attempt's result is not recorded."""


class ManifestError(CacheError):
    """A cached table's data files could not be listed or read into a manifest; names the file."""


class UnidentifiedCode(CacheError):
    """The Python code of a plan cannot be identified for sharing (the reason is the message):
    the table is cached for the application only, never shared under a key that could lie."""
