"""Compiles the JVM shim with javac against the jars of an installed pyspark.

Standard library only: the build backend loads this file directly, before any dependency of
the package is importable. There is no Maven: Spark's own jars are the classpath.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

JAR_NAME = "spark-steward-shim.jar"
# The bytecode and JDK API level of the shim. Java 8: the one jar the wheel ships runs on every
# JVM the supported Spark lines run on (3.5 on Java 8, 11 and 17; 4.x on 17 and newer). javac
# still has to be 17 or newer, to read Spark 4's class files.
JAVA_RELEASE = "8"
# -Xlint exclusions, each for a reason: "path", jars on Spark's classpath name missing manifest
# entries; "serial", the shim's task functions are Serializable and are only ever read by the
# same jar within one application, so they carry no serialVersionUID;
# "classfile", Spark 4's classes carry annotation members newer than Java 8 (@Deprecated(since)),
# which --release 8 reports for every such class; "options", newer javacs call release 8
# obsolete (a warning only).
JAVAC_LINT = "-Xlint:all,-path,-serial,-classfile,-options"
_NEEDED_JARS = ("spark-core_*.jar", "scala-library-*.jar")
CONNECT_JAR = "spark-connect_*.jar"


class ShimBuildError(RuntimeError):
    """The shim cannot be compiled here; the message says what to install or set."""


def candidate_jar_dirs() -> list[Path]:
    """Where Spark's jars may be: SPARK_HOME, the importable pyspark, the target site-packages."""
    found: list[Path] = []
    if os.environ.get("SPARK_HOME"):
        found.append(Path(os.environ["SPARK_HOME"]) / "jars")
    try:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is not None and spec.origin:
            found.append(Path(spec.origin).parent / "jars")
    except (ImportError, ValueError):
        pass
    # Under pip's isolated build the interpreter's own site-packages are not on sys.path, but a
    # pyspark installed there is what the package will run against.
    for key in ("purelib", "platlib"):
        found.append(Path(sysconfig.get_paths()[key]) / "pyspark" / "jars")
    return found


def find_spark_jars() -> Path:
    """The folder of Spark's jars to compile the shim against; the error names every folder looked
    in."""
    looked = []
    for directory in candidate_jar_dirs():
        looked.append(str(directory))
        if all(glob.glob(str(directory / pattern)) for pattern in _NEEDED_JARS):
            return directory
    raise ShimBuildError(
        "no Spark jars to compile the spark-steward JVM shim against; looked in: "
        + ", ".join(looked) + ". Install pyspark (pip install pyspark) or set SPARK_HOME")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / name
        path = str(candidate) if candidate.exists() else None
    if path is None:
        raise ShimBuildError(
            f"`{name}` was not found on PATH or in JAVA_HOME: spark-steward compiles its JVM shim "
            "with a JDK 17 or newer. Install one, e.g. `apt-get install openjdk-17-jdk-headless` "
            "(Debian/Ubuntu) or `brew install openjdk@17` (macOS)")
    return path


def stubs_dir(src_dir: Path) -> Path:
    """Compile-time stand-ins for Spark classes that exist on some lines only
    (``jvm-shim/src/stubs/java`` beside ``src/main/java``): on javac's classpath, never in the jar."""
    return src_dir.parent.parent / "stubs" / "java"


def connect_dir(src_dir: Path) -> Path:
    """The Spark Connect server extension (``jvm-shim/src/connect/java``): compiled into the jar
    only against a Spark line whose jars include Connect's (4.0 on), see :func:`has_connect`."""
    return src_dir.parent.parent / "connect" / "java"


def has_connect(jars_dir: Path) -> bool:
    """Whether ``jars_dir`` holds Spark Connect's server jar (pyspark 4's wheel does)."""
    return bool(glob.glob(str(jars_dir / CONNECT_JAR)))


def sources(src_dir: Path, jars_dir: Path) -> list[str]:
    """The Java files to compile against ``jars_dir``: the shim, plus its Connect extension
    where that line has Connect."""
    found = sorted(str(p) for p in src_dir.rglob("*.java"))
    if has_connect(jars_dir):
        found += sorted(str(p) for p in connect_dir(src_dir).rglob("*.java"))
    return found


def source_digest(src_dir: Path) -> str:
    """A SHA-256 of the shim's Java sources, naming a build of them."""
    digest = hashlib.sha256()
    for base in (src_dir, stubs_dir(src_dir), connect_dir(src_dir)):
        for path in sorted(base.rglob("*.java")):
            digest.update(path.relative_to(base).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _compile_stubs(src_dir: Path, classpath: str, javac: str, out: str) -> None:
    stubs = sorted(str(p) for p in stubs_dir(src_dir).rglob("*.java"))
    if not stubs:
        return
    result = subprocess.run([javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8",
                             "-cp", classpath, "-d", out, *stubs], capture_output=True, text=True)
    if result.returncode != 0:
        raise ShimBuildError("javac failed compiling the shim's compile-time stubs:\n"
                             + result.stderr.strip())


def compile_shim(src_dir: Path, out_jar: Path, jars_dir: Path | None = None) -> Path:
    """Compiles every ``*.java`` under ``src_dir`` into ``out_jar`` (written atomically)."""
    jars_dir = jars_dir or find_spark_jars()
    files = sources(src_dir, jars_dir)
    if not files:
        raise ShimBuildError(f"no Java sources under {src_dir}")
    classpath = os.pathsep.join(sorted(glob.glob(str(jars_dir / "*.jar"))))
    javac = _tool("javac")
    out_jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-steward-shim-") as classes, \
            tempfile.TemporaryDirectory(prefix="spark-steward-stubs-") as stubs:
        _compile_stubs(src_dir, classpath, javac, stubs)
        result = subprocess.run(
            [javac, "--release", JAVA_RELEASE, JAVAC_LINT, "-Werror", "-encoding", "UTF-8",
             "-cp", os.pathsep.join([stubs, classpath]), "-d", classes, *files],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise ShimBuildError(
                f"javac failed compiling the spark-steward shim against {jars_dir}:\n"
                + result.stderr.strip())
        tmp = out_jar.with_name(out_jar.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF",
                         "Manifest-Version: 1.0\nCreated-By: spark-steward\n"
                         f"Spark-Steward-Source: {source_digest(src_dir)}\n")
            for path in sorted(Path(classes).rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(tmp, out_jar)
    return out_jar


if __name__ == "__main__":  # python shim_build.py <src_dir> <out_jar>
    try:
        print(compile_shim(Path(sys.argv[1]), Path(sys.argv[2])))
    except ShimBuildError as exc:
        sys.exit(f"error: {exc}")
