"""The JVM shim's packages keep the Python tree's shape: the kernel imports no capability, no
capability imports another, and nothing below the root reaches up to the root's assembly
classes (``StewardPlugin``, ``PythonFacade``), which are the only ones that import capabilities.

Read statically from the Java sources, like ``test_shape`` reads the Python modules: every
``package`` and ``import`` statement (static and wildcard ones too), and every fully-qualified
``io.sparksteward.shim.*`` name in the code or in a string literal (a class loaded by name is
a dependency as well); comments are left out. A wrong dependency fails here in milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "jvm-shim" / "src" / "main" / "java"
PYTHON = ROOT / "python" / "spark_steward"
SHIM = "io.sparksteward.shim"
KERNEL = f"{SHIM}.kernel"
CAPABILITIES = tuple(f"{SHIM}.{name}" for name in ("blob", "checkpoint", "tables", "local",
                                                  "streams"))

#: Shim names in string literals that name no class to load, each with why; any other name of
#: the root or of another package in a string is a dependency.
NAMES_NOT_LOADED = {
    # The rule's name as Spark reports it and as spark.sql.optimizer.excludedRules may hold it
    # in a user's conf: kept from before the shim had packages.
    ("io/sparksteward/shim/tables/CachedTableRule.java", "io.sparksteward.shim.CachedTableRule"),
    # The manager's old name, recognised in a conf (never loaded: it would delegate to itself).
    ("io/sparksteward/shim/streams/StreamFiles.java",
     "io.sparksteward.shim.StreamCheckpointFiles"),
    # The Connect command extension (jvm-shim/src/connect) as a Connect server's conf names it:
    # the plugin only asks whether the conf does, to relay the task context to executors.
    ("io/sparksteward/shim/StewardPlugin.java", "io.sparksteward.shim.connect.StewardCommands"),
    # Its interceptor, likewise: the plugin asks, to have executors evict ended sessions.
    ("io/sparksteward/shim/StewardPlugin.java", "io.sparksteward.shim.connect.SessionCaches"),
}

_COMMENTS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.M)
_IMPORT = re.compile(r"^\s*import\s+(static\s+)?([\w.]+(?:\.\*)?)\s*;", re.M)
# A shim name in code or a string: the package segments (lower case) and then a class.
_QUALIFIED = re.compile(r"\bio\.sparksteward\.shim((?:\.[a-z_][\w]*)*)\.[A-Z]\w*")


@dataclass(frozen=True)
class Dependency:
    """``source`` (a file, in package ``package``) names package ``target`` by ``how``."""

    source: str
    package: str
    target: str
    how: str


def _code(text: str) -> str:
    """``text`` with comments blanked; string and char literals kept (a class named in one is
    loaded by name)."""
    return _COMMENTS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", text)


def _package_of(name: str, static: bool) -> str:
    """The package an import names: ``a.b.C`` -> ``a.b``; ``a.b.*`` -> ``a.b``; a static import
    ``a.b.C.member`` (or ``a.b.C.*``) -> ``a.b``."""
    parts = name.split(".")
    if parts[-1] == "*" and not static:
        return ".".join(parts[:-1])
    classes = [i for i, p in enumerate(parts) if p[:1].isupper()]
    return ".".join(parts[:classes[0]]) if classes else ".".join(parts[:-1])


def dependencies(sources: dict[str, str]) -> list[Dependency]:
    """Every reference from one shim package to another in ``sources`` (file name -> text)."""
    found: list[Dependency] = []
    for source, text in sorted(sources.items()):
        code = _code(text)
        declared = _PACKAGE.search(code)
        assert declared, f"{source} declares no package"
        package = declared.group(1)
        for static, name in _IMPORT.findall(code):
            target = _package_of(name, bool(static))
            if (target == SHIM or target.startswith(SHIM + ".")) and target != package:
                found.append(Dependency(source, package, target, f"import {static}{name}"))
        body = _IMPORT.sub("", _PACKAGE.sub("", code))  # their names are counted above
        for match in _QUALIFIED.finditer(body):
            target = SHIM + match.group(1)
            if target != package and (source, match.group(0)) not in NAMES_NOT_LOADED:
                found.append(Dependency(source, package, target, match.group(0)))
    return found


def layer(package: str) -> str:
    """``root``, ``kernel``, ``capability`` or ``unknown`` (a package the shape does not know)."""
    if package == SHIM:
        return "root"
    if package == KERNEL or package.startswith(KERNEL + "."):
        return "kernel"
    if any(package == c or package.startswith(c + ".") for c in CAPABILITIES):
        return "capability"
    return "unknown"


def capability_of(package: str) -> str:
    return next(c for c in CAPABILITIES if package == c or package.startswith(c + "."))


def violations(deps: list[Dependency]) -> list[str]:
    """The dependencies the shape forbids, each as one line naming the file and the reference."""
    bad = []
    for d in deps:
        src, dst = layer(d.package), layer(d.target)
        if "unknown" in (src, dst):
            why = f"{d.package if src == 'unknown' else d.target} is neither the root, the " \
                  f"kernel nor a capability ({', '.join(CAPABILITIES)})"
        elif src == "kernel" and dst != "kernel":
            why = f"the kernel reaches up to {'the root' if dst == 'root' else 'a capability'}"
        elif src == "capability" and dst == "root":
            why = "a capability reaches up to the root's assembly classes"
        elif src == "capability" and dst == "capability" \
                and capability_of(d.package) != capability_of(d.target):
            why = "a capability imports another capability (what two share belongs in kernel)"
        else:
            continue
        bad.append(f"{d.source}: {d.how} ({why})")
    return bad


def shim_sources() -> dict[str, str]:
    return {p.relative_to(SOURCES).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(SOURCES.rglob("*.java"))}


# -- the shim itself --------------------------------------------------------------------------


def test_kernel_imports_no_capability_and_no_capability_imports_another() -> None:
    bad = violations(dependencies(shim_sources()))
    assert not bad, "the shim's packages break their shape:\n" + "\n".join(bad)


def test_every_package_is_the_root_the_kernel_or_a_capability_of_the_python_tree() -> None:
    packages = {_PACKAGE.search(_code(text)).group(1)  # type: ignore[union-attr]
                for text in shim_sources().values()}
    assert {layer(p) for p in packages} <= {"root", "kernel", "capability"}, packages
    for package in packages - {SHIM}:
        folder = package[len(SHIM) + 1:].split(".")[0]
        assert (PYTHON / folder / "__init__.py").is_file(), (
            f"{package} mirrors no Python package spark_steward.{folder}")


def test_files_sit_in_the_folder_of_their_package() -> None:
    for name, text in shim_sources().items():
        package = _PACKAGE.search(_code(text)).group(1)  # type: ignore[union-attr]
        assert name.rsplit("/", 1)[0] == package.replace(".", "/"), name


def test_the_kernel_and_every_capability_have_classes() -> None:
    """The reading of the real tree found something to check (a regex that matches nothing would
    pass every test above)."""
    deps = dependencies(shim_sources())
    packages = {layer(d.package) for d in deps}
    assert {"root", "capability"} <= packages
    assert any(layer(d.package) == "capability" and layer(d.target) == "kernel" for d in deps)
    for package in (KERNEL, *CAPABILITIES):
        assert list((SOURCES / package.replace(".", "/")).glob("*.java")), package


# -- the check on synthetic sources ------------------------------------------------------------


def _file(package: str, body: str) -> str:
    return f"package {package};\n\n{body}\n\nfinal class X {{}}\n"


@pytest.mark.parametrize("package, body", [
    (KERNEL, "import io.sparksteward.shim.blob.PeerServer;"),
    (KERNEL, "import io.sparksteward.shim.StewardPlugin;"),
    (KERNEL, "import io.sparksteward.shim.streams.*;"),
    (KERNEL, "import static io.sparksteward.shim.tables.CachedTables.markerId;"),
    (KERNEL, 'class Y { Object c = Class.forName("io.sparksteward.shim.streams.StreamFiles"); }'),
    (KERNEL, "class Y { io.sparksteward.shim.local.AppEndDriver d; }"),
    (f"{SHIM}.blob", "import io.sparksteward.shim.local.AppFolders;"),
    (f"{SHIM}.tables",
     "class Y { Object o = io.sparksteward.shim.checkpoint.CheckpointData.ERROR; }"),
    (f"{SHIM}.streams", "import io.sparksteward.shim.PythonFacade;"),
    (f"{SHIM}.extras", "import io.sparksteward.shim.kernel.Errors;"),
])
def test_a_forbidden_dependency_is_reported(package: str, body: str) -> None:
    bad = violations(dependencies({"X.java": _file(package, body)}))
    assert len(bad) == 1 and bad[0].startswith("X.java: "), bad


@pytest.mark.parametrize("package, body", [
    (KERNEL, "import io.sparksteward.shim.kernel.Errors;"),
    (f"{SHIM}.blob", "import io.sparksteward.shim.kernel.Errors;\n"
                     "import static io.sparksteward.shim.kernel.Errors.PREFIX;"),
    (f"{SHIM}.blob", "class Y { io.sparksteward.shim.blob.PeerServer s; }"),
    (SHIM, "import io.sparksteward.shim.blob.PeerServer;\nimport io.sparksteward.shim.kernel.*;"),
    (KERNEL, "/** Called through {@link io.sparksteward.shim.PythonFacade}. */\n"
             "// io.sparksteward.shim.blob.PeerServer reads it too"),
    (f"{SHIM}.tables", "import org.apache.spark.sql.Dataset;"),
])
def test_an_allowed_dependency_is_not_reported(package: str, body: str) -> None:
    assert violations(dependencies({"X.java": _file(package, body)})) == []


def test_only_the_listed_names_are_let_through() -> None:
    name = "io/sparksteward/shim/streams/StreamFiles.java"
    text = _file(f"{SHIM}.streams",
                 'class Y { String a = "io.sparksteward.shim.StreamCheckpointFiles";'
                 ' String b = "io.sparksteward.shim.StewardPlugin"; }')
    bad = violations(dependencies({name: text}))
    assert bad == [f"{name}: io.sparksteward.shim.StewardPlugin (a capability reaches up to the "
                   "root's assembly classes)"]


def test_a_capability_inside_its_own_subpackage_is_one_capability() -> None:
    deps = dependencies({"X.java": _file(f"{SHIM}.checkpoint.merging",
                                         "import io.sparksteward.shim.checkpoint.CheckpointData;")})
    assert len(deps) == 1 and violations(deps) == []
