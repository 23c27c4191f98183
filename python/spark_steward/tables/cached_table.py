"""CachedTable: the DataFrame :func:`spark_steward.cache` returns (FLIP-36's CachedTable).

It is an ordinary DataFrame over a marker of the table, so every DataFrame method works and
returns DataFrames; queries built on it read the materialized Parquet once the table is
materialized (see :mod:`spark_steward.tables.service` for when that happens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_steward.tables.errors import CacheError
from spark_steward.errors import StewardError
from spark_steward.kernel import jvm, remote_client
from spark_steward.kernel.compat import classic_dataframe_base
from spark_steward.kernel.runtime import current_runtime, runtime_for
from spark_steward.tables import remote as remote_tables
from spark_steward.tables.service import TableService

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as AnyDataFrame
    from pyspark.sql import SparkSession

    from spark_steward.tables.service import CatalogRecord


#: pyspark's classic DataFrame class of this Spark line (see spark_steward.kernel.compat).
DataFrame: Any = classic_dataframe_base()


class CachedTable(DataFrame):
    """A DataFrame whose result is materialized once, at its first use, and then read from the
    storage dir by every query built on it. :meth:`invalidate` releases the files."""

    def __init__(self, jdf: Any, session: "SparkSession", service: "TableService",
                 record: "CatalogRecord") -> None:
        self._steward_service = service
        self._steward_record = record
        super().__init__(jdf, session)
        service.hold(record, self)

    # pyspark's DataFrame reads ``self._jdf`` internally: the one definition of that handle
    # outside spark_steward.kernel.jvm. It only stores and refreshes the marker handle.
    @property  # type: ignore[override]
    def _jdf(self) -> Any:
        """A fresh JVM DataFrame over the marker at every use: Spark would otherwise keep the
        plan of this DataFrame's first action (files of a since invalidated attempt)."""
        return self._steward_service.fresh(self._steward_marker)

    @_jdf.setter
    def _jdf(self, jdf: Any) -> None:
        self._steward_marker = jdf

    @property
    def table_id(self) -> str:
        """The id of this cache in this application (shown in log lines and the plan)."""
        return self._steward_record.table_id

    @property
    def is_materialized(self) -> bool:
        """Whether the result is in the storage dir now (it may still fail verification)."""
        return self._steward_record.entry is not None

    @property
    def storage_key(self) -> str | None:
        """The key of the materialized result in the storage dir (``spark-steward cache ls``),
        None before the first use."""
        entry = self._steward_record.entry
        return None if entry is None else entry.key

    def invalidate(self) -> None:
        """Deletes the materialized files now; the next use materializes the table again."""
        self._steward_service.invalidate(self._steward_record)

    def __repr__(self) -> str:
        state = "materialized" if self.is_materialized else "not materialized"
        return f"CachedTable[{self.table_id}, {state}]({', '.join(self.columns)})"


def cache(df: "AnyDataFrame", *, shared: bool = False) -> "AnyDataFrame":
    """``df`` as a :class:`CachedTable` (``df`` itself if it is one, or a streaming DataFrame)."""
    if isinstance(df, CachedTable):
        return df
    if not jvm.is_classic(df):
        return remote_tables.cache(_connect_session(df), df, shared=bool(shared))
    if df.isStreaming:
        return df
    runtime = runtime_for(df.sparkSession)
    service = runtime.service(TableService)
    record, marker = service.register(df, shared=bool(shared))  # type: ignore[arg-type]
    return CachedTable(marker, df.sparkSession, service, record)


def _connect_session(df: Any) -> Any:
    """The Connect session of a DataFrame that is not classic; CacheError with the one-line
    refusal where the thin client cannot serve it."""
    try:
        remote = remote_client.connect_session(df)
    except StewardError as exc:
        raise CacheError(f"spark_steward.cache: {exc}") from None
    if remote is None:
        raise CacheError(f"spark_steward.cache: {type(df).__name__} is not a DataFrame of a "
                         "SparkSession")
    return remote


def close(spark: "SparkSession | None" = None) -> int:
    """Releases every table cached in ``spark`` (the active session if None) physically."""
    from pyspark.sql import SparkSession

    remote = remote_client.connect_session(spark)
    if remote is not None:
        return remote_tables.close(remote)
    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise CacheError("no active SparkSession to close the cached tables of")
    runtime = current_runtime()
    if runtime is None:
        return 0
    service = runtime.service(TableService)
    return service.close_session(jvm.session_uuid(session))
