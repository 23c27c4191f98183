"""Every difference between the pyspark lines spark-steward runs on, in one place.

Supported: Spark 3.5 and 4.0–4.3 (``tests/compat`` runs every capability on each line through
a real spark-submit). What differs between them, for spark-steward:

- Spark 4.0 moved the core modules under ``pyspark.core`` (``pyspark.core.context``,
  ``pyspark.core.rdd``, ``pyspark.core.files``); 3.5 has ``pyspark.context``, ``pyspark.rdd``,
  ``pyspark.files``. Each tuple below names the 4.x module first.
- Spark 4.0 made ``pyspark.sql.DataFrame`` an abstract parent of the classic (JVM-backed)
  ``pyspark.sql.classic.dataframe.DataFrame`` and Spark Connect's; on 3.5
  ``pyspark.sql.dataframe.DataFrame`` is the classic one itself.
- 4.0's and 4.1's classic DataFrame has a ``__new__(cls, jdf, sql_ctx)`` that runs ``__init__``
  itself, so a subclass cannot add constructor arguments (4.2 dropped that; 3.5 never had it).
- 3.5's ``pyspark.sql.udf`` binds ``_prepare_for_python_RDD`` by name when it is imported
  (``from pyspark.rdd import ...``), so the function every UDF command is pickled through has a
  second home there; 4.x imports it from ``pyspark.core.rdd`` at each call.

Everything else spark-steward touches reads the same on every supported line: ``TaskContext``,
``SparkFiles``, ``pyspark.cloudpickle``, ``pyspark.serializers``, py4j's gateway and the JVM
handles ``_jsc``, ``_jvm``, ``_gateway``, ``_jdf``, ``_jsparkSession``, ``_jrdd``.

This module imports no pyspark when it is imported: it only names modules, and the functions
import them when called.
"""

from __future__ import annotations

import functools
import importlib
import re
from types import ModuleType
from typing import Any

#: The pyspark lines spark-steward is tested on, for messages.
SUPPORTED_LINES = "3.5, 4.0–4.3"
#: The oldest Spark (major, minor) spark-steward attaches to.
OLDEST = (3, 5)

#: Where SparkContext is defined (the autoload hook, ``_spark_steward_autoload``, keeps a copy
#: of this tuple: it runs at every interpreter start and imports nothing; a unit test holds
#: the two equal).
CONTEXT_MODULES = ("pyspark.core.context", "pyspark.context")
#: Where RDD and ``_prepare_for_python_RDD`` are defined.
RDD_MODULES = ("pyspark.core.rdd", "pyspark.rdd")
#: Where SparkFiles is defined.
FILES_MODULES = ("pyspark.core.files", "pyspark.files")
#: Where the classic DataFrame is defined.
DATAFRAME_MODULES = ("pyspark.sql.classic.dataframe", "pyspark.sql.dataframe")
#: Modules that hold their own reference to ``_prepare_for_python_RDD``, taken by name at their
#: import on some line (3.5's ``pyspark.sql.udf``): a replacement must reach them too.
PREPARE_COMMAND_COPIES = ("pyspark.sql.udf",)


def import_first(modules: tuple[str, ...]) -> ModuleType:
    """The first of ``modules`` that imports (ImportError naming all when none does)."""
    failures = []
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            failures.append(f"{name}: {exc}")
    raise ImportError(f"this pyspark has none of {', '.join(modules)} ({'; '.join(failures)})")


def classic_dataframe_class() -> Any:
    """The DataFrame class backed by a JVM Dataset (``pyspark.sql.classic.dataframe.DataFrame``
    on 4.x, ``pyspark.sql.dataframe.DataFrame`` on 3.5)."""
    return import_first(DATAFRAME_MODULES).DataFrame


@functools.cache
def classic_dataframe_base() -> Any:
    """The classic DataFrame as a base for a subclass with constructor arguments of its own
    (``CachedTable``): built as any class is, also on 4.0 and 4.1."""
    parent = classic_dataframe_class()

    class ClassicDataFrame(parent):  # type: ignore[misc, valid-type]
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return object.__new__(cls)

    return ClassicDataFrame


def rdd_class() -> Any:
    """pyspark's RDD class."""
    return import_first(RDD_MODULES).RDD


def version_tuple(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a Spark version string (``"3.5.1"``, ``"4.1.0-SNAPSHOT"``);
    ValueError when it does not start with two numbers."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a Spark version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def unsupported_reason(version: str) -> str | None:
    """None when spark-steward runs on Spark ``version``; else one line saying it does not and
    which lines it does. Versions newer than the tested lines are let through."""
    try:
        if version_tuple(version) >= OLDEST:
            return None
    except ValueError:
        return None  # a vendor's version string: let the attach find out
    return (f"spark-steward supports Spark {SUPPORTED_LINES}; this is Spark {version.strip()}, "
            "so the application runs without spark-steward (spark.steward.enabled is ignored)")
