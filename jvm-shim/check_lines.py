"""Checks the shim against several Spark lines: it compiles against each, and one jar links to each.

    python jvm-shim/check_lines.py [--jar JAR] JARS_DIR [JARS_DIR ...]

For every JARS_DIR (a Spark distribution's or a pyspark wheel's ``jars`` folder):

1. compile: the sources compiled with shim_build's exact javac flags against that folder
   (into a temporary directory);
2. link: JAR (default: the jar the package ships, compiled against one line only) checked
   against that folder the way the JVM would link it: every class, method and field it names
   outside the JDK exists there with the same descriptor, and no class of the shim leaves an
   abstract method of that line's supertypes unimplemented (an AbstractMethodError at run time);
3. reflect: a JVM on that folder's jars asks SparkCompat which of the members it looks up by
   reflection (invisible to step 2) it cannot find.

Standard library only; exits non-zero when any check fails. Not a test: it needs the jars of
every line on disk (e.g. ``pip install --no-deps --target /tmp/spark35 pyspark==3.5.9``).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "jvm-shim" / "src" / "main" / "java"
SHIPPED = ROOT / "python" / "spark_steward" / "jars" / "spark-steward-shim.jar"
OWN_PACKAGE = "io/sparksteward/"
JDK_PREFIXES = ("java/", "javax/", "jdk/", "sun/", "com/sun/")  # javac --release checks these
ACC_STATIC, ACC_ABSTRACT, ACC_INTERFACE = 0x0008, 0x0400, 0x0200


class ClassInfo(NamedTuple):
    name: str
    access: int
    super_name: str | None
    interfaces: tuple[str, ...]
    methods: dict[tuple[str, str], int]  # (name, descriptor) -> access flags
    fields: set[tuple[str, str]]
    classes: set[str]  # every class the constant pool names
    refs: set[tuple[str, str, str, str]]  # (kind, owner, name, descriptor)


def parse_class(data: bytes) -> ClassInfo:
    """The parts of a class file that linking depends on."""
    pos = 10
    count = struct.unpack_from(">H", data, 8)[0]
    pool: list[tuple[int, object] | None] = [None] * count
    i = 1
    while i < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            pool[i] = (1, data[pos + 3:pos + 3 + length].decode("utf-8", "replace"))
            pos += 3 + length
        elif tag in (3, 4):
            pos += 5
        elif tag in (5, 6):
            pos += 9
            i += 1
        elif tag in (7, 8, 16, 19, 20):
            pool[i] = (tag, struct.unpack_from(">H", data, pos + 1)[0])
            pos += 3
        elif tag in (9, 10, 11, 12, 17, 18):
            pool[i] = (tag, struct.unpack_from(">HH", data, pos + 1))
            pos += 5
        elif tag == 15:
            pos += 4
        else:
            raise ValueError(f"unknown constant pool tag {tag}")
        i += 1

    def utf(index: int) -> str:
        return pool[index][1]  # type: ignore[index,return-value]

    def class_name(index: int) -> str:
        return utf(pool[index][1])  # type: ignore[index,arg-type]

    classes: set[str] = set()
    refs: set[tuple[str, str, str, str]] = set()
    for entry in pool:
        if entry is None:
            continue
        tag, value = entry
        if tag == 7:
            classes.add(utf(value))  # type: ignore[arg-type]
        elif tag in (9, 10, 11):
            owner_index, nat_index = value  # type: ignore[misc]
            name_index, desc_index = pool[nat_index][1]  # type: ignore[index,misc]
            kind = "field" if tag == 9 else "method"
            refs.add((kind, class_name(owner_index), utf(name_index), utf(desc_index)))

    access, this_index, super_index, n_interfaces = struct.unpack_from(">HHHH", data, pos)
    pos += 8
    interfaces = tuple(class_name(struct.unpack_from(">H", data, pos + 2 * k)[0])
                       for k in range(n_interfaces))
    pos += 2 * n_interfaces
    members: list[dict[tuple[str, str], int]] = []
    for _ in range(2):  # fields, then methods
        table: dict[tuple[str, str], int] = {}
        (n,) = struct.unpack_from(">H", data, pos)
        pos += 2
        for _ in range(n):
            flags, name_index, desc_index, n_attrs = struct.unpack_from(">HHHH", data, pos)
            pos += 8
            for _ in range(n_attrs):
                pos += 6 + struct.unpack_from(">I", data, pos + 2)[0]
            table[(utf(name_index), utf(desc_index))] = flags
        members.append(table)
    return ClassInfo(class_name(this_index), access,
                     class_name(super_index) if super_index else None, interfaces,
                     members[1], set(members[0]), classes, refs)


def jdk_class(name: str) -> ClassInfo | None:
    """A JDK class as the running JDK's javap shows it (members and supertypes only)."""
    result = subprocess.run(["javap", "-s", "-p", name.replace("/", ".")],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return None
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "{" in line and not line.startswith(" "))
    kinds = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", header))  # generics, two deep
    interface = " interface " in f" {kinds} "
    extends = re.search(r" extends ([\w.$, ]+?)(?: implements|\s*\{)", kinds)
    implements = re.search(r" implements ([\w.$, ]+?)\s*\{", kinds)
    supers = [t.strip().replace(".", "/") for t in extends.group(1).split(",")] if extends else []
    interfaces = [t.strip().replace(".", "/") for t in implements.group(1).split(",")] \
        if implements else []
    if interface:
        interfaces, supers = supers, []
    methods: dict[tuple[str, str], int] = {}
    fields: set[tuple[str, str]] = set()
    for declaration, descriptor in zip(lines, lines[1:]):
        if not descriptor.strip().startswith("descriptor: "):
            continue
        desc = descriptor.split("descriptor: ", 1)[1].strip()
        head = declaration.strip().split("(", 1)[0].split(" throws ")[0].rstrip(";")
        member = head.split()[-1]
        if not desc.startswith("("):
            fields.add((member, desc))
            continue
        member = "<init>" if member == name.replace("/", ".") else member
        words = declaration.split("(", 1)[0].split()
        flags = ACC_STATIC if "static" in words else 0
        if "abstract" in words or (interface and "default" not in words and not flags):
            flags |= ACC_ABSTRACT
        methods[(member, desc)] = flags
    return ClassInfo(name, ACC_INTERFACE if interface else 0,
                     supers[0] if supers else ("java/lang/Object" if name != "java/lang/Object"
                                               and not interface else None),
                     tuple(interfaces), methods, fields, set(), set())


class ClassPath:
    """Class files by name over a list of jars, parsed on demand; the first jar wins. JDK
    classes come from javap (the JDK's own API is checked by javac's --release)."""

    def __init__(self, jars: list[Path]) -> None:
        self._where: dict[str, tuple[zipfile.ZipFile, str]] = {}
        self._parsed: dict[str, ClassInfo | None] = {}
        for jar in jars:
            archive = zipfile.ZipFile(jar)
            for entry in archive.namelist():
                if entry.endswith(".class") and not entry.startswith("META-INF/"):
                    self._where.setdefault(entry[:-6], (archive, entry))

    def get(self, name: str) -> ClassInfo | None:
        if name not in self._parsed:
            found = self._where.get(name)
            if found:
                self._parsed[name] = parse_class(found[0].read(found[1]))
            else:
                self._parsed[name] = jdk_class(name) if name.startswith(JDK_PREFIXES) else None
        return self._parsed[name]

    def names(self, prefix: str) -> list[str]:
        return sorted(n for n in self._where if n.startswith(prefix))

    def supertypes(self, name: str) -> Iterator[ClassInfo]:
        """The class and every superclass and superinterface, each once (missing ones skipped)."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            info = self.get(current)
            if info is None:
                continue
            yield info
            todo.extend(info.interfaces)
            if info.super_name:
                todo.append(info.super_name)


#: Shim classes Spark loads only on some lines, and the Spark class whose presence selects them
#: (the shim picks them by the same class: StreamFiles.install). On a line without it, the
#: class is never loaded, so its links are not checked there; on a line with it, they are.
LINE_SPECIFIC = {
    name: trait
    for names, trait in (
        (("io/sparksteward/shim/streams/StreamCheckpointFiles",
          "io/sparksteward/shim/StreamCheckpointFiles"),  # the old name, an alias now
         "org/apache/spark/sql/execution/streaming/checkpointing/CheckpointFileManager"),
        (("io/sparksteward/shim/streams/StreamCheckpointFilesV40",
          "io/sparksteward/shim/StreamCheckpointFilesV40"),
         "org/apache/spark/sql/execution/streaming/CheckpointFileManager"),
    )
    for name in names
}
#: The Connect server extensions (jvm-shim/src/connect): Spark loads them by name from a
#: Connect server's conf, which only a line with Connect's server has; every class of the
#: package, nested ones included, is checked where that line has Connect.
CONNECT_PACKAGE = "io/sparksteward/shim/connect/"
CONNECT_TRAIT = "org/apache/spark/sql/connect/plugin/CommandPlugin"


def line_trait(own: str) -> str | None:
    """The Spark class whose presence selects shim class ``own``, None for every line's."""
    if own.startswith(CONNECT_PACKAGE):
        return CONNECT_TRAIT
    return LINE_SPECIFIC.get(own)


def _external(name: str) -> bool:
    return not name.startswith("[") and not name.startswith(OWN_PACKAGE) and \
        not name.startswith(JDK_PREFIXES)


def link_problems(shim_jar: Path, jars_dir: Path) -> tuple[list[str], int]:
    """What would fail to link if ``shim_jar`` ran with the jars of ``jars_dir``; refs checked."""
    path = ClassPath([shim_jar, *sorted(Path(p) for p in glob.glob(str(jars_dir / "*.jar")))])
    problems: set[str] = set()
    checked = 0
    for own in path.names(OWN_PACKAGE):
        info = path.get(own)
        assert info is not None
        trait = line_trait(own)
        if trait is not None and path.get(trait) is None:
            continue  # never loaded on this line
        for cls in info.classes:
            cls = cls.lstrip("[")
            if cls.startswith("L"):
                cls = cls[1:-1]
            if _external(cls) and len(cls) > 1 and path.get(cls) is None:
                problems.add(f"{own}: class {cls} is missing")
        for kind, owner, name, desc in info.refs:
            if not _external(owner) or owner.startswith("["):
                continue
            checked += 1
            if path.get(owner) is None:
                continue  # reported as a missing class
            found = any(((name, desc) in t.methods) if kind == "method" else ((name, desc) in t.fields)
                        for t in path.supertypes(owner))
            if not found:
                problems.add(f"{own}: {kind} {owner}.{name}{desc} is missing")
        if info.access & (ACC_ABSTRACT | ACC_INTERFACE):
            continue
        abstract: set[tuple[str, str]] = set()
        concrete: set[tuple[str, str]] = set()
        for t in path.supertypes(own):
            for key, flags in t.methods.items():
                if flags & ACC_STATIC:
                    continue
                (abstract if flags & ACC_ABSTRACT else concrete).add(key)
        for name, desc in sorted(abstract - concrete):
            problems.add(f"{own}: abstract method {name}{desc} is not implemented")
    return sorted(problems), checked


PROBE = """package io.sparksteward.shim;
import io.sparksteward.shim.kernel.SparkCompat;
public final class LinesProbe {
  public static void main(String[] args) {
    System.out.println("missing:" + String.join(",", SparkCompat.missingMembers()));
  }
}
"""


def reflective_problems(shim_jar: Path, jars_dir: Path) -> list[str]:
    """The members SparkCompat looks up by reflection that ``jars_dir``'s Spark lacks."""
    with tempfile.TemporaryDirectory(prefix="steward-probe-") as tmp:
        source = Path(tmp) / "io" / "sparksteward" / "shim" / "LinesProbe.java"
        source.parent.mkdir(parents=True)
        source.write_text(PROBE)
        classpath = f"{tmp}{os.pathsep}{shim_jar}{os.pathsep}{jars_dir / '*'}"
        made = subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", tmp, str(source)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            return [f"the probe does not compile against {shim_jar}: {made.stderr.strip()[-500:]}"]
        result = subprocess.run(["java", "-cp", classpath, "io.sparksteward.shim.LinesProbe"],
                                capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("missing:")]
    if result.returncode != 0 or not lines:
        return [f"the probe failed: {result.stderr.strip()[-2000:]}"]
    return [name for name in lines[0][len("missing:"):].split(",") if name]


def spark_version(jars_dir: Path) -> str:
    """"3.5.9 (Scala 2.12)" from the name of the folder's spark-core jar."""
    found = glob.glob(str(jars_dir / "spark-core_*.jar"))
    if not found:
        return "?"
    scala, version = Path(found[0]).stem[len("spark-core_"):].split("-", 1)
    return f"{version} (Scala {scala})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jar", type=Path, default=SHIPPED,
                        help="the jar to link-check (default: the shipped one)")
    parser.add_argument("jars_dirs", type=Path, nargs="+", metavar="JARS_DIR")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "build_backend"))
    from steward_backend import _shim_build  # the build's own loader of shim_build.py

    shim_build = _shim_build()
    failed = False
    for jars_dir in args.jars_dirs:
        line = f"Spark {spark_version(jars_dir)} ({jars_dir})"
        with tempfile.TemporaryDirectory(prefix="steward-check-") as tmp:
            try:
                shim_build.compile_shim(SOURCES, Path(tmp) / "shim.jar", jars_dir)
                print(f"{line}: compiles")
            except shim_build.ShimBuildError as exc:
                failed = True
                print(f"{line}: DOES NOT COMPILE\n{exc}")
        problems, checked = link_problems(args.jar, jars_dir)
        if problems:
            failed = True
            print(f"{line}: {args.jar.name} DOES NOT LINK ({len(problems)} problems)")
            for problem in problems:
                print(f"    {problem}")
        else:
            print(f"{line}: {args.jar.name} links ({checked} member references checked)")
        missing = reflective_problems(args.jar, jars_dir)
        if missing:
            failed = True
            print(f"{line}: SparkCompat finds no member for: {', '.join(missing)}")
        else:
            print(f"{line}: SparkCompat finds every member it looks up")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
