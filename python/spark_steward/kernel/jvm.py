"""The one module that touches py4j and ``sc._jvm``.

Everything crossing into the JVM goes through :class:`SparkJvm`; the rest of the package works
with plain Python values. py4j types appear only under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from spark_steward.errors import SetupError

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject
    from pyspark import SparkContext

log = logging.getLogger(__name__)

BRIDGE_CLASS = "io.sparksteward.shim.EventBridge"
PLUGIN_CLASS = "io.sparksteward.shim.StewardPlugin"


class EventBridgeHandle:
    """Python side of the shim's EventBridge: drain batches (which carry the counters), flush."""

    def __init__(self, java_bridge: "JavaObject", *, from_plugin: bool) -> None:
        self._bridge = java_bridge
        self.from_plugin = from_plugin

    def drain(self, max_events: int, wait_millis: int) -> str:
        return str(self._bridge.drain(max_events, wait_millis))

    def flush(self, timeout_millis: int) -> int:
        """Waits for Spark's listener bus to hand over every posted event; -1 on timeout."""
        return int(self._bridge.flush(timeout_millis))


class SparkJvm:
    """JVM access for one SparkContext."""

    def __init__(self, sc: "SparkContext") -> None:
        if (getattr(sc, "_jsc", None) is None or getattr(sc, "_jvm", None) is None
                or getattr(sc, "_gateway", None) is None):
            raise SetupError("the SparkContext has no JVM (stopped, or a Spark Connect client); "
                             "spark-steward needs a classic SparkContext")
        self.sc = sc
        self._jvm: Any = sc._jvm
        self._gateway: Any = sc._gateway

    # -- facts -----------------------------------------------------------------------------

    def conf_pairs(self) -> list[tuple[str, str]]:
        return [(str(k), str(v)) for k, v in self.sc.getConf().getAll()]

    def has_plugin_api(self) -> bool:
        return self._find_class("org.apache.spark.api.plugin.SparkPlugin") is not None

    def shim_on_classpath(self) -> bool:
        return self._find_class(BRIDGE_CLASS) is not None

    def driver_host(self) -> str:
        return str(self.sc.getConf().get("spark.driver.host", "127.0.0.1"))

    # -- event bridge ------------------------------------------------------------------------

    def event_bridge(self, jar_path: str | None) -> EventBridgeHandle:
        """The bridge the plugin installed, else installs one now (from ``jar_path`` if the
        shim is not on the driver classpath). Events before a late install are not seen."""
        java_class = self._find_class(BRIDGE_CLASS)
        if java_class is not None:
            before = java_class.current()
            bridge = java_class.install(self.sc._jsc.sc())  # idempotent per SparkContext
            return EventBridgeHandle(bridge, from_plugin=before is not None and before.equals(bridge))
        if not jar_path:
            raise SetupError(
                f"the JVM shim class {BRIDGE_CLASS} is not on the driver classpath and no jar was "
                "found; add `--conf spark.jars=$(spark-steward jar)` or reinstall spark-steward")
        return EventBridgeHandle(self._install_from_jar(jar_path), from_plugin=False)

    def _install_from_jar(self, jar_path: str) -> "JavaObject":
        jvm, gw = self._jvm, self._gateway
        urls = gw.new_array(jvm.java.net.URL, 1)
        urls[0] = jvm.java.io.File(jar_path).toURI().toURL()
        parent = self.sc._jsc.sc().getClass().getClassLoader()
        loader = jvm.java.net.URLClassLoader(urls, parent)
        java_class = loader.loadClass(BRIDGE_CLASS)
        arg_types = gw.new_array(jvm.java.lang.Class, 1)
        arg_types[0] = self.sc._jsc.sc().getClass()
        args = gw.new_array(jvm.java.lang.Object, 1)
        args[0] = self.sc._jsc.sc()
        log.info("spark-steward: loaded the JVM shim from %s (plugin not configured)", jar_path)
        return java_class.getMethod("install", arg_types).invoke(None, args)

    def _find_class(self, name: str) -> Any:
        from py4j.java_gateway import JavaClass

        obj: Any = self._jvm
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj if isinstance(obj, JavaClass) else None
