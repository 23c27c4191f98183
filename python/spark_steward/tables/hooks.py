"""Transparent cached tables: with ``spark.steward.cache.transparent=true`` (per session),
``df.cache()`` and ``df.persist()`` in an unmodified job put the DataFrame on the spark-steward
path and ``df.unpersist()`` invalidates it. Also makes ``explain()`` plan without materializing.

``df.cache()`` returns ``df`` itself in Spark, and jobs go on using ``df``: the hook turns that
same object into a reader of the cached table (its JVM DataFrame becomes the table's marker).
DataFrames derived from ``df`` *before* the call keep computing the original plan.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from spark_steward.config import CACHE_TRANSPARENT
from spark_steward.kernel.session import session_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_steward.tables.service import TableService

log = logging.getLogger(__name__)

EXPLAIN_PROPERTY = "spark.steward.cache.explain"
_lock = threading.Lock()
_installed = False


def transparent_service(df: "DataFrame") -> "TableService | None":
    """The table service when transparent caching is on for ``df``'s session."""
    from spark_steward.kernel.runtime import current_runtime

    runtime = current_runtime()
    if runtime is None or getattr(df, "_jdf", None) is None:
        return None
    session = df.sparkSession
    if not runtime.enabled_for(session):
        return None
    on = session_value(session, CACHE_TRANSPARENT, runtime.conf.get(CACHE_TRANSPARENT))
    return runtime.service("tables") if on else None


def _service_of(df: "DataFrame") -> "TableService | None":
    """The table service of the attached runtime once a table was cached, else None."""
    from spark_steward.kernel.runtime import current_runtime

    runtime = current_runtime()
    if runtime is None or getattr(df, "_jdf", None) is None:
        return None
    service: TableService = runtime.service("tables")
    return service if service.has_tables() else None


def _steward_cache(df: "DataFrame") -> bool:
    """Turns ``df`` itself into a :class:`CachedTable`; False when it stays with Spark."""
    from spark_steward.tables.cached_table import CachedTable

    if isinstance(df, CachedTable):
        return True
    service = transparent_service(df)
    if service is None or df.isStreaming:
        return False
    record, marker = service.register(df, shared=False)
    state = df.__dict__
    state["_steward_original"] = (df.__class__, state.pop("_jdf"))
    state["_lazy_rdd"] = None
    df.__class__ = CachedTable
    state.update(_steward_service=service, _steward_record=record, _steward_marker=marker)
    service.hold(record, df)
    return True


def _steward_unpersist(df: "DataFrame") -> bool:
    """Invalidates a transparently cached ``df`` and gives it its original plan back."""
    original = df.__dict__.get("_steward_original")
    if original is None:
        return False
    df._steward_service.invalidate(df._steward_record)  # type: ignore[attr-defined,operator]
    state = df.__dict__
    for name in ("_steward_original", "_steward_service", "_steward_record",
                 "_steward_marker"):
        state.pop(name, None)
    df.__class__, state["_jdf"] = original
    state["_lazy_rdd"] = None
    return True


def _wrap(original: Callable[..., Any], before: Callable[..., bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(self: "DataFrame", *args: Any, **kwargs: Any) -> Any:
        try:
            handled = before(self)
        except Exception as exc:  # never fail a user's cache() for us: Spark's path still works
            log.warning("spark-steward could not take over %s(): %s; using Spark's",
                        original.__name__, exc)
            handled = False
        if handled:
            self.is_cached = original.__name__ != "unpersist"
            return self
        return original(self, *args, **kwargs)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _explain_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def explain(self: "DataFrame", *args: Any, **kwargs: Any) -> Any:
        service = _service_of(self)
        if service is None:
            return original(self, *args, **kwargs)
        from pyspark.sql.classic.dataframe import DataFrame

        # Explain a copy: Spark keeps the plan it optimizes for a DataFrame's later actions,
        # and an explained plan reads tables not yet materialized from their original plans.
        copy = DataFrame(service.fresh(self._jdf), self.sparkSession)
        sc = self.sparkSession.sparkContext
        before = sc.getLocalProperty(EXPLAIN_PROPERTY)
        sc.setLocalProperty(EXPLAIN_PROPERTY, "true")
        try:
            return original(copy, *args, **kwargs)
        finally:
            sc.setLocalProperty(EXPLAIN_PROPERTY, before or "false")

    explain.__wrapped__ = original  # type: ignore[attr-defined]
    return explain


def install_table_hooks() -> None:
    """Wraps the classic DataFrame's cache, persist, unpersist and explain (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from pyspark.sql.classic.dataframe import DataFrame

        DataFrame.cache = _wrap(DataFrame.cache, _steward_cache)  # type: ignore[method-assign]
        DataFrame.persist = _wrap(DataFrame.persist, _steward_cache)  # type: ignore[method-assign]
        DataFrame.unpersist = _wrap(DataFrame.unpersist,  # type: ignore[method-assign]
                                    _steward_unpersist)
        DataFrame.explain = _explain_wrapper(DataFrame.explain)  # type: ignore[method-assign]
        _installed = True
