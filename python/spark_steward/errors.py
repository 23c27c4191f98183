"""One error hierarchy for spark-steward.

Every message names the key, value, path or id at fault and says what to do. The split between
*definitely failed* and *outcome unknown* (StorageError vs OutcomeUnknown) decides whether a
cleanup may be retried blindly or must first look at what landed.
"""

from __future__ import annotations


class StewardError(Exception):
    """Base of every error spark-steward raises on purpose."""


class ConfigError(StewardError, ValueError):
    """A spark.steward.* value is malformed or out of range; the message names key and value."""


class SetupError(StewardError):
    """The environment cannot run spark-steward (no java/javac, no plugin API, Spark Connect)."""


class NotAttached(StewardError):
    """An API that needs the driver runtime was called while spark-steward is not attached."""


class DisabledForSession(StewardError):
    """spark.steward.enabled is false in the runtime conf of the SparkSession in use."""


class NotInTask(StewardError):
    """An executor-side API was called outside a task that carries the executor context."""


class EventDecodeError(StewardError, ValueError):
    """The shim sent events this version cannot read (a shim/package version mismatch)."""


class StorageError(StewardError):
    """A storage operation definitely failed (nothing was changed)."""


class OutcomeUnknown(StorageError):
    """A storage write may or may not have landed; look before retrying or cleaning up."""


class StorageBackendMissing(StorageError):
    """The URL's scheme needs an fsspec backend that is not installed; the message names it."""


class ChecksumMismatch(StewardError):
    """Stored bytes do not match their recorded checksum; the message names the path."""


class RecordCorrupt(ChecksumMismatch):
    """A metadata record is unreadable or fails verification; the message names the path."""


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


class CheckpointError(StewardError):
    """A checkpoint operation failed; the message names the series and checkpoint id."""


class CheckpointNotFound(CheckpointError):
    """No completed checkpoint with that series and id (never completed, or discarded)."""


class CheckpointCorrupt(CheckpointError, ChecksumMismatch):
    """Checkpoint data or metadata fails verification; names the series, id and file."""


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


class LocalStateError(StewardError):
    """Host-local state was misused or is unusable; the message names the key or path."""


class LocalSpaceFull(LocalStateError):
    """spark.steward.local.max-bytes leaves no room even after evicting every unused entry."""


class LocalDiskFull(LocalSpaceFull):
    """The local dir's filesystem ran out of space (ENOSPC) during a write; names the folder,
    the bytes the write needed and the bytes free. Nothing of the write is left behind."""


class StreamError(StewardError):
    """A streaming checkpoint location cannot be found, read or dropped as asked."""


class StreamActive(StreamError):
    """A drop was refused: a run of the query may still be active, or it was active too recently."""


class Cancelled(StreamError):
    """A pack cycle stopped before a write: its run no longer owns the location."""

