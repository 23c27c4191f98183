"""The blob capability's errors, under the one hierarchy of :mod:`spark_steward.errors`.

Named as the ``errors`` of the capability's declaration, so each is also imported as
``from spark_steward.errors import <name>``, where users have always found it.
"""

from __future__ import annotations

from spark_steward.errors import StewardError


class InvalidBlobKey(StewardError, ValueError):
    """A blob key or scope id is malformed (checked before it touches a path); names the value."""


class BlobNotFound(StewardError):
    """No store holds the blob (deleted with its scope, or never put); names key and scope."""


class NotRegularFile(BlobNotFound):
    """Something other than a regular file sits under a blob's name."""


class BlobServerUnavailable(StewardError):
    """The driver's blob server cannot be reached (connection refused, reset or timed out)."""


class AuthenticationFailed(StewardError):
    """A blob server connection did not prove knowledge of the application's secret."""


class BlobProtocolError(StewardError):
    """A blob server request or reply broke the protocol (bad frame, size, op or field)."""


class PeerClosed(BlobProtocolError):
    """The peer closed the connection between frames: the normal end of a conversation."""


class ScopeError(StewardError):
    """An owner scope was misused: bad name, already closed, or closed from another thread."""


class ArchiveError(StewardError):
    """An archive blob cannot be unpacked (unknown format, unsafe member, corrupt)."""


class SwarmFailed(StewardError):
    """Neither the origin nor any peer could supply the remaining pieces of a blob."""


class BadPiece(StewardError):
    """A source sent a piece that is not the plan's, or nothing useful."""
