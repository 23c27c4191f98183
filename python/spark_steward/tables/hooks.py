"""Transparent cached tables: with ``spark.steward.cache.transparent=true`` (per session),
``df.cache()`` and ``df.persist()`` in an unmodified job put the DataFrame on the spark-steward
path and ``df.unpersist()`` invalidates it. Also makes ``explain()`` plan without materializing.

``df.cache()`` returns ``df`` itself in Spark, and jobs go on using ``df``: the hook turns that
same object into a reader of the cached table (its JVM DataFrame becomes the table's marker).
DataFrames derived from ``df`` *before* the call keep computing the original plan. Its
``storageLevel`` is the level Spark would report: the one ``persist`` was given, and
``MEMORY_AND_DISK_DESER`` (``Disk Memory Deserialized 1x Replicated``) after ``cache()``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from pyspark.storagelevel import StorageLevel

from spark_steward.tables.config_keys import CACHE_TRANSPARENT
from spark_steward.kernel import jvm, patches
from spark_steward.kernel.session import session_value
from spark_steward.tables.cached_table import CachedTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_steward.tables.service import TableService

log = logging.getLogger(__name__)

EXPLAIN_PROPERTY = "spark.steward.cache.explain"


_service: "TableService | None" = None


def transparent_service(df: "DataFrame") -> "TableService | None":
    """The table service when transparent caching is on for ``df``'s session."""
    service = _service
    runtime = service.runtime if service is not None else None
    if runtime is None or runtime.stopped or not jvm.is_classic(df):
        return None
    session = df.sparkSession
    if not runtime.enabled_for(session):
        return None
    on = session_value(session, CACHE_TRANSPARENT, runtime.conf.get(CACHE_TRANSPARENT))
    return service if on else None


def _service_of(df: "DataFrame") -> "TableService | None":
    """The table service of the attached runtime once a table was cached, else None."""
    service = _service
    if service is None or service.runtime is None or service.runtime.stopped \
            or not jvm.is_classic(df):
        return None
    return service if service.has_tables() else None


class TransparentlyCachedTable(CachedTable):
    """A DataFrame that ``cache()`` or ``persist()`` put on the spark-steward path: a
    :class:`CachedTable` that reports the storage level it was asked for, as Spark would
    (the marker's own JVM level is NONE)."""

    @property
    def storageLevel(self) -> StorageLevel:  # noqa: N802 - pyspark's name
        level: StorageLevel = self.__dict__["_steward_storage_level"]
        return StorageLevel(level.useDisk, level.useMemory, level.useOffHeap,
                            level.deserialized, level.replication)


def _steward_cache(df: "DataFrame",
                   storageLevel: StorageLevel = StorageLevel.MEMORY_AND_DISK_DESER) -> bool:
    """Turns ``df`` itself into a :class:`TransparentlyCachedTable` at ``storageLevel``
    (``persist``'s argument and default, which is also what ``cache()`` means); False when it
    stays with Spark. An already cached ``df`` keeps its level, as in Spark."""
    if isinstance(df, CachedTable):
        return True
    if not isinstance(storageLevel, StorageLevel):
        return False  # Spark's persist names the bad argument
    service = transparent_service(df)
    if service is None or df.isStreaming:
        return False
    record, marker = service.register(df, shared=False)
    state = df.__dict__
    state["_steward_original"] = (df.__class__, jvm.pop_dataframe_handle(df))
    state["_lazy_rdd"] = None
    df.__class__ = TransparentlyCachedTable
    state.update(_steward_service=service, _steward_record=record, _steward_marker=marker,
                 _steward_storage_level=storageLevel)
    service.hold(record, df)
    return True


def _steward_unpersist(df: "DataFrame", *args: Any, **kwargs: Any) -> bool:
    """Invalidates a transparently cached ``df`` and gives it its original plan back."""
    original = df.__dict__.get("_steward_original")
    if original is None:
        return False
    df._steward_service.invalidate(df._steward_record)  # type: ignore[attr-defined,operator]
    state = df.__dict__
    for name in ("_steward_original", "_steward_service", "_steward_record",
                 "_steward_marker", "_steward_storage_level"):
        state.pop(name, None)
    df.__class__, handle = original
    jvm.put_dataframe_handle(df, handle)
    state["_lazy_rdd"] = None
    return True


def _take_over(call: str, before: Callable[..., bool]) -> Callable[..., Any]:
    """The handler of ``DataFrame.<call>``: ``before``, given the call's arguments, decides
    whether spark-steward serves it."""
    cached = call != "unpersist"

    def handler(proceed: Callable[..., Any], df: "DataFrame", *args: Any, **kwargs: Any) -> Any:
        try:
            handled = before(df, *args, **kwargs)
        except Exception as exc:  # never fail a user's cache() for us: Spark's path still works
            log.warning("spark-steward could not take over %s(): %s; using Spark's", call, exc)
            handled = False
        if handled:
            df.is_cached = cached
            return df
        return proceed(df, *args, **kwargs)

    return handler


def _explain_handler(proceed: Callable[..., Any], df: "DataFrame", *args: Any,
                     **kwargs: Any) -> Any:
    service = _service_of(df)
    if service is None:
        return proceed(df, *args, **kwargs)
    # Explain a copy: Spark keeps the plan it optimizes for a DataFrame's later actions,
    # and an explained plan reads tables not yet materialized from their original plans.
    copy = jvm.to_dataframe(service.fresh(jvm.dataframe_handle(df)), df.sparkSession)
    sc = df.sparkSession.sparkContext
    before = sc.getLocalProperty(EXPLAIN_PROPERTY)
    sc.setLocalProperty(EXPLAIN_PROPERTY, "true")
    try:
        return proceed(copy, *args, **kwargs)
    finally:
        sc.setLocalProperty(EXPLAIN_PROPERTY, before or "false")


def install(service: "TableService") -> None:
    """The table service's driver hook (``TableService.driver_hooks``): the classic
    DataFrame's cache, persist, unpersist and explain, served by ``service``."""
    global _service
    _service = service
    patches.intercept("DataFrame.cache", "tables", _take_over("cache", _steward_cache))
    patches.intercept("DataFrame.persist", "tables", _take_over("persist", _steward_cache))
    patches.intercept("DataFrame.unpersist", "tables",
                      _take_over("unpersist", _steward_unpersist))
    patches.intercept("DataFrame.explain", "tables", _explain_handler)
