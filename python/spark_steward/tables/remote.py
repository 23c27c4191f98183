"""Cached tables through Spark Connect, on the client: :func:`spark_steward.cache` and
:func:`spark_steward.close` for a Connect DataFrame or session, and
:class:`ConnectCachedTable`, the table they return (answered by
:mod:`spark_steward.tables.commands` on the server)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_steward.kernel import remote_client

if TYPE_CHECKING:
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.session import SparkSession as ConnectSession


def _connect_dataframe_class() -> Any:
    from pyspark.sql.connect.dataframe import DataFrame

    return DataFrame


def cache(spark: "ConnectSession", df: Any, *, shared: bool) -> Any:
    """:func:`spark_steward.cache` of a Connect DataFrame: a ConnectCachedTable."""
    value, frame = remote_client.call(spark, "tables.cache", {"shared": bool(shared)}, df)
    if frame is None:
        return df
    return _table(frame, str(value["table_id"]))


def close(spark: "ConnectSession") -> int:
    """:func:`spark_steward.close` of a Connect session: how many tables were released."""
    value, _ = remote_client.call(spark, "tables.close", {})
    return int(value)


_table_class: Any = None


def _table(frame: "DataFrame", table_id: str) -> "DataFrame":
    """``frame`` as a :class:`ConnectCachedTable`: a subclass of pyspark's Connect DataFrame,
    made at first use (this module imports on classic drivers, which may lack the client)."""
    global _table_class
    if _table_class is None:
        _table_class = type("ConnectCachedTable", (ConnectCachedTable,
                                                   _connect_dataframe_class()),
                            {"__module__": __name__})
    table = _table_class(frame._plan, frame.sparkSession)
    table._steward_table_id = table_id
    return table  # type: ignore[no-any-return]


class ConnectCachedTable:
    """The cached table :func:`spark_steward.cache` returns for a Connect DataFrame: a Connect
    DataFrame with ``table_id``, ``is_materialized``, ``storage_key`` and ``invalidate()``, as
    :class:`~spark_steward.tables.cached_table.CachedTable` in classic; each asks the server,
    in the table's session."""

    _steward_table_id: str

    @property
    def table_id(self) -> str:
        """The id of this cache in the server's application."""
        return self._steward_table_id

    def _state(self) -> dict[str, Any]:
        spark = self.sparkSession  # type: ignore[attr-defined]
        value, _ = remote_client.call(spark, "tables.state", {"table_id": self._steward_table_id})
        return value  # type: ignore[no-any-return]

    @property
    def is_materialized(self) -> bool:
        """Whether the result is in the storage dir now."""
        return bool(self._state()["materialized"])

    @property
    def storage_key(self) -> str | None:
        """The key of the materialized result in the storage dir, None before the first use."""
        key = self._state()["storage_key"]
        return None if key is None else str(key)

    def invalidate(self) -> None:
        """Deletes the materialized files now; the next use materializes the table again."""
        spark = self.sparkSession  # type: ignore[attr-defined]
        remote_client.call(spark, "tables.invalidate", {"table_id": self._steward_table_id})

    def __repr__(self) -> str:
        return f"ConnectCachedTable[{self._steward_table_id}]"
