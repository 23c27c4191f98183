"""kernel.patches: one replacement per pyspark attribute, handlers chained in declared order,
Spark's own reachable as ``__wrapped__``. Run against a stand-in module, so nothing in pyspark
is touched; the last test checks every real point exists in the installed pyspark."""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

import pytest

from spark_steward.errors import SetupError
from spark_steward.kernel import patches
from spark_steward.kernel.patches import PatchPoint

FAKE = "steward_fake_pyspark"


class Context:
    """A stand-in for a pyspark class."""

    def add(self, path: str, recursive: bool = False) -> str:
        """Spark's own add."""
        return f"spark:{path}:{recursive}"

    @classmethod
    def get(cls, name: str) -> str:
        return f"spark-get:{cls.__name__}:{name}"


def prepare(command: str) -> str:
    return f"pickled:{command}"


@pytest.fixture
def points(monkeypatch: pytest.MonkeyPatch) -> tuple[PatchPoint, ...]:
    module = types.ModuleType(FAKE)
    fresh = type("Context", (), {"add": Context.add, "get": Context.get})
    module.Context = fresh  # type: ignore[attr-defined]
    module.prepare = prepare  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, FAKE, module)
    table = (PatchPoint("Context.add", ("no_such_module", FAKE), "Context", "add"),
             PatchPoint("Context.get", (FAKE,), "Context", "get", is_classmethod=True),
             PatchPoint("prepare", (FAKE,), None, "prepare"))
    monkeypatch.setattr(patches, "POINTS", table)
    monkeypatch.setattr(patches, "_BY_NAME", {p.name: p for p in table})
    monkeypatch.setattr(patches, "_handlers", {})
    monkeypatch.setattr(patches, "_installed", {})
    return table


def tagging(tag: str) -> Callable[..., Any]:
    def handler(proceed: Callable[..., Any], ctx: Any, path: str, *args: Any, **kw: Any) -> Any:
        return f"{tag}({proceed(ctx, path + '+' + tag, *args, **kw)})"

    return handler


def fake() -> Any:
    return sys.modules[FAKE]


def test_handlers_run_by_declared_order_not_by_registration(points: Any) -> None:
    patches.intercept("Context.add", "inner", tagging("inner"), order=50)
    patches.intercept("Context.add", "outer", tagging("outer"), order=10)
    patches.install()
    assert fake().Context().add("f") == "outer(inner(spark:f+outer+inner:False))"


def test_same_order_runs_in_registration_order(points: Any) -> None:
    patches.intercept("Context.add", "first", tagging("a"))
    patches.intercept("Context.add", "second", tagging("b"))
    patches.install()
    assert fake().Context().add("f") == "a(b(spark:f+a+b:False))"


def test_arguments_and_keywords_reach_the_original_unchanged(points: Any) -> None:
    patches.intercept("Context.add", "pass", lambda proceed, *a, **k: proceed(*a, **k))
    patches.install()
    assert fake().Context().add("d", recursive=True) == "spark:d:True"
    assert fake().Context().add("d", True) == "spark:d:True"


def test_the_wrapper_keeps_sparks_own_as_wrapped(points: Any) -> None:
    original = fake().Context.add
    patches.intercept("Context.add", "x", tagging("x"))
    patches.install()
    wrapper = fake().Context.add
    assert wrapper is not original and wrapper.__wrapped__ is original
    assert wrapper.__doc__ == "Spark's own add." and wrapper.__steward__ is True


def test_installing_twice_wraps_once(points: Any) -> None:
    patches.intercept("Context.add", "x", tagging("x"))
    patches.install()
    patches.install()
    patches.install(["Context.add"])
    assert fake().Context().add("f") == "x(spark:f+x:False)"


def test_an_owner_registering_again_replaces_its_handler(points: Any) -> None:
    patches.intercept("Context.add", "x", tagging("old"))
    patches.install()
    patches.intercept("Context.add", "x", tagging("new"))  # after install: seen at once
    assert fake().Context().add("f") == "new(spark:f+new:False)"


def test_a_point_without_handlers_is_left_as_spark_has_it(points: Any) -> None:
    original = fake().Context.add
    patches.intercept("prepare", "x", lambda proceed, c: proceed(c.upper()))
    patches.install()
    assert fake().Context.add is original
    assert fake().prepare("cmd") == "pickled:CMD"  # a module-level function point


def test_a_classmethod_point_stays_a_classmethod(points: Any) -> None:
    patches.intercept("Context.get", "x", lambda proceed, cls, name: proceed(cls, name + "!"))
    patches.install()
    assert fake().Context.get("a") == "spark-get:Context:a!"
    assert fake().Context().get("b") == "spark-get:Context:b!"


def test_an_unknown_point_is_refused_naming_the_known_ones(points: Any) -> None:
    with pytest.raises(SetupError, match="no pyspark patch point named 'Context.nope'.*"
                                         "Context.add"):
        patches.intercept("Context.nope", "x", tagging("x"))


def test_a_point_whose_module_is_missing_says_which(points: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    missing = PatchPoint("Gone.attr", ("steward_no_module_a", "steward_no_module_b"), "Gone",
                         "attr")
    monkeypatch.setattr(patches, "POINTS", (missing,))
    monkeypatch.setattr(patches, "_BY_NAME", {missing.name: missing})
    patches.intercept("Gone.attr", "x", tagging("x"))
    with pytest.raises(SetupError, match="steward_no_module_a, steward_no_module_b"):
        patches.install()


def test_every_real_point_exists_in_the_installed_pyspark() -> None:
    for point in patches.POINTS:
        assert callable(patches._current(point)), point.name
