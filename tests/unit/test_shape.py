"""The package's shape: facade and cli on top, capabilities over the kernel, low shared pieces
and pure cores at the bottom. Read statically (tests/unit/module_graph.py), so a wrong import
fails here in milliseconds instead of as a cycle or a stray pyspark patch at runtime."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path
from typing import Callable

import pytest

from tests.unit.module_graph import Edge, ModuleGraph

ROOT = Path(__file__).resolve().parents[2] / "python"
PKG = "spark_steward"
#: Folders of the package that are no capability.
NOT_CAPABILITIES = ("kernel", "lifecycle")


def declarations() -> dict[str, str]:
    """``name -> module:attr`` of every capability the installed spark-steward declares (the
    entry points the kernel, the CLI and config read)."""
    points = metadata.distribution("spark-steward").entry_points
    return {p.name: p.value for p in points if p.group == "spark_steward.services"}


def folder_of(value: str) -> str | None:
    """The capability folder a declaration ``spark_steward.<folder>.<module>:<attr>`` sits in."""
    parts = value.partition(":")[0].split(".")
    return parts[1] if len(parts) > 2 and parts[0] == PKG else None


#: The capability folders, as declared: a new capability is held by every rule below.
CAPABILITIES = tuple(sorted({f for f in map(folder_of, declarations().values()) if f}))
IMPURE_STDLIB = ("socket", "subprocess")  # the standard library a pure core may not use
# JVM handle uses allowed outside kernel.jvm: (module, what), each with why.
JVM_HANDLE_EXCEPTIONS = {
    # pyspark's DataFrame reads self._jdf internally, so CachedTable must *define* the property;
    # any read of a JVM handle in that module is still flagged.
    ("spark_steward.tables.cached_table", "def _jdf"),
}


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def capability(module: str) -> str | None:
    return next((c for c in CAPABILITIES if under(module, f"{PKG}.{c}")), None)


def is_kernel(module: str) -> bool:
    return under(module, f"{PKG}.kernel")


#: Top-level modules that re-export a capability's public API under the name users import.
FACADE_MODULES = (f"{PKG}.blobs",)


def is_top(module: str) -> bool:
    """The bare facade, its re-export modules or the cli: nothing below may reach up to them."""
    return module == PKG or module in FACADE_MODULES or under(module, f"{PKG}.cli")


def is_low(g: ModuleGraph, module: str) -> bool:
    top_module = module.count(".") == 1 and under(module, PKG) and module not in g.packages
    return (top_module and module.split(".")[1] not in ("_version", "cli")
            and module not in FACADE_MODULES) or \
        under(module, f"{PKG}.lifecycle")


def is_pure_core(module: str) -> bool:
    """lifecycle/ and, in a capability, every lifecycle module or package (``blob.lifecycle``,
    ``checkpoint.merging.lifecycle``, ``streams.lifecycle.packs``) and its errors module."""
    folder = capability(module)
    return under(module, f"{PKG}.lifecycle") or folder is not None and (
        "lifecycle" in module.split(".")[2:] or module == f"{PKG}.{folder}.errors")


def pure_core_may_import(src: str, dst: str) -> bool:
    """An allow-list: the standard library but sockets and processes, errors, lifecycle.*,
    and pure cores (errors included) of the same capability. pyspark, py4j, fsspec, the
    kernel... are not in it."""
    top = dst.split(".")[0]
    if top not in (PKG, "_spark_steward_autoload"):
        return top in sys.stdlib_module_names and top not in IMPURE_STDLIB
    return dst == f"{PKG}.errors" or under(dst, f"{PKG}.lifecycle") or (
        is_pure_core(dst) and capability(dst) == capability(src))


def kernel_upward(g: ModuleGraph) -> list[Edge]:
    return [e for e in g.imports if is_kernel(e.src) and (capability(e.dst) or is_top(e.dst))]


def low_upward(g: ModuleGraph) -> list[Edge]:
    return [e for e in g.imports if is_low(g, e.src)
            and (is_kernel(e.dst) or capability(e.dst) or is_top(e.dst))]


def impure_cores(g: ModuleGraph) -> list[Edge]:
    return [e for e in g.imports if is_pure_core(e.src) and not pure_core_may_import(e.src, e.dst)]


def capability_sideways(g: ModuleGraph) -> list[Edge]:
    """local sits under the other capabilities; blob, checkpoint and tables are siblings."""
    pairs = [(e, capability(e.src), capability(e.dst)) for e in g.imports]
    return [e for e, s, d in pairs if s and d and s != d and (s == "local" or d != "local")]


def bare_package_imports(g: ModuleGraph) -> list[Edge]:
    return [e for e in g.imports if e.dst == PKG and e.src != PKG]


def autoload_reach(g: ModuleGraph) -> list[Edge]:
    return [e for e in g.imports if e.src == "_spark_steward_autoload"
            and under(e.dst, PKG) and e.dst != f"{PKG}.kernel.autoload"]


def jvm_outside_door(g: ModuleGraph) -> list[Edge]:
    door = f"{PKG}.kernel.jvm"
    return [e for e in g.imports if under(e.dst, "py4j") and not under(e.src, door)] + [
        e for e in g.jvm_handles
        if not under(e.src, door) and (e.src, e.dst) not in JVM_HANDLE_EXCEPTIONS]


def patches_outside_kernel(g: ModuleGraph) -> list[Edge]:
    return [e for e in g.patches if not under(e.src, f"{PKG}.kernel.patches")]


def report(edges: list[Edge]) -> str:
    ordered = sorted(edges, key=lambda e: (e.src, e.file, e.line, e.dst))
    lines = list(dict.fromkeys(str(e) for e in ordered))
    return f"{len(lines)} offending edge(s):\n" + "\n".join(lines)


def holds(offending: list[Edge]) -> None:
    if offending:
        pytest.fail(report(offending), pytrace=False)


@pytest.fixture(scope="module")
def tree() -> ModuleGraph:
    return ModuleGraph.scan(ROOT)


def test_no_import_cycles_counting_lazy_and_type_checking_imports(tree: ModuleGraph) -> None:
    holds(tree.cycle_edges())


def test_kernel_imports_no_capability_nor_facade_nor_cli(tree: ModuleGraph) -> None:
    holds(kernel_upward(tree))


def test_low_pieces_import_no_kernel_capability_facade_or_cli(tree: ModuleGraph) -> None:
    holds(low_upward(tree))


def test_pure_cores_import_only_stdlib_errors_lifecycle_and_own_cores(tree: ModuleGraph) -> None:
    holds(impure_cores(tree))


def test_capabilities_import_each_other_only_downward_to_local(tree: ModuleGraph) -> None:
    holds(capability_sideways(tree))


def test_nothing_inside_the_package_imports_the_bare_facade(tree: ModuleGraph) -> None:
    holds(bare_package_imports(tree))


def test_autoload_hook_imports_only_kernel_autoload(tree: ModuleGraph) -> None:
    holds(autoload_reach(tree))


def test_only_kernel_jvm_imports_py4j_or_touches_jvm_handles(tree: ModuleGraph) -> None:
    holds(jvm_outside_door(tree))


def test_only_kernel_patches_assigns_attributes_of_pyspark_objects(tree: ModuleGraph) -> None:
    holds(patches_outside_kernel(tree))


def test_every_capability_folder_is_declared_and_every_declaration_names_a_folder() -> None:
    folders = {d.name for d in (ROOT / PKG).iterdir()
               if (d / "__init__.py").is_file() and d.name not in NOT_CAPABILITIES}
    undeclared = sorted(folders - set(CAPABILITIES))
    assert not undeclared, f"capability folders without an entry point in setup.cfg: {undeclared}"
    astray = {name: value for name, value in declarations().items()
              if folder_of(value) not in folders}
    assert not astray, f"entry points that name no capability folder: {astray}"


def test_each_capability_declares_only_parts_from_its_own_folder() -> None:
    from spark_steward.capabilities import Capability, load

    astray = []
    for name, value in declarations().items():
        capability = load(value)
        assert isinstance(capability, Capability) and capability.name == name, value
        inside = f"{PKG}.{folder_of(value)}."
        parts = (capability.service, capability.cli, capability.gc, capability.config,
                 capability.errors)
        astray += [f"{name}: {part}" for part in parts
                   if isinstance(part, str) and not part.startswith(inside)]
    assert not astray, "a capability's parts live in its folder:\n" + "\n".join(astray)


# Self-tests: BASE passes every rule; each case adds files that break one and must be named.
P = PKG
BASE = {f"{P}/__init__.py": "", f"{P}/kernel/__init__.py": "", f"{P}/blob/__init__.py": "",
        f"{P}/blob/service.py": "", f"{P}/kernel/jvm.py": "import py4j\nsc._jvm\n",
        f"{P}/kernel/patches.py": "from pyspark import SparkContext\nSparkContext.stop = 1\n"}
Rule = Callable[[ModuleGraph], list[Edge]]
BROKEN: dict[str, tuple[dict[str, str], Rule, set[tuple[str, str]]]] = {
    "cycle through an in-function import": (
        {f"{P}/a.py": "import spark_steward.b\n",
         f"{P}/b.py": "def f() -> None:\n    from spark_steward import a\n"},
        ModuleGraph.cycle_edges, {(f"{P}.a", f"{P}.b"), (f"{P}.b", f"{P}.a")}),
    "cycle under TYPE_CHECKING only, one side relative": (
        {f"{P}/a.py": "if TYPE_CHECKING:\n    from spark_steward.b import X\n",
         f"{P}/b.py": "from .a import Y\n"},
        ModuleGraph.cycle_edges, {(f"{P}.a", f"{P}.b"), (f"{P}.b", f"{P}.a")}),
    "kernel importing a capability": (
        {f"{P}/kernel/runtime.py": "from ..blob.service import Scope\n"},
        kernel_upward, {(f"{P}.kernel.runtime", f"{P}.blob.service")}),
    "capability errors importing their service, and a pure core another's errors": (
        {f"{P}/blob/errors.py": "from spark_steward.errors import StewardError\n"
                                "from spark_steward.blob.service import X\n",
         f"{P}/blob/lifecycle.py": "from spark_steward.blob.errors import BlobNotFound\n"
                                   "from spark_steward.local.errors import LocalSpaceFull\n"},
        impure_cores, {(f"{P}.blob.errors", f"{P}.blob.service"),
                       (f"{P}.blob.lifecycle", f"{P}.local.errors")}),
    "pure core importing pyspark": (
        {f"{P}/blob/lifecycle.py": "import os\nimport pyspark.sql\n"},
        impure_cores, {(f"{P}.blob.lifecycle", "pyspark.sql")}),
    "pure core package module importing fsspec and its capability's service": (
        {f"{P}/blob/lifecycle/__init__.py": "", f"{P}/blob/lifecycle/refs.py":
            "from spark_steward.blob.lifecycle import other\nimport fsspec\n"
            "from spark_steward.blob import service\n"},
        impure_cores, {(f"{P}.blob.lifecycle.refs", "fsspec"),
                       (f"{P}.blob.lifecycle.refs", f"{P}.blob.service")}),
    "py4j and a JVM handle outside kernel.jvm": (
        {f"{P}/blob/server.py": "from py4j.java_gateway import JavaObject\n"
                                "importlib.import_module('py4j.protocol')\nsc._jsc.stop()\n"},
        jvm_outside_door, {(f"{P}.blob.server", d)
                           for d in ("py4j.java_gateway", "py4j.protocol", "_jsc")}),
    "a def _jdf allowed, but not a read of it": (
        {f"{P}/tables/__init__.py": "", f"{P}/tables/cached_table.py":
            "class T:\n    @property\n    def _jdf(self): ...\ngetattr(df, '_jdf')\n"},
        jvm_outside_door, {(f"{P}.tables.cached_table", "_jdf")}),
    "SparkContext.stop patched outside kernel.patches": (
        {f"{P}/blob/service.py": "def f(x):\n    from pyspark import SparkContext\n"
                                 "    SparkContext.stop = x\nimport pyspark.core.rdd as rdd\n"
                                 "setattr(rdd, '_prepare', x)\n"},
        patches_outside_kernel, {(f"{P}.blob.service", "SparkContext.stop"),
                                 (f"{P}.blob.service", "rdd._prepare")}),
}


@pytest.mark.parametrize("case", BROKEN)
def test_checker_reports_each_broken_synthetic_tree(tmp_path: Path, case: str) -> None:
    files, rule, expected = BROKEN[case]
    assert not rule(ModuleGraph.scan(_write(tmp_path / "clean", BASE))), "false positive"
    found = rule(ModuleGraph.scan(_write(tmp_path / "broken", {**BASE, **files})))
    assert {(e.src, e.dst) for e in found} == expected, report(found)
    assert all(e.file.endswith(".py") and e.line > 0 for e in found), report(found)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root
