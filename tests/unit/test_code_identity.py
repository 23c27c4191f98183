"""The identity of pickled Python code for shared cached tables (tables/code_identity.py).

Differential: each test varies one thing of a command (its code, a closure value, a module's
source, a broadcast's content or id, an accumulator) and checks the identity changes exactly
when what the command computes can change. Real pickles from pyspark's cloudpickle, real module
files, no Spark.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle

from spark_steward.errors import UnidentifiedCode
from spark_steward.tables.code_identity import (command_identity, modules_identity,
                                                parse_broadcasts, python_identity)


def _digest(obj: Any, broadcasts: dict[int, str] | None = None,
            context: int | None = None) -> str:
    return command_identity(cloudpickle.dumps(obj), broadcasts or {}, context).digest


@pytest.fixture()
def modules(tmp_path: Path) -> Iterator[Path]:
    """A folder on sys.path for modules the test writes; they are forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _write_module(folder: Path, name: str, body: str) -> Any:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    os.utime(path, ns=(1, 1))  # same mtime every version: the identity must read the content
    importlib.invalidate_caches()
    if name in sys.modules:
        return importlib.reload(sys.modules[name])
    return importlib.import_module(name)


def test_the_same_function_pickled_twice_has_one_identity() -> None:
    def f(x: int) -> int:
        return x + 1

    assert _digest((f, "long")) == _digest((f, "long"))


def test_a_closure_value_changes_the_identity() -> None:
    def make(bonus: int) -> Any:
        def f(x: int) -> int:
            return x + bonus
        return f

    assert _digest(make(4)) != _digest(make(5))
    assert _digest(make(4)) == _digest(make(4))


def test_a_function_by_reference_is_identified_by_its_module_source(modules: Path) -> None:
    mod = _write_module(modules, "ci_ref", "def bump(x):\n    return x + 1\n")
    first_bytes = cloudpickle.dumps(mod.bump)
    first = command_identity(first_bytes, {})
    assert "ci_ref" in first.modules
    before = modules_identity(first.modules)

    mod = _write_module(modules, "ci_ref", "def bump(x):\n    return x + 2\n")
    second_bytes = cloudpickle.dumps(mod.bump)
    assert first_bytes == second_bytes, "by reference: the pickled bytes cannot tell them apart"
    assert command_identity(second_bytes, {}).digest == first.digest
    assert modules_identity(first.modules) != before


def test_a_module_imported_by_a_users_module_is_followed(modules: Path) -> None:
    _write_module(modules, "ci_inner", "def inner(x):\n    return x - 1\n")
    outer = _write_module(modules, "ci_outer", """
        import ci_inner

        def through(x):
            return ci_inner.inner(x)
        """)
    names = command_identity(cloudpickle.dumps(outer.through), {}).modules
    before = modules_identity(names)
    _write_module(modules, "ci_inner", "def inner(x):\n    return x - 2\n")
    assert modules_identity(names) != before


def test_a_by_value_function_that_calls_a_module_names_the_module(modules: Path) -> None:
    helper = _write_module(modules, "ci_helper", "def scale(x):\n    return x * 2\n")

    def twice(x: int) -> int:
        return 2 * helper.scale(x)

    identity = command_identity(cloudpickle.dumps(twice), {})
    assert "ci_helper" in identity.modules


def test_a_module_without_a_source_file_is_not_identified(modules: Path) -> None:
    import types

    ghost = types.ModuleType("ci_ghost")
    exec("def f(x):\n    return x\n", ghost.__dict__)
    ghost.f.__module__ = "ci_ghost"
    sys.modules["ci_ghost"] = ghost
    with pytest.raises(UnidentifiedCode, match="ci_ghost"):
        modules_identity({"ci_ghost"})
    with pytest.raises(UnidentifiedCode, match="not loaded"):
        modules_identity({"ci_never_imported"})


def test_standard_library_modules_go_by_the_python_version() -> None:
    import json

    assert modules_identity({"json", "os", "builtins"}) == []
    assert "python " + sys.version in python_identity([(cloudpickle.dumps(json.dumps), {})])


class _BroadcastRef:
    """Pickles exactly as a pyspark Broadcast does: a call of _from_id with its id."""

    def __init__(self, bid: int) -> None:
        self.bid = bid

    def __reduce__(self) -> Any:
        from pyspark.core.broadcast import _from_id

        return (_from_id, (self.bid,))


class _AccumulatorRef:
    def __init__(self, aid: int) -> None:
        self.aid = aid

    def __reduce__(self) -> Any:
        from pyspark.accumulators import _deserialize_accumulator

        return (_deserialize_accumulator, (self.aid, 0, None))


def test_broadcasts_are_identified_by_content_not_by_id() -> None:
    same = _digest(("f", _BroadcastRef(3)), {3: "aa"})
    assert _digest(("f", _BroadcastRef(9)), {9: "aa"}) == same
    assert _digest(("f", _BroadcastRef(3)), {3: "bb"}) != same
    with pytest.raises(UnidentifiedCode, match="broadcast 3"):
        _digest(("f", _BroadcastRef(3)), {3: ""})
    with pytest.raises(UnidentifiedCode, match="broadcast 4"):
        _digest(("f", _BroadcastRef(4)), {3: "aa"})


def test_the_context_broadcast_and_accumulators_are_the_same_in_every_application() -> None:
    one = _digest(("f", _BroadcastRef(0), _AccumulatorRef(5)), {}, context=0)
    assert _digest(("f", _BroadcastRef(2), _AccumulatorRef(11)), {}, context=2) == one


def test_a_command_pickled_inside_a_command_is_read_through() -> None:
    import json

    inner_a = cloudpickle.dumps((json.dumps, "a"))
    inner_b = cloudpickle.dumps((json.dumps, "b"))
    outer_a = command_identity(cloudpickle.dumps(("carrier", inner_a)), {})
    outer_b = command_identity(cloudpickle.dumps(("carrier", inner_b)), {})
    assert outer_a.digest != outer_b.digest
    assert "json" in outer_a.modules


def test_reading_a_command_executes_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    command_identity(pickle.dumps(Hostile()), {})
    assert not marker.exists()


@pytest.mark.parametrize("data", [b"", b"\x80\x05garbage", pickle.dumps([1, 2])[:-3]])
def test_unreadable_bytes_are_not_identified(data: bytes) -> None:
    with pytest.raises(UnidentifiedCode, match="cannot be read"):
        command_identity(data, {})


def test_parse_broadcasts() -> None:
    assert parse_broadcasts("") == {}
    assert parse_broadcasts("3=ab,5=") == {3: "ab", 5: ""}


def _strict(value: Any) -> Any:
    """The ground truth: a value with its types, dict order and set contents."""
    if isinstance(value, dict):
        return ("dict", [(_strict(k), _strict(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_strict(v) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(_strict(v)) for v in value))
    return (type(value).__name__, repr(value))


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=5), st.binary(max_size=5))
_values = st.recursive(
    _scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.frozensets(st.integers(), max_size=3)), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(_values, _values)
def test_equal_data_has_equal_identity_and_different_data_a_different_one(a: Any, b: Any
                                                                            ) -> None:
    assert (_digest(a) == _digest(b)) == (_strict(a) == _strict(b))


def test_a_module_loaded_from_a_zip_archive_is_identified_by_its_content(tmp_path: Path
                                                                         ) -> None:
    import zipfile

    def archive(version: int) -> Path:
        path = tmp_path / f"v{version}" / "mods.zip"
        path.parent.mkdir()
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("ci_zipped.py", f"def f(x):\n    return x + {version}\n")
        return path

    digests = []
    for version in (1, 2):
        sys.path.insert(0, str(archive(version)))
        try:
            importlib.invalidate_caches()
            sys.modules.pop("ci_zipped", None)
            importlib.import_module("ci_zipped")
            digests.append(modules_identity({"ci_zipped"}))
        finally:
            sys.path.pop(0)
            sys.modules.pop("ci_zipped", None)
    assert digests[0] != digests[1] and all(d[0].startswith("module ci_zipped ") for d in digests)


def test_the_shims_framed_answer_is_split_back_into_its_items() -> None:
    from spark_steward.tables.code_identity import unframe

    items = ["ok", "a\nb\n\n", "", "path/with/😀/and/é", "3=ab"]
    framed = f"{len(items)}\n" + "".join(f"{len(i)}\n{i}" for i in items)
    assert unframe(framed) == items
    with pytest.raises(ValueError):
        unframe(framed + "x")
