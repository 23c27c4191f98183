"""spark-steward: owners, verified identities and retried cleanup for everything a Spark
application creates.

Enable it with conf flags alone (``spark-steward conf --storage URL`` prints them); existing
PySpark jobs run unchanged. :func:`attach` is the explicit twin for notebooks and tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_steward._version import __version__

if TYPE_CHECKING:
    from pyspark import RDD
    from contextlib import AbstractContextManager as ContextManager
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession

    from spark_steward.blob.service import Scope
    from spark_steward.checkpoint.service import CheckpointSeries
    from spark_steward.kernel.runtime import DriverRuntime

__all__ = ["__version__", "attach", "detach", "runtime", "is_enabled", "bootstrap", "jar_path",
           "blobs", "local", "streams", "scope", "checkpoints", "cache", "close"]

#: Public modules reached as attributes, imported on first use: a plain job that only imports
#: spark_steward never pays for them (``spark_steward.blobs.put``, ``spark_steward.local.state``).
_LAZY_MODULES = {"blobs": "spark_steward.blobs", "local": "spark_steward.local",
                 "streams": "spark_steward.streams"}


def __getattr__(name: str) -> "ModuleType":
    target = _LAZY_MODULES.get(name)
    if target is None:
        raise AttributeError(f"module 'spark_steward' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(target)
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def scope(name: str) -> "ContextManager[Scope]":
    """Opens a named owner scope on this thread for blobs and the Spark jobs submitted in it.

    >>> with spark_steward.scope("nightly") as s:       # doctest: +SKIP
    ...     ref = spark_steward.blobs.put(path)
    ...     df.count()
    ... # closed: its blobs are deleted once its last job has ended

    Jobs submitted on this thread while it is open carry its id (the local property
    ``spark.steward.scope``); blobs put meanwhile belong to it. When the scope is closed and
    its last job has ended, its blobs are deleted at once, locally and in HA, whatever their
    reference counts say.
    """
    from contextlib import contextmanager

    from spark_steward.blob.service import BlobService

    service = runtime().service(BlobService)
    return contextmanager(service.scoped)(name)


def checkpoints(name: str, retained: int | None = None,
                spark: "SparkSession | None" = None) -> "CheckpointSeries":
    """A named series of DataFrame checkpoints in the storage dir.

    >>> cp = spark_steward.checkpoints("pagerank")      # doctest: +SKIP
    >>> ranks_id = cp.save(ranks)        # written by the executors, then completed
    >>> ranks = cp.latest()              # also in a later application

    ``retained`` (default ``spark.steward.checkpoints.retained``) completed checkpoints are
    kept; older ones are subsumed and deleted, repeatably, on the cleanup pool.
    """
    from spark_steward.checkpoint.service import CheckpointSeries

    return CheckpointSeries(name, retained, spark)


def cache(df: "DataFrame", *, shared: bool = False) -> "DataFrame":
    """``df`` as a cached table: computed once, at its first use, into the storage dir.

    >>> t = spark_steward.cache(df)          # doctest: +SKIP  (nothing runs yet)
    >>> t.count()                          # materializes: the plan is written as Parquet
    >>> t.groupBy("k").count().show()      # reads the Parquet files, not the plan
    >>> t.invalidate()                     # deletes the files; the next use recomputes

    The result is a DataFrame (a :class:`~spark_steward.tables.cached_table.CachedTable`); every
    query built on it reads the materialized files once they exist. Missing or changed files
    are recomputed from the original plan. With ``shared=True`` the result is keyed by the plan
    and the identity of its input files, and other applications computing the same plan over
    the same inputs reuse it. A streaming DataFrame is returned unchanged.
    """
    from spark_steward.tables.cached_table import cache as _cache

    return _cache(df, shared=shared)


def close(spark: "SparkSession | None" = None) -> int:
    """Releases every table cached in ``spark`` (the active session if None) physically, like
    FLIP-36's ``TableEnvironment.close()``; ``spark.stop()`` does this for every session.
    Returns how many tables were released."""
    from spark_steward.tables.cached_table import close as _close

    return _close(spark)


def attach(spark: Any = None) -> "DriverRuntime":
    """Attaches spark-steward to ``spark`` (SparkSession or SparkContext; the active one if None).

    >>> import spark_steward
    >>> rt = spark_steward.attach(spark)   # doctest: +SKIP
    """
    from spark_steward.kernel.runtime import attach as _attach

    return _attach(spark, explicit=True)


def detach() -> None:
    """Detaches from the current SparkContext (``spark.stop()`` does this for you)."""
    from spark_steward.kernel.runtime import detach as _detach

    _detach()


def runtime(spark: "SparkSession | None" = None) -> "DriverRuntime":
    """The attached runtime, checked to be enabled for ``spark`` (the active session if None)."""
    from spark_steward.kernel.runtime import runtime_for

    return runtime_for(spark)


def is_enabled(spark: "SparkSession | None" = None) -> bool:
    """True when spark-steward is attached and on for ``spark`` (the active session if None)."""
    from spark_steward.kernel.runtime import current_runtime

    current = current_runtime()
    return current is not None and current.enabled_for(spark)


def bootstrap(data: "RDD[Any] | DataFrame") -> "RDD[Any]":
    """``data`` as an RDD whose tasks start the executor runtime first (explicit bootstrap)."""
    from spark_steward.kernel.bootstrap import bootstrap as _bootstrap

    rdd: Any = data if hasattr(data, "mapPartitions") else data.rdd  # type: ignore[union-attr]
    spark = getattr(data, "sparkSession", None)
    broadcast = runtime(spark).context_broadcast
    assert broadcast is not None, "the runtime broadcasts its context when it starts"
    return _bootstrap(rdd, broadcast)


def jar_path() -> str:
    """Path of the JVM shim jar, for ``spark.jars`` (what ``spark-steward jar`` prints)."""
    from spark_steward.kernel.shim import jar_path as _jar_path

    return str(_jar_path())
