"""(c) spark.steward.enabled in a session's runtime conf switches that session only."""

from __future__ import annotations

from typing import Any

import pytest

import spark_steward
from spark_steward.errors import ConfigError, DisabledForSession


def _context_seen_by_udf(session: Any) -> set[Any]:
    from pyspark.sql.functions import udf

    @udf("string")
    def app_of_task(_: int) -> str | None:
        from spark_steward.kernel import executor

        ctx = executor.current_context()
        return ctx.app_id if ctx else None

    # createDataFrame makes `session` the active one: the session pyspark binds new UDFs to.
    df = session.createDataFrame([(i,) for i in range(4)], ["x"])
    return {r[0] for r in df.select(app_of_task("x")).collect()}


def test_one_session_off_leaves_siblings_on(spark: Any, runtime: Any) -> None:
    off = spark.newSession()
    off.conf.set("spark.steward.enabled", "false")
    sibling = spark.newSession()
    try:
        assert not spark_steward.is_enabled(off)
        assert spark_steward.is_enabled(spark)
        assert spark_steward.is_enabled(sibling)
        with pytest.raises(DisabledForSession, match="spark.steward.enabled=false"):
            spark_steward.runtime(off)
        # Worker reuse is on: the same Python workers run all three jobs, so a context left
        # from an enabled task must not leak into the off session's tasks.
        assert _context_seen_by_udf(sibling) == {runtime.app_id}
        assert _context_seen_by_udf(off) == {None}
        assert _context_seen_by_udf(spark) == {runtime.app_id}
    finally:
        spark.createDataFrame([(1,)], ["x"])  # make the default session active again


def test_turning_a_session_back_on(spark: Any) -> None:
    other = spark.newSession()
    other.conf.set("spark.steward.enabled", "false")
    assert not spark_steward.is_enabled(other)
    other.conf.set("spark.steward.enabled", "true")
    assert spark_steward.is_enabled(other)


def test_bad_session_value_names_key_and_value(spark: Any) -> None:
    other = spark.newSession()
    other.conf.set("spark.steward.enabled", "maybe")
    with pytest.raises(ConfigError) as info:
        spark_steward.is_enabled(other)
    message = str(info.value)
    assert "spark.steward.enabled" in message and "'maybe'" in message and "\n" not in message
