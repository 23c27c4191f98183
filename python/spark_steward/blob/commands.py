"""The blob commands the driver runtime answers on a Spark Connect server (the thin client's
:func:`spark_steward.blobs.put` and ``ls``, sent by :mod:`spark_steward.blob.remote`).

A Connect session's blobs belong to an owner scope of its own, opened at its first put and
closed when the session ends (closed, expired, or its client killed: ``BlobService.
session_closed``), when they are deleted, locally and in HA, as a closed scope's are. Another
session's blobs are not listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_steward.blob.keys import BlobKind
from spark_steward.errors import MalformedCommand
from spark_steward.kernel.remote_server import RemoteCall
from spark_steward.kernel.runtime import runtime_for

if TYPE_CHECKING:
    from spark_steward.blob.service import BlobService


def serve_put(service: "BlobService", call: RemoteCall) -> dict[str, object]:
    """blobs.put: the call's bytes as a blob of the session's scope; the ref's wire form."""
    if call.data is None:
        raise MalformedCommand("blobs.put carries no bytes")
    runtime_for(call.session)  # refused when spark-steward is off for the session
    receivers = call.arg("receivers", int, 0)
    if receivers < 0:
        raise MalformedCommand(f"blobs.put: receivers={receivers} is negative")
    ref = service.require_depot().put_bytes(
        call.data, scope=service.session_scope(call.session_id),
        kind=BlobKind.parse(call.arg("kind", str, "permanent")), receivers=receivers,
        name=call.arg("name", str, ""))
    return ref.to_wire()


def serve_ls(service: "BlobService", call: RemoteCall) -> list[dict[str, Any]]:
    """blobs.ls: the blobs of the caller's session."""
    scope = service.session_scope(call.session_id, open_it=False)
    return [ref.to_wire() for ref in service.require_depot().refs() if ref.scope == scope]
