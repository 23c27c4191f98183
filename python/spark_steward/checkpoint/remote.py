"""Checkpoint series through Spark Connect, on the client: what :class:`~spark_steward.
checkpoint.service.CheckpointSeries` sends when its DataFrame or session is a Connect one
(answered by :mod:`spark_steward.checkpoint.commands` on the server)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_steward.kernel import remote_client

if TYPE_CHECKING:
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.session import SparkSession as ConnectSession


def _args(series: str, retained: int | None, **more: Any) -> dict[str, Any]:
    return {"series": series, "retained": retained, **more}


def save(spark: "ConnectSession", series: str, retained: int | None, df: Any) -> int:
    """Saves ``df`` (a Connect DataFrame) into ``series`` on the server; the new id."""
    value, _ = remote_client.call(spark, "checkpoints.save", _args(series, retained), df)
    return int(value)


def read(spark: "ConnectSession", series: str, checkpoint_id: int | None) -> "DataFrame":
    """The latest checkpoint (``checkpoint_id`` None) or the one named."""
    if checkpoint_id is None:
        _, frame = remote_client.call(spark, "checkpoints.latest", _args(series, None))
    else:
        _, frame = remote_client.call(spark, "checkpoints.restore",
                                      _args(series, None, id=int(checkpoint_id)))
    assert frame is not None, "the server answers a read with a DataFrame"
    return frame


def ls(spark: "ConnectSession", series: str) -> list[dict[str, Any]]:
    """The series' checkpoints as CheckpointInfo's fields."""
    value, _ = remote_client.call(spark, "checkpoints.ls", _args(series, None))
    return list(value)


def drop(spark: "ConnectSession", series: str) -> list[int]:
    """Discards ``series``' completed checkpoints on the server; their ids."""
    value, _ = remote_client.call(spark, "checkpoints.drop", _args(series, None))
    return [int(n) for n in value]
