"""Blobs through Spark Connect, on the client: :func:`spark_steward.blobs.put` (and
``offload``, ``ls``) against the Connect server's blob service (answered by
:mod:`spark_steward.blob.commands`). The bytes travel in the command, so a put is bounded by
:data:`MAX_BYTES`; tasks of the session read blobs from their host's cache as in classic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from spark_steward.blob.keys import BlobRef
from spark_steward.errors import StewardError
from spark_steward.kernel import remote_client

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

#: The largest blob put through a Connect command (Spark Connect's own inbound limit,
#: ``spark.connect.grpc.maxInboundMessageSize``, is 128 MiB by default).
MAX_BYTES = 64 << 20


def put(spark: "ConnectSession",
        source: "str | os.PathLike[str] | bytes | bytearray | memoryview",
        kind: str, receivers: int, name: str | None) -> BlobRef:
    """Uploads ``source`` (a file or bytes) as a blob of the session; its ref."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        size = memoryview(source).nbytes
        label = "the bytes"
    else:
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise StewardError(f"spark_steward.blobs.put: cannot read {path}: {exc.strerror}") \
                from None
        label = str(path)
        name = name if name is not None else path.name
    if size > MAX_BYTES:
        raise StewardError(f"spark_steward.blobs.put: {label} ({size} bytes) is larger than "
                           f"the {MAX_BYTES >> 20} MiB a blob can be through Spark Connect; "
                           "ship it with spark.addArtifacts(path, file=True), or put it from "
                           "a classic driver")
    data = bytes(source) if isinstance(source, (bytes, bytearray, memoryview)) \
        else Path(source).read_bytes()
    value, _ = remote_client.call(spark, "blobs.put", {"kind": kind, "receivers": receivers,
                                                       "name": name or ""}, data=data)
    return BlobRef.from_wire(value)


def ls(spark: "ConnectSession") -> list[BlobRef]:
    """The blobs this Connect session put."""
    value, _ = remote_client.call(spark, "blobs.ls", {})
    return [BlobRef.from_wire(item) for item in value]
