"""The data path of the checkpoint store: a DataFrame's partitions written from the executors
into checksummed files, and read back as a DataFrame.

Everything runs in the JVM (``io.sparksteward.shim.CheckpointData``): one Spark job whose tasks
each write their partition to one file, with no Python worker in the way. This module passes
URLs, names and the JSON records across py4j and turns JVM failures into
:class:`~spark_steward.errors.CheckpointError`.

File format (integers little-endian): a 12-byte header ``"SSCK" | int32 version (1) | int32
fields``, then blocks ``int32 payload length | int32 rows | int32 crc32c(payload) | payload`` of
at most ~1 MiB of rows, each row ``int32 length | UnsafeRow bytes``. Readers verify each block
before emitting any of its rows, and the row count, size and whole-file crc32c at its end.

Every partition writes exactly one file, also an empty one (12 bytes, 0 rows), so a restore
has as many partitions as the DataFrame had. Task attempts that did not count (retries,
speculation) may leave files ``part-<partition>-<tag>-<attempt>`` and hidden temporaries
``.part-*.tmp`` in the folder: only the returned :class:`DataFile` records count, and the caller
deletes the rest.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, cast

from spark_steward.errors import CheckpointError

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DATA_CLASS = "io.sparksteward.shim.CheckpointData"
JAVA_ERROR_PREFIX = "spark-steward: checkpoint data "

# fsspec protocol -> Hadoop scheme, where they differ.
_HADOOP_SCHEMES = {"s3": "s3a", "s3n": "s3a", "gcs": "gs", "local": "file"}
# fsspec protocols that no Hadoop FileSystem on an executor can write.
_NOT_HADOOP = frozenset({"memory", "http", "https", "zip", "tar", "github", "git", "data",
                         "reference", "cached", "simplecache", "filecache", "blockcache", "dir",
                         "libarchive", "jupyter", "dask", "az"})


@dataclass(frozen=True)
class DataFile:
    """One written partition: what a reader verifies the file against."""

    partition: int
    name: str  # file name inside the data folder
    rows: int
    bytes: int
    crc32c: str  # crc32c of the whole file, 8 lower-case hex digits


def hadoop_url(storage_url: str) -> str:
    """The URL Spark's executors open for the fsspec ``storage_url`` (``s3://`` is ``s3a://``);
    CheckpointError for storage only this process can see (``memory://``) or reach."""
    if "::" in storage_url:
        raise CheckpointError(
            f"checkpoint data needs a filesystem Spark's executors can write: {storage_url} is a "
            "chained fsspec URL; use the underlying URL (file://, hdfs://, s3a://, gs://, ...)")
    if "://" not in storage_url:
        return Path(os.path.abspath(storage_url)).as_uri()
    scheme, rest = storage_url.split("://", 1)
    scheme = scheme.lower()
    if scheme in _NOT_HADOOP:
        raise CheckpointError(
            f"checkpoint data needs a filesystem Spark's executors can write: {storage_url} "
            f"({scheme}://) is not one; set spark.steward.storage.dir to a file://, hdfs://, "
            "s3a://, gs:// or abfss:// URL all executors share")
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"


# -- JVM access -----------------------------------------------------------------------------

_lock = threading.Lock()
_on_executors: set[str] = set()  # application ids whose executors can load the shim
_shims: dict[str, "_Shim"] = {}


def _jar_name() -> str:
    from spark_steward.spark import shim_build

    return shim_build.JAR_NAME


def _jar_file(sc: "SparkContext") -> str:
    from spark_steward.config import SHIM_JAR
    from spark_steward.spark.shim import jar_path

    return str(jar_path(sc.getConf().get(SHIM_JAR.name, "") or ""))


def _executors_have_jar(sc: "SparkContext") -> bool:
    name = _jar_name()
    listed = str(sc._jsc.sc().listJars().mkString("\n"))  # type: ignore[union-attr]
    if any(entry.rsplit("/", 1)[-1] == name for entry in listed.splitlines()):
        return True
    extra = sc.getConf().get("spark.executor.extraClassPath", "") or ""
    return name in extra


def ensure_on_executors(sc: "SparkContext") -> None:
    """Makes the shim jar loadable by this context's executors (``sc.addJar``) when it is not in
    ``spark.jars`` or the executor class path. Idempotent; cheap after the first call."""
    app = str(sc.applicationId)
    with _lock:
        if app in _on_executors:
            return
        if not _executors_have_jar(sc):
            jar = _jar_file(sc)
            log.info("spark-steward: adding %s to the executors for checkpoint data", jar)
            sc._jsc.sc().addJar(jar)  # type: ignore[union-attr]
        _on_executors.add(app)


class _Shim:
    """Static methods of CheckpointData: straight through py4j when the class is on the driver
    class path, else by reflection on the class loaded from the jar."""

    def __init__(self, sc: "SparkContext") -> None:
        from py4j.java_gateway import JavaClass

        self._gateway: Any = cast(Any, sc._gateway)
        jvm: Any = cast(Any, sc._jvm)
        obj: Any = jvm
        for part in DATA_CLASS.split("."):
            obj = getattr(obj, part)
        self._direct: Any = obj if isinstance(obj, JavaClass) else None
        self._methods: dict[str, Any] = {}
        if self._direct is None:
            jar = _jar_file(sc)
            urls = self._gateway.new_array(jvm.java.net.URL, 1)
            urls[0] = jvm.java.io.File(jar).toURI().toURL()
            parent = sc._jsc.sc().getClass().getClassLoader()  # type: ignore[union-attr]
            java_class = jvm.java.net.URLClassLoader(urls, parent).loadClass(DATA_CLASS)
            for method in java_class.getMethods():
                self._methods[str(method.getName())] = method
            log.info("spark-steward: loaded %s from %s (not on the driver class path)",
                     DATA_CLASS, jar)

    def call(self, name: str, *args: Any) -> Any:
        if self._direct is not None:
            return getattr(self._direct, name)(*args)
        jvm: Any = self._gateway.jvm
        array = self._gateway.new_array(jvm.java.lang.Object, len(args))
        for i, arg in enumerate(args):
            array[i] = arg
        try:
            return self._methods[name].invoke(None, array)
        except Exception as exc:  # unwrap InvocationTargetException for the message
            _unwrap_invocation(exc)
            raise


def _unwrap_invocation(exc: BaseException) -> None:
    from py4j.protocol import Py4JJavaError

    if isinstance(exc, Py4JJavaError):
        target = exc.java_exception
        if "InvocationTargetException" in str(target.getClass().getName()) \
                and target.getCause() is not None:
            exc.java_exception = target.getCause()


def _shim(sc: "SparkContext") -> _Shim:
    app = str(sc.applicationId)
    with _lock:
        shim = _shims.get(app)
        if shim is None:
            shim = _shims[app] = _Shim(sc)
        return shim


def java_message(exc: BaseException) -> str:
    """The JVM's own words for a Py4JJavaError, one line, no stack trace: the spark-steward
    message if one is in the chain (also inside a task failure), else the first line."""
    texts: list[str] = []
    java = getattr(exc, "java_exception", None)
    seen = 0
    while java is not None and seen < 20:
        try:
            texts.append(str(java.toString()))
            java = java.getCause()
        except Exception:  # a dead gateway: take what we have
            break
        seen += 1
    if not texts:
        texts.append(str(exc))
    for text in texts:
        at = text.find(JAVA_ERROR_PREFIX)
        if at >= 0:
            return text[at:].splitlines()[0].strip()
    return texts[0].strip().splitlines()[0].strip() if texts[0].strip() else type(exc).__name__


# -- the data path ----------------------------------------------------------------------------

def write_dataframe(df: "DataFrame", data_url: str) -> list[DataFile]:
    """Writes every partition of ``df`` into the folder ``data_url`` (a Hadoop URL, see
    :func:`hadoop_url`) in one Spark job; returns one record per partition, by partition.

    Files not named in the result (failed or speculative attempts) may be in the folder."""
    from py4j.protocol import Py4JJavaError

    if getattr(df, "_jdf", None) is None:
        raise CheckpointError("checkpoint data needs a classic (non Spark Connect) DataFrame")
    sc = df.sparkSession.sparkContext
    ensure_on_executors(sc)
    tag = uuid.uuid4().hex[:12]
    try:
        out = _shim(sc).call("write", df._jdf, data_url, tag)
    except Py4JJavaError as exc:
        raise CheckpointError(
            f"writing checkpoint data to {data_url} failed: {java_message(exc)}") from None
    files = [DataFile(partition=int(r["partition"]), name=str(r["name"]), rows=int(r["rows"]),
                      bytes=int(r["bytes"]), crc32c=str(r["crc32c"]))
             for r in json.loads(str(out))]
    return sorted(files, key=lambda f: f.partition)


def read_dataframe(spark: "SparkSession", data_url: str, files: Sequence[DataFile],
                   schema_json: str) -> "DataFrame":
    """A DataFrame over ``files`` in the folder ``data_url``: one partition per file, in
    partition order. Lazy: a missing, short or corrupt file fails the action that reads it,
    with an IOException naming the file URL and what failed."""
    from py4j.protocol import Py4JJavaError
    from pyspark.sql import DataFrame

    ordered = sorted(files, key=lambda f: f.partition)
    lines = []
    for f in ordered:
        if not f.name or any(c.isspace() for c in f.name) or "/" in f.name:
            raise CheckpointError(f"checkpoint data file name {f.name!r} is not a plain name")
        try:
            crc = int(f.crc32c, 16)
        except (TypeError, ValueError):
            crc = -1
        if not 0 <= crc <= 0xFFFFFFFF:
            raise CheckpointError(f"checkpoint data file {f.name}: crc32c {f.crc32c!r} is not "
                                  "8 hex digits")
        lines.append(f"{f.name} {int(f.bytes)} {int(f.rows)} {crc:x}")
    listing = "\n".join(lines)
    if not isinstance(schema_json, str):  # a StructType also works
        schema_json = schema_json.json()
    sc = spark.sparkContext
    ensure_on_executors(sc)
    try:
        jdf = _shim(sc).call("read", spark._jsparkSession, data_url, listing, schema_json)
    except Py4JJavaError as exc:
        raise CheckpointError(
            f"reading checkpoint data from {data_url} failed: {java_message(exc)}") from None
    return DataFrame(jdf, spark)
