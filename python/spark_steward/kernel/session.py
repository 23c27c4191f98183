"""Which SparkSession is in use, and whether spark-steward is on for it.

The runtime conf of a session decides at every call, so
``spark.conf.set("spark.steward.enabled", "false")`` turns spark-steward off for that session
only; a sibling from ``spark.newSession()`` keeps its own value (it starts from the
SparkContext's conf).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from spark_steward.config import ENABLED, ConfigKey
from spark_steward.errors import SetupError

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

T = TypeVar("T")


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect session (no driver-side SparkContext)."""
    cls = type(spark)
    return cls.__module__.startswith("pyspark.sql.connect")


def connect_refusal(pyspark_version: str) -> str:
    """Why spark-steward's Python API refuses a Spark Connect session on this pyspark, and what
    to do instead (one line)."""
    if pyspark_version.split(".")[0] in ("2", "3"):
        return (f"spark-steward supports Spark Connect from Spark 4.0 on; this is pyspark "
                f"{pyspark_version}, whose Connect server is not in its pip package. Run the job "
                "with spark-submit (or pyspark) without --remote / SPARK_REMOTE, and set "
                "spark.steward.enabled=true there")
    return ("spark-steward's Python API needs a classic SparkSession; this is a Spark Connect "
            "session. Start the Connect server with the flags of `spark-steward conf --server`: "
            "it then owns what every session creates (df.checkpoint() included) with no client "
            "code; or run the job with spark-submit (or pyspark) without --remote / SPARK_REMOTE")


def require_classic(spark: Any) -> None:
    """Refuses (SetupError) a Spark Connect session, saying what to do instead."""
    if is_connect_session(spark):
        import pyspark

        raise SetupError(connect_refusal(str(pyspark.__version__)))


def context_of(spark_or_sc: Any) -> "SparkContext":
    """The SparkContext behind a SparkSession or a SparkContext."""
    from pyspark import SparkContext

    require_classic(spark_or_sc)
    if isinstance(spark_or_sc, SparkContext):
        return spark_or_sc
    sc = getattr(spark_or_sc, "sparkContext", None)
    if sc is None:
        raise SetupError(f"expected a SparkSession or SparkContext, got {type(spark_or_sc).__name__}")
    return sc  # type: ignore[no-any-return]


def session_enabled(spark: "SparkSession", context_default: bool) -> bool:
    """spark.steward.enabled in ``spark``'s runtime conf; a bad value raises ConfigError."""
    raw = spark.conf.get(ENABLED.name, None)
    if raw is None:
        return context_default
    return bool(ENABLED.parse(raw))


def session_value(spark: "SparkSession", key: "ConfigKey[T]", context_value: T) -> T:
    """``key`` from ``spark``'s runtime conf when set there, else the context's value: the
    per-session switches (``spark.conf.set``) of every capability."""
    raw = spark.conf.get(key.name, None)
    return context_value if raw is None else key.parse(raw)


def active_session() -> "SparkSession | None":
    """The session pyspark itself would use for a new UDF or RDD on this thread."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()
