"""One error hierarchy for spark-steward, and the one place users import its errors from.

Every message names the key, value, path or id at fault and says what to do. The split between
*definitely failed* and *outcome unknown* (StorageError vs OutcomeUnknown) decides whether a
cleanup may be retried blindly or must first look at what landed.

The kernel's and the shared pieces' errors are defined here; each capability defines its own in
its folder (the ``errors`` module its :class:`~spark_steward.capabilities.Capability` names,
e.g. ``blob/errors.py``), under :class:`StewardError`, and they are imported from here all the
same: ``from spark_steward.errors import BlobNotFound``.
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


class MalformedCommand(StewardError, ValueError):
    """A spark-steward Spark Connect command or reply that is not what the wire expects (see
    :mod:`spark_steward.kernel.remote_wire`); the message says what is wrong."""



def _capability_errors() -> dict[str, type[StewardError]]:
    """Every declared capability's error classes by name."""
    from spark_steward import capabilities

    return {name: value for _, module in capabilities.loaded("errors")
            for name, value in vars(module).items()
            if isinstance(value, type) and issubclass(value, StewardError)}


def __getattr__(name: str) -> type[StewardError]:
    """A capability's error by name (``from spark_steward.errors import BlobNotFound``)."""
    found = None if name.startswith("__") else _capability_errors().get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_capability_errors()))
