"""What identifies a blob: its content hash (the key), its owner scope and its kind.

A :class:`BlobKey` is the SHA-256 of the content in lowercase hex, validated strictly before it
touches a path. A :class:`BlobRef` is the small, picklable handle tasks receive: key, scope,
kind, size and a crc32c for fast verification at first use.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from spark_steward.blob.errors import InvalidBlobKey

_KEY = re.compile(r"[0-9a-f]{64}")
_SCOPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SCOPE_ID = re.compile(r"(_app|[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.[0-9]{1,9})")

#: The scope every blob belongs to unless a named scope is open: the application.
APPLICATION_SCOPE = "_app"


@dataclass(frozen=True, slots=True, order=True)
class BlobKey:
    """SHA-256 of a blob's content, 64 lowercase hex digits."""

    digest: str

    def __post_init__(self) -> None:
        if not isinstance(self.digest, str) or not _KEY.fullmatch(self.digest):
            raise InvalidBlobKey(
                f"blob key {self.digest!r} is not valid: expected 64 lowercase hex digits "
                "(a SHA-256)")

    @classmethod
    def parse(cls, text: object) -> "BlobKey":
        """``text`` as a key; InvalidBlobKey names the value otherwise."""
        if not isinstance(text, str):
            raise InvalidBlobKey(f"blob key {text!r} is not valid: expected a string")
        return cls(text)

    def __str__(self) -> str:
        return self.digest

    @property
    def short(self) -> str:
        """The first 12 hex digits of the digest, for display."""
        return self.digest[:12]


class BlobKind(enum.Enum):
    """FLIP-19's two lifecycle guarantees.

    PERMANENT blobs (files, archives, models) keep their references when a job fails, so a retry
    finds them; TRANSIENT blobs (offloaded payloads) count their receivers and are deleted when
    the last one has succeeded, or staged when their job fails.
    """

    PERMANENT = "permanent"
    TRANSIENT = "transient"

    @classmethod
    def parse(cls, text: object) -> "BlobKind":
        """The kind named ``text`` (``"permanent"`` or ``"transient"``); InvalidBlobKey otherwise.
        """
        for kind in cls:
            if text == kind.value or text is kind:
                return kind
        raise InvalidBlobKey(f"blob kind {text!r} is not valid: expected 'permanent' or "
                             "'transient'")


def validate_scope_name(name: object) -> str:
    """A user's scope name: 1-64 of letters, digits, ``_ . -``, starting with a letter/digit."""
    if not isinstance(name, str) or not _SCOPE_NAME.fullmatch(name):
        raise InvalidBlobKey(
            f"scope name {name!r} is not valid: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit")
    return name


def validate_scope_id(scope: object) -> str:
    """A scope id as it appears in paths and requests: ``_app`` or ``<name>.<n>``."""
    if not isinstance(scope, str) or not _SCOPE_ID.fullmatch(scope):
        raise InvalidBlobKey(f"scope id {scope!r} is not valid: expected '_app' or "
                             "'<name>.<number>'")
    return scope


def blob_relpath(scope: str, key: BlobKey) -> str:
    """``<scopeId>/<key>``: the same relative path in the local and the HA store."""
    return f"{validate_scope_id(scope)}/{key.digest}"


@dataclass(frozen=True, slots=True)
class BlobRef:
    """The handle a task needs to read a blob: small, picklable, verifiable."""

    key: BlobKey
    scope: str
    kind: BlobKind
    size: int
    crc32c: int
    name: str = ""

    def __post_init__(self) -> None:
        validate_scope_id(self.scope)
        if self.size < 0:
            raise InvalidBlobKey(f"blob size {self.size} of {self.key} is negative")

    def __str__(self) -> str:
        return f"{self.scope}/{self.key.short}"

    def to_wire(self) -> dict[str, object]:
        """The ref as a JSON-able dict, for the blob protocol."""
        return {"key": self.key.digest, "scope": self.scope, "kind": self.kind.value,
                "size": self.size, "crc32c": self.crc32c, "name": self.name}

    @classmethod
    def from_wire(cls, body: object) -> "BlobRef":
        """Parses a reply of the blob server; InvalidBlobKey names what is wrong."""
        if not isinstance(body, dict):
            raise InvalidBlobKey(f"blob reference {body!r} is not an object")
        try:
            return cls(BlobKey.parse(body["key"]), validate_scope_id(body["scope"]),
                       BlobKind.parse(body["kind"]), int(body["size"]), int(body["crc32c"]),
                       str(body.get("name", "")))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidBlobKey):
                raise
            raise InvalidBlobKey(f"blob reference {body!r} is not valid: {exc}") from None
