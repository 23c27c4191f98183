"""Builds the test-only checkpoint file manager ``io.sparksteward.testing.FaultyCheckpointFiles``
(tests/support/java): counts Spark's checkpoint operations and fails deletes on demand.

Compiled once per machine and source digest with javac against the installed pyspark's jars,
into ``~/.cache/spark-steward/test-jars``. Spark 4.1+ only (the trait's package).
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

from spark_steward.kernel import shim_build

SOURCES = Path(__file__).with_name("java")
CLASS = "io.sparksteward.testing.FaultyCheckpointFiles"
DIR_KEY = "spark.faulty-checkpoint-files.dir"


def faulty_jar() -> Path:
    digest = hashlib.sha256()
    sources = sorted(SOURCES.rglob("*.java"))
    for path in sources:
        digest.update(path.read_bytes())
    jars = shim_build.find_spark_jars()
    digest.update(str(jars).encode())
    out = Path.home() / ".cache" / "spark-steward" / "test-jars" / digest.hexdigest()[:16] \
        / "faulty-checkpoint-files.jar"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    classpath = os.pathsep.join(sorted(glob.glob(str(jars / "*.jar"))))
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "--release", "8", "-nowarn", "-cp", classpath, "-d", classes,
                        *map(str, sources)], check=True, capture_output=True, text=True)
        tmp = out.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w") as jar:
            for path in sorted(Path(classes).rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(tmp, out)
    return out


def ops(faults_dir: Path) -> dict[str, int]:
    """Operations counted so far, summed over every JVM that reported (once a second)."""
    total: dict[str, int] = {}
    for path in faults_dir.glob("ops-*.txt"):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            total[name] = total.get(name, 0) + int(value)
    return total


def deletes_asked(faults_dir: Path) -> list[str]:
    log = faults_dir / "deletes.log"
    return log.read_text().split() if log.exists() else []
