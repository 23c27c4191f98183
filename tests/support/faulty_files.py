"""Builds the test-only checkpoint file manager ``io.sparksteward.testing.FaultyCheckpointFiles``
(tests/support/java): counts Spark's checkpoint operations and fails deletes on demand.

Compiled once per machine and source digest with javac against the installed pyspark's jars,
into ``~/.cache/spark-steward/test-jars``. Spark 4.1+ only (the trait's package).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.test_jars import compiled_jar

SOURCES = Path(__file__).with_name("java")
CLASS = "io.sparksteward.testing.FaultyCheckpointFiles"
DIR_KEY = "spark.faulty-checkpoint-files.dir"


def faulty_jar() -> Path:
    """The manager's jar (tests/support/test_jars.py)."""
    return compiled_jar(SOURCES, "faulty-checkpoint-files.jar")


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
