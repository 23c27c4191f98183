"""Static methods of the shim's Java classes, called from the driver, and the Hadoop URLs the
executors open: shared by the checkpoint data path and cached tables.

A shim class is reached straight through py4j when the jar is on the driver class path
(``spark.jars`` or the plugin), else by reflection on the class loaded from the jar.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from spark_steward.errors import StewardError

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

#: The prefix of every message the shim's Java code raises for users.
JAVA_ERROR_PREFIX = "spark-steward: "

# fsspec protocol -> Hadoop scheme, where they differ.
_HADOOP_SCHEMES = {"s3": "s3a", "s3n": "s3a", "gcs": "gs", "local": "file"}
# fsspec protocols that no Hadoop FileSystem on an executor can write.
_NOT_HADOOP = frozenset({"memory", "http", "https", "zip", "tar", "github", "git", "data",
                         "reference", "cached", "simplecache", "filecache", "blockcache", "dir",
                         "libarchive", "jupyter", "dask", "az"})


def hadoop_url(storage_url: str, what: str = "checkpoint data",
               error: type[StewardError] = StewardError) -> str:
    """The URL Spark's executors open for the fsspec ``storage_url`` (``s3://`` is ``s3a://``);
    ``error`` (naming ``what`` needs it) for storage only this process can see (``memory://``)."""
    if "::" in storage_url:
        raise error(
            f"{what} needs a filesystem Spark's executors can write: {storage_url} is a "
            "chained fsspec URL; use the underlying URL (file://, hdfs://, s3a://, gs://, ...)")
    if "://" not in storage_url:
        return Path(os.path.abspath(storage_url)).as_uri()
    scheme, rest = storage_url.split("://", 1)
    scheme = scheme.lower()
    if scheme in _NOT_HADOOP:
        raise error(
            f"{what} needs a filesystem Spark's executors can write: {storage_url} "
            f"({scheme}://) is not one; set spark.steward.storage.dir to a file://, hdfs://, "
            "s3a://, gs:// or abfss:// URL all executors share")
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"


# -- JVM access -----------------------------------------------------------------------------

_lock = threading.Lock()
_on_executors: set[str] = set()  # application ids whose executors can load the shim
_shims: dict[tuple[str, str], "ShimClass"] = {}


def _jar_name() -> str:
    from spark_steward.kernel import shim_build

    return shim_build.JAR_NAME


def _jar_file(sc: "SparkContext") -> str:
    from spark_steward.config import SHIM_JAR
    from spark_steward.kernel.shim import jar_path

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
            log.info("spark-steward: adding %s to the executors", jar)
            sc._jsc.sc().addJar(jar)  # type: ignore[union-attr]
        _on_executors.add(app)


class ShimClass:
    """Static methods of one shim class: straight through py4j when the class is on the driver
    class path, else by reflection on the class loaded from the jar."""

    def __init__(self, sc: "SparkContext", class_name: str) -> None:
        from py4j.java_gateway import JavaClass

        self._gateway: Any = cast(Any, sc._gateway)
        jvm: Any = cast(Any, sc._jvm)
        obj: Any = jvm
        for part in class_name.split("."):
            obj = getattr(obj, part)
        self._direct: Any = obj if isinstance(obj, JavaClass) else None
        self._methods: dict[str, Any] = {}
        if self._direct is None:
            jar = _jar_file(sc)
            urls = self._gateway.new_array(jvm.java.net.URL, 1)
            urls[0] = jvm.java.io.File(jar).toURI().toURL()
            parent = sc._jsc.sc().getClass().getClassLoader()  # type: ignore[union-attr]
            java_class = jvm.java.net.URLClassLoader(urls, parent).loadClass(class_name)
            for method in java_class.getMethods():
                self._methods[str(method.getName())] = method
            log.info("spark-steward: loaded %s from %s (not on the driver class path)",
                     class_name, jar)

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


def shim_class(sc: "SparkContext", class_name: str) -> ShimClass:
    """The static methods of shim class ``class_name`` for this context (cached per context)."""
    key = (str(sc.applicationId), class_name)
    with _lock:
        shim = _shims.get(key)
        if shim is None:
            shim = _shims[key] = ShimClass(sc, class_name)
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
