"""The one door to the JVM: the only module that imports py4j or reads pyspark's JVM handles
(``sc._jvm``, ``sc._gateway``, ``sc._jsc``, ``df._jdf``, ``spark._jsparkSession``,
``rdd._jrdd``).

The shim offers Python one class, ``io.sparksteward.shim.PythonFacade``; :func:`call` invokes
its static methods. It is reached straight through py4j when the shim is on the driver class
path (the plugin or ``spark.jars``), else loaded from the jar by ONE ``URLClassLoader`` per
SparkContext (cached per application) and called by reflection, so every shim class the driver
uses lives in that one loader.

Capabilities get opaque handles from the conversion helpers (:func:`dataframe_handle`,
:func:`session_handle`, :func:`context_handle`, :func:`hadoop_conf`, ...), pass them to
:func:`call` and wrap what comes back (:func:`to_dataframe`, :func:`to_rdd`). JVM failures
become :class:`~spark_steward.errors.StewardError` subclasses in one place (:func:`translate`,
``call(..., error=...)``) with the JVM's own words (:func:`java_message`), and
:func:`release` drops py4j references early. py4j types appear only under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, cast

from spark_steward.errors import SetupError, StewardError

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject
    from pyspark import RDD, Broadcast, SparkContext
    from pyspark.serializers import Serializer
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

FACADE_CLASS = "io.sparksteward.shim.PythonFacade"
PLUGIN_CLASS = "io.sparksteward.shim.StewardPlugin"
#: The shim's Spark Connect server extensions (``spark-steward conf --server`` sets each key),
#: compiled only against lines with Connect: the thin client's commands, the interceptor that
#: releases what a session cached and added when it ends, and the extension that reads a
#: session's transparently cached tables.
CONNECT_COMMAND_CLASS = "io.sparksteward.shim.connect.StewardCommands"
CONNECT_EXTENSIONS = (("spark.connect.extensions.command.classes", CONNECT_COMMAND_CLASS),
                      ("spark.connect.grpc.interceptor.classes",
                       "io.sparksteward.shim.connect.SessionCaches"),
                      ("spark.sql.extensions", "io.sparksteward.shim.connect.TransparentCaches"))

#: The prefix of every message the shim's Java code raises for users.
JAVA_ERROR_PREFIX = "spark-steward: "

_NO_JVM = ("the SparkContext has no JVM (stopped, or a Spark Connect client); "
           "spark-steward needs a classic SparkContext")


# -- the facade ---------------------------------------------------------------------------------

class Facade:
    """The static methods of ``PythonFacade`` for one SparkContext: straight through py4j when
    the class is on the driver class path, else by reflection on the class loaded from the jar
    (``jar``, or the jar :func:`spark_steward.kernel.shim.jar_path` finds)."""

    def __init__(self, sc: "SparkContext", jar: str | None = None) -> None:
        require_jvm(sc)
        self.sc = sc
        self._gateway: Any = cast(Any, sc._gateway)
        self._direct: Any = _find_class(sc, FACADE_CLASS)
        self._methods: dict[str, Any] = {}
        self.jar: str | None = None
        if self._direct is None:
            jvm: Any = cast(Any, sc._jvm)
            jar = jar or _jar_file(sc)
            urls = self._gateway.new_array(jvm.java.net.URL, 1)
            urls[0] = jvm.java.io.File(jar).toURI().toURL()
            parent = sc._jsc.sc().getClass().getClassLoader()  # type: ignore[union-attr]
            java_class = jvm.java.net.URLClassLoader(urls, parent).loadClass(FACADE_CLASS)
            for method in java_class.getMethods():
                self._methods[str(method.getName())] = method
            self.jar = jar
            log.info("spark-steward: loaded the JVM shim from %s (not on the driver class path: "
                     "plugin not configured)", jar)

    @property
    def on_classpath(self) -> bool:
        """Whether the shim is on the driver class path (not loaded from the jar by us)."""
        return self._direct is not None

    def call(self, method: str, *args: Any) -> Any:
        """Calls ``method`` of the shim's facade with ``args``."""
        if self._direct is not None:
            return getattr(self._direct, method)(*args)
        jvm: Any = self._gateway.jvm
        array = self._gateway.new_array(jvm.java.lang.Object, len(args))
        for i, arg in enumerate(args):
            # A Python callback (its class declares ``Java``; a JavaObject only fakes the
            # attribute on instances): only a method call passes one over.
            if hasattr(type(arg), "Java"):
                jvm.java.lang.reflect.Array.set(array, i, arg)
            else:
                array[i] = arg
        try:
            return self._methods[method].invoke(None, array)
        except Exception as exc:  # unwrap InvocationTargetException for the message
            _unwrap_invocation(exc)
            raise
        finally:
            release(array)


_lock = threading.Lock()
_facades: dict[str, Facade] = {}  # application id -> the facade of its SparkContext
_on_executors: set[str] = set()  # application ids whose executors can load the shim


def facade(sc: "SparkContext", jar: str | None = None) -> Facade:
    """The facade of ``sc`` (created once per application; ``jar`` is used only then)."""
    app = str(sc.applicationId)
    with _lock:
        found = _facades.get(app)
        if found is None or found.sc is not sc:
            found = _facades[app] = Facade(sc, jar)
        return found


def forget_facade(app_id: str) -> None:
    """Drops the facade of application ``app_id`` (at detach, when its context may be stopped
    already), so a stopped context is not kept alive."""
    with _lock:
        _facades.pop(app_id, None)


def call(sc: "SparkContext", method: str, *args: Any,
         error: type[StewardError] | None = None, what: str = "") -> Any:
    """``PythonFacade.<method>(*args)`` for ``sc``. With ``error``, a JVM failure raises
    ``error(f"{what}: {java_message}")`` (see :func:`translate`)."""
    if error is None:
        return facade(sc).call(method, *args)
    with translate(error, what):
        return facade(sc).call(method, *args)


def shim_on_classpath(sc: "SparkContext") -> bool:
    """Whether the shim's facade is on the driver class path (the plugin or ``spark.jars``)."""
    return _find_class(sc, FACADE_CLASS) is not None


def has_class(sc: "SparkContext", name: str) -> bool:
    """Whether the JVM of ``sc`` can load class ``name`` through py4j."""
    return _find_class(sc, name) is not None


def _find_class(sc: "SparkContext", name: str) -> Any:
    from py4j.java_gateway import JavaClass

    obj: Any = sc._jvm
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj if isinstance(obj, JavaClass) else None


def require_jvm(sc: Any) -> None:
    """SetupError unless ``sc`` is a classic SparkContext with a live JVM."""
    if (getattr(sc, "_jsc", None) is None or getattr(sc, "_jvm", None) is None
            or getattr(sc, "_gateway", None) is None):
        raise SetupError(_NO_JVM)


# -- a context about to start ------------------------------------------------------------------

def _conf_list(jconf: Any, key: str) -> list[str]:
    raw = str(jconf.get(key, ""))
    return [item.strip() for item in raw.split(",") if item.strip()]


def enroll_shim(sc: "SparkContext", jconf: Any, jar: str) -> list[str]:
    """Adds the plugin and the shim jar to the conf of a SparkContext about to start, after
    whatever is there already: the platform's spark-defaults.conf, a ``--properties-file``,
    ``--jars`` and ``--conf`` all reach ``jconf`` first, so nothing of theirs is replaced. The
    jar also joins the driver's class loader (the one SparkContext loads plugins with) when the
    plugin class is not loadable yet. ``sc`` is the context being built (its JVM gateway is up,
    its JVM SparkContext not yet). Returns the keys changed, for the log."""
    jvm: Any = sc._jvm
    changed = []
    plugins = _conf_list(jconf, "spark.plugins")
    if PLUGIN_CLASS not in plugins + _conf_list(jconf, "spark.plugins.defaultList"):
        jconf.set("spark.plugins", ",".join([*plugins, PLUGIN_CLASS]))
        changed.append("spark.plugins")
    jars = _conf_list(jconf, "spark.jars")
    name = os.path.basename(jar)
    if not any(entry.rstrip("/").rsplit("/", 1)[-1] == name for entry in jars):
        jconf.set("spark.jars", ",".join([*jars, jar]))
        changed.append("spark.jars")
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    from py4j.protocol import Py4JError

    try:
        jvm.java.lang.Class.forName(PLUGIN_CLASS, False, loader)
        return changed
    except Py4JError:
        pass
    try:
        loader.addURL(jvm.java.io.File(jar).toURI().toURL())
    except Py4JError as exc:
        raise SetupError(
            f"spark-steward cannot add its JVM shim {jar} to the driver's class loader "
            f"({loader.getClass().getName()}: {java_message(exc)}); pass it yourself with "
            f"--jars {jar} (or spark.jars)") from None
    changed.append("driver class path")
    return changed


# -- the shim on executors ----------------------------------------------------------------------

def _jar_file(sc: "SparkContext") -> str:
    from spark_steward.config import SHIM_JAR
    from spark_steward.kernel.shim import jar_path

    return str(jar_path(sc.getConf().get(SHIM_JAR.name, "") or ""))


def _executors_have_jar(sc: "SparkContext") -> bool:
    from spark_steward.kernel import shim_build

    name = shim_build.JAR_NAME
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


# -- handles --------------------------------------------------------------------------------------

def context_handle(sc: "SparkContext") -> Any:
    """The JVM SparkContext (Scala's) of ``sc``."""
    return sc._jsc.sc()  # type: ignore[union-attr]


def hadoop_conf(sc: "SparkContext") -> Any:
    """The Hadoop Configuration of ``sc`` (shipped to the executors with every job)."""
    return sc._jsc.hadoopConfiguration()  # type: ignore[union-attr]


def session_handle(spark: "SparkSession") -> Any:
    """The JVM SparkSession of ``spark``."""
    return spark._jsparkSession  # type: ignore[attr-defined]


def session_uuid(spark: "SparkSession") -> str:
    """The JVM SparkSession's ``sessionUUID``."""
    return str(spark._jsparkSession.sessionUUID())  # type: ignore[attr-defined]


def is_classic(df: Any) -> bool:
    """Whether ``df`` is a classic DataFrame, one with a JVM Dataset (not Spark Connect)."""
    return getattr(df, "_jdf", None) is not None


def dataframe_handle(df: "DataFrame") -> Any:
    """The JVM Dataset of the classic DataFrame ``df``."""
    return df._jdf  # type: ignore[attr-defined]


def pop_dataframe_handle(df: "DataFrame") -> Any:
    """Takes the JVM Dataset out of ``df``'s own attributes (to give ``df`` another class)."""
    return df.__dict__.pop("_jdf")


def put_dataframe_handle(df: "DataFrame", handle: Any) -> None:
    """Stores ``handle`` as ``df``'s JVM Dataset in its own attributes."""
    df.__dict__["_jdf"] = handle


def to_dataframe(handle: Any, spark: "SparkSession") -> "DataFrame":
    """A classic pyspark DataFrame over the JVM Dataset ``handle``."""
    from spark_steward.kernel.compat import classic_dataframe_class

    return classic_dataframe_class()(handle, spark)


def session_over(handle: Any, sc: "SparkContext") -> "SparkSession":
    """A classic pyspark SparkSession over the JVM session ``handle`` (a Connect session's, for
    the thin client's commands). The process's own session is made first when there is none,
    so this one never becomes the JVM's default or active session."""
    from pyspark.sql import SparkSession

    if SparkSession._instantiatedSession is None:  # type: ignore[attr-defined]
        SparkSession(sc)  # wraps the driver's default session
    return SparkSession(sc, jsparkSession=handle)


def rdd_handle(rdd: "RDD[Any]") -> Any:
    """The JavaRDD of ``rdd``."""
    return rdd._jrdd


def to_rdd(handle: Any, sc: "SparkContext", serializer: "Serializer | None" = None) -> "RDD[Any]":
    """A pyspark RDD over the JavaRDD ``handle`` (raw ``bytes`` elements by default)."""
    from pyspark.serializers import NoOpSerializer

    from spark_steward.kernel.compat import rdd_class

    return rdd_class()(handle, sc, serializer if serializer is not None else NoOpSerializer())


def broadcast_id(broadcast: "Broadcast[Any]") -> int:
    """The id a Python broadcast has in the JVM (and in pickled commands that use it)."""
    return int(broadcast._jbroadcast.id())


def ensure_callback_server(sc: "SparkContext") -> None:
    """Starts py4j's callback server (needed to hand the JVM a Python object) once."""
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(sc._gateway)


# -- the hosted runtime ---------------------------------------------------------------------------

def hosted_context(timeout: float) -> "SparkContext | None":
    """For ``python -m spark_steward.kernel.host``, started by the shim's ``RuntimeHost`` with
    the driver's py4j gateway in its environment: a Python SparkContext wrapping that driver's
    running context (it never builds or stops one), or None when the driver stopped or did not
    finish starting within ``timeout`` seconds."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway: Any = launch_gateway()  # connects to the gateway of PYSPARK_GATEWAY_PORT
    shim: Any = gateway.jvm
    for part in FACADE_CLASS.split("."):
        shim = getattr(shim, part)
    scala_sc = shim.hostedContext(int(timeout * 1000))
    if scala_sc is None:
        return None
    jsc = gateway.jvm.org.apache.spark.api.java.JavaSparkContext(scala_sc)
    # A copy of the driver's conf: pyspark sets its defaults into the conf it is given.
    return SparkContext(gateway=gateway, jsc=jsc, conf=SparkConf(_jconf=jsc.getConf()))


def ping(sc: "SparkContext") -> None:
    """A round trip into ``sc``'s JVM: raises when the gateway no longer answers."""
    cast(Any, sc._jvm).java.lang.System.currentTimeMillis()


def release(*objects: Any) -> None:
    """Drops py4j's references to JVM objects now instead of at Python's next GC."""
    for obj in objects:
        if obj is not None and hasattr(obj, "_detach"):
            try:
                obj._detach()
            except Exception:  # the gateway is gone: so is the reference
                pass


def option_value(option: Any) -> str | None:
    """The value of a Scala ``Option`` as a string, None when empty; releases the option."""
    try:
        return str(option.get()) if option.isDefined() else None
    finally:
        release(option)


# -- errors ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def translate(error: type[StewardError], what: str) -> Iterator[None]:
    """Turns a JVM failure in the block into ``error(f"{what}: {java_message}")``."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        raise error(f"{what}: {java_message(exc)}") from None


def _unwrap_invocation(exc: BaseException) -> None:
    from py4j.protocol import Py4JJavaError

    if isinstance(exc, Py4JJavaError):
        target = exc.java_exception
        if "InvocationTargetException" in str(target.getClass().getName()) \
                and target.getCause() is not None:
            exc.java_exception = target.getCause()


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


# -- Hadoop URLs ----------------------------------------------------------------------------------

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


# -- log4j ---------------------------------------------------------------------------------------

class Log4jLoggers:
    """The driver JVM's log4j (2.x: Spark 3.5 and 4) loggers by name, for
    :mod:`spark_steward.kernel.logs`. Any method may raise when the gateway is gone."""

    def __init__(self, sc: "SparkContext") -> None:
        require_jvm(sc)
        self._jvm: Any = sc._jvm
        self._loggers: dict[str, Any] = {}
        self._levels: dict[str, Any] = {}

    def _logger(self, name: str) -> Any:
        found = self._loggers.get(name)
        if found is None:
            found = self._loggers[name] = self._jvm.org.apache.logging.log4j.LogManager \
                .getLogger(name)
        return found

    def level(self, name: str) -> str:
        """log4j's effective level of logger ``name`` (``INFO``, ``WARN``, ...)."""
        return str(self._logger(name).getLevel())

    def configured(self, prefix: str) -> list[str]:
        """Names of the loggers the log4j configuration sets that start with ``prefix``
        (empty where the configuration cannot be read)."""
        try:
            context = self._jvm.org.apache.logging.log4j.LogManager.getContext(False)
            names = [str(n) for n in context.getConfiguration().getLoggers().keySet()]
        except Exception:  # not log4j-core: only the prefix's own level is followed
            return []
        return [n for n in names if n == prefix or n.startswith(prefix + ".")]

    def log(self, name: str, level: str, message: str) -> None:
        """``LogManager.getLogger(name).log(Level.<level>, message)``."""
        jlevel = self._levels.get(level)
        if jlevel is None:
            jlevel = self._levels[level] = self._jvm.org.apache.logging.log4j.Level \
                .getLevel(level)
        self._logger(name).log(jlevel, message)

    def close(self) -> None:
        """Releases the JVM logger handles."""
        release(*self._loggers.values(), *self._levels.values())
        self._loggers.clear()
        self._levels.clear()


# -- the driver runtime's view ------------------------------------------------------------------

class EventBridgeHandle:
    """Python side of the shim's EventBridge: drain batches (which carry the counters), flush."""

    def __init__(self, shim: Facade, java_bridge: "JavaObject", *, from_plugin: bool) -> None:
        self._shim = shim
        self._bridge = java_bridge
        self.from_plugin = from_plugin

    def drain(self, max_events: int, wait_millis: int) -> str:
        """Up to ``max_events`` buffered Spark events as one payload, waiting up to ``wait_millis``.
        """
        return str(self._shim.call("drainEvents", self._bridge, max_events, wait_millis))

    def flush(self, timeout_millis: int) -> int:
        """Waits for Spark's listener bus to hand over every posted event; -1 on timeout."""
        return int(self._shim.call("flushEvents", self._bridge, timeout_millis))


class SparkJvm:
    """JVM facts and the event bridge for one SparkContext (the driver runtime's view)."""

    def __init__(self, sc: "SparkContext") -> None:
        require_jvm(sc)
        self.sc = sc

    # -- facts -----------------------------------------------------------------------------

    def conf_pairs(self) -> list[tuple[str, str]]:
        """The SparkConf as ``(key, value)`` pairs."""
        return [(str(k), str(v)) for k, v in self.sc.getConf().getAll()]

    def has_plugin_api(self) -> bool:
        """True when this Spark has the plugin API the shim needs."""
        return has_class(self.sc, "org.apache.spark.api.plugin.SparkPlugin")

    def shim_on_classpath(self) -> bool:
        """True when the shim jar is on the driver's classpath."""
        return shim_on_classpath(self.sc)

    def driver_host(self) -> str:
        """``spark.driver.host`` (127.0.0.1 when unset)."""
        return str(self.sc.getConf().get("spark.driver.host", "127.0.0.1"))

    def driver_bind_address(self) -> str:
        """Where the driver's own servers listen: ``spark.driver.bindAddress`` (a container
        behind NAT advertises ``spark.driver.host`` but owns only this address), else the
        advertised host, as Spark does."""
        conf = self.sc.getConf()
        return str(conf.get("spark.driver.bindAddress", None) or self.driver_host())

    def master(self) -> str:
        """The Spark master URL."""
        return str(self.sc.master)

    # -- event bridge ------------------------------------------------------------------------

    def event_bridge(self, jar_path: str | None, capacity: int) -> EventBridgeHandle:
        """The bridge the plugin installed, else installs one now holding up to ``capacity``
        events (from ``jar_path`` if the shim is not on the driver classpath). Events before a
        late install are not seen."""
        if not self.shim_on_classpath() and not jar_path:
            raise SetupError(
                f"the JVM shim class {FACADE_CLASS} is not on the driver classpath and no jar "
                "was found; add `--conf spark.jars=$(spark-steward jar)` or reinstall "
                "spark-steward")
        shim = facade(self.sc, jar_path)
        jsc = context_handle(self.sc)
        before = bool(shim.call("eventBridgeInstalled", jsc))
        bridge = shim.call("installEventBridge", jsc, capacity)  # idempotent per SparkContext
        return EventBridgeHandle(shim, bridge, from_plugin=before and shim.on_classpath)
