"""kernel.compat: the one place where pyspark lines differ, and the guard at attach for a Spark
older than the supported lines. The lines themselves run in tests/compat."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import pytest

import _spark_steward_autoload
from spark_steward.errors import SetupError
from spark_steward.kernel import compat, patches, runtime
from spark_steward.kernel.patches import PatchPoint


def test_the_autoload_hook_waits_for_the_modules_compat_names() -> None:
    assert _spark_steward_autoload._TARGETS == compat.CONTEXT_MODULES


@pytest.mark.parametrize("version,expected", [
    ("3.5.0", (3, 5)), ("4.3.0", (4, 3)), ("4.1.0-SNAPSHOT", (4, 1)), (" 3.4.4 ", (3, 4)),
    ("10.0.1", (10, 0))])
def test_version_tuple_reads_major_and_minor(version: str, expected: tuple[int, int]) -> None:
    assert compat.version_tuple(version) == expected


@pytest.mark.parametrize("version", ["3.5.0", "3.5.9", "4.0.5", "4.3.0", "4.4.0-SNAPSHOT",
                                     "vendor-build"])
def test_supported_and_unknown_versions_attach(version: str) -> None:
    assert compat.unsupported_reason(version) is None


@pytest.mark.parametrize("version", ["3.4.4", "3.3.0", "2.4.8"])
def test_older_versions_get_one_line_naming_the_supported_lines(version: str) -> None:
    reason = compat.unsupported_reason(version)
    assert reason is not None and "\n" not in reason
    assert "3.5, 4.0–4.3" in reason and f"Spark {version}" in reason


def test_the_classes_are_this_pysparks_own() -> None:
    from pyspark import RDD
    from pyspark.sql.classic.dataframe import DataFrame  # the installed line is 4.x

    assert compat.classic_dataframe_class() is DataFrame
    assert compat.rdd_class() is RDD


class _DataFrame40:
    """4.0's and 4.1's classic DataFrame: ``__new__`` takes (jdf, sql_ctx) and runs __init__."""

    def __new__(cls, jdf: Any, sql_ctx: Any) -> Any:
        self = object.__new__(cls)
        self.__init__(jdf, sql_ctx)  # type: ignore[misc]
        return self

    def __init__(self, jdf: Any, sql_ctx: Any) -> None:
        self._jdf, self.sparkSession = jdf, sql_ctx


@pytest.mark.parametrize("parent", [None, _DataFrame40], ids=["installed", "4.0-style"])
def test_a_dataframe_subclass_can_take_arguments_of_its_own(
        monkeypatch: pytest.MonkeyPatch, parent: Any) -> None:
    if parent is not None:
        monkeypatch.setattr(compat, "classic_dataframe_class", lambda: parent)
    base = compat.classic_dataframe_base.__wrapped__()

    inits = []

    class Table(base):  # type: ignore[misc, valid-type]
        def __init__(self, jdf: Any, session: Any, service: str, record: str) -> None:
            inits.append((jdf, session, service, record))

    table = Table("jdf", "session", "service", "record")
    assert inits == [("jdf", "session", "service", "record")], "__init__ ran once, with all"
    assert isinstance(table, parent or compat.classic_dataframe_class()), type(table).__mro__


def test_import_first_names_every_module_it_tried() -> None:
    with pytest.raises(ImportError, match="no_such_a.*no_such_b"):
        compat.import_first(("no_such_a", "no_such_b"))


# -- a module function another module took by name (3.5's pyspark.sql.udf) ----------------------

def _prepare(command: str) -> str:
    return f"pickled:{command}"


def test_a_copy_taken_by_name_gets_the_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    home, copy = types.ModuleType("fake_rdd"), types.ModuleType("fake_udf")
    home._prepare = copy._prepare = _prepare  # type: ignore[attr-defined]
    for module in (home, copy):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    point = PatchPoint("prepare", ("fake_rdd",), None, "_prepare",
                       copies=("fake_udf", "fake_late"))
    monkeypatch.setattr(patches, "POINTS", (point,))
    monkeypatch.setattr(patches, "_BY_NAME", {point.name: point})
    monkeypatch.setattr(patches, "_handlers", {})
    monkeypatch.setattr(patches, "_installed", {})
    patches.intercept("prepare", "x", lambda proceed, c: proceed(c + "+carried"))
    patches.install()
    assert home._prepare("c") == copy._prepare("c") == "pickled:c+carried"  # type: ignore
    assert "fake_late" not in sys.modules, "a copy not imported yet is left to its own import"


# -- the guard at attach ------------------------------------------------------------------------

def _session_of(version: str) -> Any:
    return types.SimpleNamespace(sparkContext=types.SimpleNamespace(version=version))


def test_older_spark_runs_without_spark_steward_after_one_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(runtime, "_warned_unsupported", False)
    with caplog.at_level(logging.WARNING, logger="spark_steward"):
        assert runtime.attach(_session_of("3.4.1"), explicit=False) is None
        assert runtime.attach(_session_of("3.4.1"), explicit=False) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "supports Spark 3.5, 4.0–4.3" in lines[0], lines
    assert runtime.current_runtime() is None


def test_an_explicit_attach_to_older_spark_raises_the_same_line() -> None:
    import spark_steward

    with pytest.raises(SetupError, match=r"supports Spark 3\.5, 4\.0–4\.3; this is Spark 3\.3"):
        spark_steward.attach(_session_of("3.3.2"))
