"""``import spark_steward`` reaches every public call and module, and stays cheap: the
capabilities, the kernel and pyspark are imported only when first used. The public surface
speaks one vocabulary, documents every name, and keeps its errors under ``spark_steward.errors``
(defined there or in a capability's errors module, imported from there either way)."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from types import ModuleType
from typing import Iterator

import pytest

import spark_steward

#: Exception classes allowed outside spark_steward.errors, each with why.
ERRORS_ELSEWHERE = {
    # The build backend loads shim_build.py on its own, before the package is importable.
    "spark_steward.kernel.shim_build.ShimBuildError",
}

#: Public names without a docstring, each with why. Keep it empty.
UNDOCUMENTED: set[str] = set()

PUBLIC_CALLS = ("attach", "detach", "runtime", "is_enabled", "bootstrap", "jar_path", "scope",
                "checkpoints", "cache", "close")


def _in_fresh_interpreter(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={"SPARK_STEWARD_AUTOLOAD": "0", "PATH": ""})
    return json.loads(out.stdout)


def test_every_public_name_is_reachable_from_the_package() -> None:
    modules = {"blobs", "local", "streams", "__version__"}
    assert set(PUBLIC_CALLS) | modules == set(spark_steward.__all__)
    for name in spark_steward.__all__:
        assert getattr(spark_steward, name) is not None, name


def test_local_and_blobs_are_reachable_after_a_bare_import() -> None:
    found = _in_fresh_interpreter(
        "import json, spark_steward\n"
        "print(json.dumps([callable(spark_steward.local.state), "
        "callable(spark_steward.blobs.put), callable(spark_steward.blobs.get)]))")
    assert found == [True, True, True]


def test_every_capability_module_users_are_told_to_import_imports() -> None:
    found = _in_fresh_interpreter(
        "import json, spark_steward.blobs, spark_steward.local, spark_steward.streams\n"
        "import spark_steward as s\n"
        "print(json.dumps([s.blobs.get is s.blob.api.get, callable(s.local.state), "
        "callable(s.streams.ls)]))")
    assert found == [True, True, True]


def test_the_lazy_attribute_and_the_imported_module_are_one_object() -> None:
    import spark_steward.blobs

    assert spark_steward.blobs is sys.modules["spark_steward.blobs"]


def test_a_bare_import_loads_no_capability_kernel_or_pyspark() -> None:
    loaded = _in_fresh_interpreter(
        "import json, sys, spark_steward\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.startswith(('spark_steward.', 'pyspark', 'py4j')))))")
    assert loaded == ["spark_steward._version"]


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    try:
        spark_steward.no_such_thing  # type: ignore[attr-defined]
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")


def test_checkpoint_series_old_names_call_the_new_ones_and_name_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_steward.checkpoint.service import CheckpointSeries

    monkeypatch.setattr(CheckpointSeries, "ls", lambda self, spark=None: ["listed", spark])
    monkeypatch.setattr(CheckpointSeries, "drop", lambda self, spark=None: ["dropped", spark])
    series = CheckpointSeries("pagerank")
    with pytest.warns(DeprecationWarning, match=r"use CheckpointSeries\.ls\(\)"):
        assert series.list("session") == ["listed", "session"]
    with pytest.warns(DeprecationWarning, match=r"use CheckpointSeries\.drop\(\)"):
        assert series.delete("session") == ["dropped", "session"]


def public_modules() -> Iterator[ModuleType]:
    """The package and every module under it whose dotted path has no part starting with _."""
    yield spark_steward
    for info in pkgutil.walk_packages(spark_steward.__path__, "spark_steward."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield importlib.import_module(info.name)


def test_every_error_class_is_defined_in_errors_or_a_capabilitys_errors_module() -> None:
    from spark_steward import capabilities

    homes = {"spark_steward.errors"} | {module for c in capabilities.declared().capabilities
                                        if (module := c.errors)}
    elsewhere = sorted(
        f"{module.__name__}.{name}" for module in public_modules()
        if module.__name__ not in homes
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__ and not name.startswith("_"))
    assert elsewhere == sorted(ERRORS_ELSEWHERE), (
        "define these in spark_steward/errors.py or the capability's errors.py")


def test_every_error_is_a_documented_steward_error_imported_from_errors() -> None:
    import spark_steward.errors as errors
    from spark_steward import capabilities

    modules = [errors] + [importlib.import_module(c.errors)
                          for c in capabilities.declared().capabilities if c.errors]
    names: list[str] = []
    for module in modules:
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                assert issubclass(obj, errors.StewardError), name
                assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring"
                assert getattr(errors, name) is obj, f"spark_steward.errors.{name}"
                names.append(name)
    assert len(names) == len(set(names)), "two errors of one name"
    assert set(names) <= set(dir(errors))


def test_importing_errors_imports_no_capability() -> None:
    loaded = _in_fresh_interpreter(
        "import json, sys, spark_steward.errors\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('spark_steward.'))))")
    assert loaded == ["spark_steward._version", "spark_steward.errors"]


def public_names(module: ModuleType) -> Iterator[tuple[str, object]]:
    """``module``'s public functions and classes (its ``__all__`` when it has one, else what it
    defines without a leading _), then the public methods and properties of each class."""
    explicit = getattr(module, "__all__", None)
    names = explicit if explicit is not None else [n for n in vars(module) if n[0] != "_"]
    for name in names:
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if explicit is None and obj.__module__ != module.__name__:
            continue  # imported, counted where it is defined
        yield f"{module.__name__}.{name}", obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if attr[0] != "_" and (inspect.isfunction(member) or isinstance(member, property)):
                    yield f"{module.__name__}.{name}.{attr}", member


def surface() -> dict[int, tuple[str, object]]:
    """Every public module, function, class, method and property, once each."""
    found: dict[int, tuple[str, object]] = {}
    for module in public_modules():
        found.setdefault(id(module), (module.__name__, module))
        for qualname, obj in public_names(module):
            found.setdefault(id(obj), (qualname, obj))
    return found


def test_every_public_name_has_a_docstring() -> None:
    missing = sorted(name for name, obj in surface().values()
                     if not (inspect.getdoc(obj) or "").strip() and name not in UNDOCUMENTED)
    assert not missing, f"{len(missing)} public name(s) without a docstring:\n" + "\n".join(missing)


def test_no_public_signature_has_a_private_parameter() -> None:
    private = sorted(
        f"{name}({param})" for name, obj in surface().values()
        if inspect.isfunction(obj) or isinstance(obj, property)
        for param in inspect.signature(obj.fget if isinstance(obj, property) else obj).parameters
        if param.startswith("_"))
    assert not private, "move this plumbing to a private function:\n" + "\n".join(private)
