"""Jars of Java test helpers (tests/support/java, tests/conformance/java), compiled against the
installed pyspark's jars once per content: cached under ~/.cache/spark-steward/test-jars by a
digest of the sources and the jars' folder, so a run after a change of either recompiles."""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

from spark_steward.kernel import shim_build


def compiled_jar(sources: Path, name: str) -> Path:
    """The jar ``name`` of every ``.java`` file below ``sources`` (``javac --release 8``)."""
    digest = hashlib.sha256()
    files = sorted(sources.rglob("*.java"))
    for path in files:
        digest.update(path.read_bytes())
    jars = shim_build.find_spark_jars()
    digest.update(str(jars).encode())
    out = Path.home() / ".cache" / "spark-steward" / "test-jars" / digest.hexdigest()[:16] / name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    classpath = os.pathsep.join(sorted(glob.glob(str(jars / "*.jar"))))
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "--release", "8", "-nowarn", "-cp", classpath, "-d", classes,
                        *map(str, files)], check=True, capture_output=True, text=True)
        # Per process: two test processes may build the same jar at once.
        tmp = out.with_suffix(f".tmp-{os.getpid()}")
        with zipfile.ZipFile(tmp, "w") as jar:
            for path in sorted(Path(classes).rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(tmp, out)
    return out
