"""Clear messages for environments spark-steward cannot run in."""

from __future__ import annotations

import types

import pytest

from spark_steward.errors import NotAttached, SetupError
from spark_steward.kernel import session
from spark_steward.kernel.jvm import SparkJvm


def _connect_like_session() -> object:
    module = types.ModuleType("pyspark.sql.connect.session")
    cls = type("SparkSession", (), {"__module__": module.__name__})
    return cls()


def test_spark_connect_session_is_refused_with_what_to_do() -> None:
    with pytest.raises(SetupError) as info:
        session.context_of(_connect_like_session())
    assert "Spark Connect" in str(info.value) and "spark-submit" in str(info.value)


def test_attach_refuses_spark_connect() -> None:
    import spark_steward

    with pytest.raises(SetupError, match="Spark Connect"):
        spark_steward.attach(_connect_like_session())


def test_a_stopped_context_has_no_jvm() -> None:
    stopped = types.SimpleNamespace(_jsc=None, _jvm=None)
    with pytest.raises(SetupError, match="no JVM"):
        SparkJvm(stopped)  # type: ignore[arg-type]


def test_runtime_without_attach_says_how_to_enable(monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_steward
    from spark_steward.kernel import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "_current", None)
    with pytest.raises(NotAttached, match="spark.steward.enabled=true"):
        spark_steward.runtime()
    assert not spark_steward.is_enabled()


@pytest.mark.parametrize("version, says", [
    ("3.5.9", "from Spark 4.0 on"), ("3.4.4", "from Spark 4.0 on"),
    ("4.0.5", "spark-steward conf --server"), ("4.3.0", "spark-steward conf --server")])
def test_a_connect_session_is_refused_with_one_line_for_its_line(version: str, says: str) -> None:
    line = session.connect_refusal(version)
    assert says in line and "\n" not in line and "spark-submit" in line


def test_every_explicit_call_refuses_a_connect_session_before_asking_for_a_runtime() -> None:
    from spark_steward.kernel.runtime import runtime_for

    with pytest.raises(SetupError, match="Spark Connect"):
        runtime_for(_connect_like_session())  # not NotAttached: that would mislead
