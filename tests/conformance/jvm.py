"""The JVM side of the conformance suite: one standalone JVM per test session (no Spark
application), built from tests/conformance/java and driven over its stdin and stdout.

The helper is compiled once per machine and source digest with javac against the installed
pyspark's jars (as tests/support/faulty_files.py does) into ``~/.cache/spark-steward/test-jars``;
it reaches the shim's classes by the names of :mod:`tests.conformance.java_names`, through
reflection, so it never needs recompiling when the shim changes. The shim jar is the one the
tests use everywhere (``spark_steward.jar_path()``).
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

import spark_steward
from spark_steward.kernel import shim_build
from tests.conformance import java_names
from tests.support.test_jars import compiled_jar

SOURCES = Path(__file__).with_name("java")
#: Quick-start options: these JVMs live for seconds and do little work.
JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                "-Dlog4j2.configurationFile=org/apache/spark/log4j2-defaults.properties")
START_SECONDS = 60.0


class JavaError(Exception):
    """A call of the shim threw: the Java exception's class and message."""

    def __init__(self, java_class: str, message: str) -> None:
        super().__init__(f"{java_class}: {message}")
        self.java_class = java_class
        self.message = message


def classpath(*extra: Path) -> str:
    """The shim jar, ``extra`` and Spark's jars, as a JVM started by a test sees them."""
    spark_jars = shim_build.find_spark_jars()
    return os.pathsep.join([spark_steward.jar_path(), *map(str, extra), str(spark_jars / "*")])


def driver_jar() -> Path:
    """The helper's jar, compiled when its sources or Spark's jars changed."""
    return compiled_jar(SOURCES, "conformance-driver.jar")


def read_line(stream: IO[bytes], seconds: float, what: str) -> str:
    """One line the JVM printed within ``seconds``; AssertionError naming ``what`` otherwise."""
    ready, _, _ = select.select([stream], [], [], seconds)
    line = stream.readline().decode() if ready else ""
    if not line:
        raise AssertionError(f"{what}: no answer within {seconds:g}s")
    return line


class JvmDriver:
    """The helper JVM, started at once and warmed in the background (its start and the first
    Hadoop calls take seconds, spent while the Python side's tests run); :meth:`call` sends one
    request and returns its answer."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._failure: str | None = None
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                ["java", *JAVA_OPTIONS, "-cp", classpath(driver_jar()),
                 java_names.CONFORMANCE_DRIVER],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        threading.Thread(target=self._warm, name="conformance-jvm-warm", daemon=True).start()

    def _warm(self) -> None:
        """Waits for the JVM's first line, then has it load what the suites use."""
        try:
            assert self.proc.stdout is not None
            first = read_line(self.proc.stdout, START_SECONDS, "the conformance JVM's start")
            assert json.loads(first) == {"ready": True}, first
            with tempfile.TemporaryDirectory() as scratch, self._lock:
                offsets = Path(scratch) / "location" / "offsets"
                offsets.mkdir(parents=True)
                self._send("files.list", **{"class": java_names.stream_checkpoint_files()},
                           folder=f"file:{offsets}")
        except BaseException as e:  # reported by the first call
            self._failure = f"{e}\n{self.log.read_text()[-3000:]}"
        finally:
            self._ready.set()

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """The answer to ``op``; JavaError when the shim threw."""
        reply = self.answer(op, **fields)
        if "error" in reply:
            raise JavaError(reply["error"], reply["message"])
        return reply

    def answer(self, op: str, **fields: Any) -> dict[str, Any]:
        """The answer to ``op`` as it came, an ``error`` included."""
        if not self._ready.wait(START_SECONDS):
            raise AssertionError("the conformance JVM did not start")
        if self._failure is not None:
            raise AssertionError(f"the conformance JVM did not start: {self._failure}")
        with self._lock:
            return self._send(op, **fields)

    def _send(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
        self.proc.stdin.flush()
        return json.loads(read_line(self.proc.stdout, 60, f"the conformance JVM's {op}"))

    def close(self) -> None:
        self._ready.wait(START_SECONDS)
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def decoded(reply: dict[str, Any], field: str = "data") -> bytes:
    """Bytes the helper sent base64-encoded."""
    return base64.b64decode(reply[field])
