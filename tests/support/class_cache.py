"""The test JVMs' options: quick start and one class-data-sharing archive.

Every driver, executor and pyspark gateway a test starts takes the options of :func:`install`:
the C1 compiler alone and one GC thread, and, once :func:`ensure_archive` has dumped the classes
a PySpark job loads (Spark, Scala, Netty, Parquet, Hadoop's client) into a CDS archive, that
archive mapped instead of those classes loaded and verified again. A local-cluster job of
tests/support/warm_jvm.py took 31.5 CPU-s with the quick options alone and 22.4 with the
archive too (two runs each); the suite starts ~100 applications.

The archive is valid only for the class path it was dumped with, and Java refuses a class path
with a non-empty directory in it, while spark-submit always puts SPARK_CONF_DIR there. So the
run's SPARK_CONF_DIR is an empty folder (a developer's own conf stays out of the tests), and
the options travel in ``SPARK_SUBMIT_OPTS`` (the driver's JVM; the executors' options as the
``spark.executor.extraJavaOptions`` system property the driver's SparkConf reads). Both live in
one folder per Java binary, Spark jars and options under ``~/.cache/spark-steward/test-jvm``,
reused by later runs and shared by concurrent ones (a lock lets one process dump while the
others wait). A test's own ``--conf`` or SPARK_CONF_DIR replaces them; a JVM whose class path
differs (another Spark line, another conf dir) ignores the archive, silently (-Xlog:cds*=off).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: C1 alone and one GC thread: short-lived JVMs take about half the CPU to start on 2 cores.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
WARM_JOB = Path(__file__).parent / "warm_jvm.py"
DUMP_TIMEOUT = 240.0


def _spark_home() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed")
    return Path(os.environ.get("SPARK_HOME") or os.path.dirname(spec.origin))


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def folder() -> Path:
    """This machine's folder for the current Java, Spark jars and options."""
    java = _java()
    real = os.path.realpath(java) if java else "no-java"
    jars = _spark_home() / "jars"
    try:
        stamp = str(os.stat(real).st_mtime_ns) if java else ""
        names = sorted(p.name for p in jars.iterdir())
    except OSError:
        stamp, names = "", []
    key = "\n".join([real, stamp, str(jars), *names, QUICK_JVM])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "spark-steward" / "test-jvm" / hashlib.sha256(key.encode()).hexdigest()[:16]


def conf_dir() -> Path:
    """The test JVMs' SPARK_CONF_DIR: an empty folder (see the module docstring)."""
    conf = folder() / "empty-conf"
    conf.mkdir(parents=True, exist_ok=True)
    return conf


def _archive() -> Path:
    return folder() / "spark.jsa"


def java_options() -> str:
    """Options for a test JVM: quick start, and the archive once there is one."""
    archive = _archive()
    return QUICK_JVM + (f" -XX:SharedArchiveFile={archive} -Xlog:cds*=off"
                        if archive.is_file() else "")


def install(env: "os._Environ[str] | dict[str, str]") -> None:
    """Points ``env``'s Spark at the test JVMs' conf dir and options."""
    options = java_options()
    env["SPARK_CONF_DIR"] = str(conf_dir())
    env["SPARK_SUBMIT_OPTS"] = f'{options} "-Dspark.executor.extraJavaOptions={options}"'


def ensure_archive() -> Path | None:
    """The archive, dumped first if this machine has none yet (30-50 s, once); None where
    it cannot be made (no Java, a failed dump: the tests then run without it)."""
    archive = _archive()
    if not archive.is_file() and _java() is not None:
        conf = conf_dir()  # makes the folder too
        with open(folder() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker or run may be dumping it
            if not archive.is_file():
                _dump(conf, archive)
    return archive if archive.is_file() else None


def _dump(conf: Path, archive: Path) -> None:
    partial = archive.with_name(f".spark-{os.getpid()}.jsa")
    submit = _spark_home() / "bin" / "spark-submit"
    executor_dirs = _spark_home() / "work"  # where local-cluster puts them, whatever is set
    before = set(os.listdir(executor_dirs)) if executor_dirs.is_dir() else set()
    env = dict(os.environ, SPARK_CONF_DIR=str(conf), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_STEWARD_AUTOLOAD="0",
               SPARK_SUBMIT_OPTS="")
    env.pop("SPARK_REMOTE", None)
    with tempfile.TemporaryDirectory(prefix="spark-steward-warm-") as work:
        try:
            done = subprocess.run(
                [str(submit), "--master", "local-cluster[1,1,1024]",
                 "--driver-java-options", f"{QUICK_JVM} -XX:ArchiveClassesAtExit={partial}",
                 "--conf", "spark.ui.enabled=false", "--conf", f"spark.local.dir={work}",
                 str(WARM_JOB), work],
                env=env, capture_output=True, text=True, timeout=DUMP_TIMEOUT)
        except subprocess.TimeoutExpired:
            done = None
    if executor_dirs.is_dir():
        for name in set(os.listdir(executor_dirs)) - before:
            if name.startswith("app-"):
                shutil.rmtree(executor_dirs / name, ignore_errors=True)
    if done is not None and done.returncode == 0 and partial.is_file() \
            and partial.stat().st_size:
        os.replace(partial, archive)
    else:
        partial.unlink(missing_ok=True)
        detail = "timed out" if done is None else done.stderr[-1500:]
        print(f"tests: no CDS archive for the test JVMs ({detail})", file=sys.stderr)
