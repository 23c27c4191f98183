"""Streaming checkpoint locations through Spark Connect, on the client: ``streams.ls`` /
``drop`` / ``unpack`` against the Connect server's storage dir (answered by
:mod:`spark_steward.streams.commands`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_steward.kernel import remote_client
from spark_steward.streams.lifecycle.locations import StreamRecord, StreamState
from spark_steward.streams.location import Survey
from spark_steward.streams.store import DropResult, StreamStatus, UnpackResult

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession


def ls(spark: "ConnectSession", files: bool) -> list[StreamStatus]:
    """:func:`spark_steward.streams.ls` against the Connect server."""
    value, _ = remote_client.call(spark, "streams.ls", {"files": bool(files)})
    return [StreamStatus(StreamRecord.from_json(item["record"]), StreamState(item["state"]),
                         item["liveness"],
                         None if item["survey"] is None else Survey(**item["survey"]),
                         item["problem"])
            for item in value]


def drop(spark: "ConnectSession", name: str) -> DropResult:
    """:func:`spark_steward.streams.drop` against the Connect server."""
    value, _ = remote_client.call(spark, "streams.drop", {"name": name})
    return DropResult(**value)


def unpack(spark: "ConnectSession", name: str) -> UnpackResult:
    """:func:`spark_steward.streams.unpack` against the Connect server."""
    value, _ = remote_client.call(spark, "streams.unpack", {"name": name})
    return UnpackResult(**value)
