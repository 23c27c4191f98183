"""Static import graph of a source root, read with :mod:`ast` only (nothing is imported).

test_shape.py holds the package's layering on it; taking the root as a parameter lets the
same checker run on synthetic trees, so its self-tests prove it can fail.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

JVM_HANDLES = frozenset({"_jvm", "_gateway", "_jsc", "_jdf", "_jsparkSession", "_jrdd"})


@dataclass(frozen=True)
class Edge:
    """``src`` uses ``dst`` (a module, a JVM handle or a patched attribute) at ``file:line``."""

    src: str
    dst: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst} ({self.file}:{self.line})"


@dataclass
class ModuleGraph:
    """Every module under a root with what it imports, touches on the JVM and patches."""

    root: Path
    files: dict[str, Path] = field(default_factory=dict)   # module name -> file
    packages: set[str] = field(default_factory=set)
    imports: list[Edge] = field(default_factory=list)       # dst: absolute module name
    jvm_handles: list[Edge] = field(default_factory=list)   # dst: handle read or def _jdf
    patches: list[Edge] = field(default_factory=list)       # dst: pyspark name.attr assigned

    @classmethod
    def scan(cls, root: Path) -> "ModuleGraph":
        graph = cls(root)
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
                graph.packages.add(".".join(parts))
            graph.files[".".join(parts)] = path
        for name, path in graph.files.items():
            graph._read(name, path)
        return graph

    def _resolve_from(self, module: str, node: ast.ImportFrom) -> str:
        """The absolute base of ``from <base> import ...`` in ``module``, relative or not."""
        if not node.level:
            return node.module or ""
        package = module if module in self.packages else module.rpartition(".")[0]
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def _read(self, module: str, path: Path) -> None:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = os.path.relpath(path, self.root.parent)
        imported: list[tuple[str, int]] = []
        handles: list[tuple[str, int]] = []         # JVM handles read, or defined as methods
        written: list[tuple[str, int]] = []         # X.attr assigned, deleted or setattr'd
        from_pyspark: set[str] = set()              # names bound by an import from pyspark
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imported.append((alias.name, node.lineno))
                    if alias.name.split(".")[0] == "pyspark":
                        from_pyspark.add(alias.asname or "pyspark")
            elif isinstance(node, ast.ImportFrom):
                base = self._resolve_from(module, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    imported.append((sub if sub in self.files else base, node.lineno))
                    if base.split(".")[0] == "pyspark":
                        from_pyspark.add(alias.asname or alias.name)
            elif isinstance(node, ast.Call):
                callee = _callee(node)
                args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
                if callee in ("import_module", "__import__") and args and isinstance(args[0], str):
                    imported.append((args[0], node.lineno))
                if callee in ("getattr", "hasattr", "setattr", "delattr") and len(args) > 1 \
                        and args[1] in JVM_HANDLES:
                    handles.append((str(args[1]), node.lineno))
                if callee == "setattr" and len(args) > 1 and (obj := _dotted(node.args[0])):
                    attr = args[1] if isinstance(args[1], str) else "<dynamic>"
                    written.append((f"{obj}.{attr}", node.lineno))
            elif isinstance(node, ast.Attribute):
                if node.attr in JVM_HANDLES:
                    handles.append((node.attr, node.lineno))
                if isinstance(node.ctx, (ast.Store, ast.Del)) and (dotted := _dotted(node)):
                    written.append((dotted, node.lineno))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.name in JVM_HANDLES:
                handles.append((f"def {node.name}", node.lineno))
        self.imports += [Edge(module, d, where, line) for d, line in imported if d != module]
        self.jvm_handles += [Edge(module, h, where, line) for h, line in handles]
        self.patches += [Edge(module, w, where, line) for w, line in written
                         if w.split(".")[0] in from_pyspark]

    def internal(self) -> list[Edge]:
        """The import edges between modules under the root."""
        return [e for e in self.imports if e.dst in self.files]

    def cycle_edges(self) -> list[Edge]:
        """Every internal edge a -> b where b reaches a again: exactly the edges on a cycle."""
        succ: dict[str, set[str]] = {m: set() for m in self.files}
        for e in self.internal():
            succ[e.src].add(e.dst)

        def reachable(start: str) -> set[str]:
            seen: set[str] = set()
            todo = [start]
            while todo:
                for w in succ[todo.pop()] - seen:
                    seen.add(w)
                    todo.append(w)
            return seen

        reach = {m: reachable(m) for m in self.files}
        return [e for e in self.internal() if e.src in reach[e.dst]]


def _callee(call: ast.Call) -> str:
    """``f`` for ``f(...)`` and ``m.f(...)``: how getattr, setattr and import_module are called."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else ""


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None
