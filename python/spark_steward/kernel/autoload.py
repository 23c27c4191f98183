"""Attaches to every new SparkContext whose conf enables spark-steward, with no change to the
job script. ``_spark_steward_autoload`` (run from a .pth file) calls :func:`patch_spark_context`
once pyspark defines SparkContext; this module imports nothing heavy until a context starts.

Two moments of a context's start are ours:

- just before the JVM SparkContext is built (``_initialize_context``), the plugin and the shim
  jar join ``spark.plugins`` and ``spark.jars`` *after* what the platform's
  spark-defaults.conf, a ``--properties-file``, ``--jars`` or ``--conf`` put there, so the
  flags of ``spark-steward conf`` never replace anybody's plugin or jar; the values the shim
  acts on are resolved into the conf (:mod:`spark_steward.kernel.handover`); a malformed
  ``spark.steward.*`` value stops the start there with one line;
- once the context runs (``_do_init``), the runtime attaches. When its storage cannot be
  reached, the application runs on without spark-steward: addFile, df.cache() and
  df.checkpoint() stay Spark's own, one warning says why, and explicit spark-steward calls
  raise that reason (:func:`spark_steward.kernel.runtime.runtime_for`).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

ENABLED_KEY = "spark.steward.enabled"


def patch_spark_context(cls: Any) -> None:
    """Intercepts ``cls._initialize_context`` and ``cls._do_init`` (idempotent). ``cls`` is
    pyspark's SparkContext, just defined."""
    from spark_steward.kernel import patches

    patches.intercept("SparkContext._initialize_context", "kernel", _enroll_before_start,
                      order=0)
    patches.intercept("SparkContext._do_init", "kernel", _attach_after_init, order=0)
    patches.install(["SparkContext._do_init", "SparkContext._initialize_context"])


def _enabled(raw: str | None) -> bool:
    """``spark.steward.enabled`` parsed as every other spark-steward key (ConfigError when bad)."""
    if raw is None:
        return False
    from spark_steward.config import ENABLED

    return bool(ENABLED.parse(raw))


def _enroll_before_start(proceed: Any, sc: Any, jconf: Any, *args: Any, **kwargs: Any) -> Any:
    # On a Spark older than the supported lines nothing is added (the attach then warns once
    # and the application runs as plain Spark): the shim is not built for it.
    raw_enabled = _get(jconf, ENABLED_KEY)
    if raw_enabled is not None:
        # The shim's JVMs act on what Python resolved here, never on the keys themselves.
        from spark_steward.kernel import handover

        handover.install(jconf)
    if _enabled(raw_enabled) and _supported():
        from spark_steward.config import SHIM_JAR
        from spark_steward.kernel import jvm
        from spark_steward.kernel.shim import jar_path

        jar = str(jar_path(_get(jconf, SHIM_JAR.name) or ""))
        changed = jvm.enroll_shim(sc, jconf, jar)
        if changed:
            log.debug("spark-steward added its plugin and jar %s to: %s", jar, ", ".join(changed))
    return proceed(sc, jconf, *args, **kwargs)


def _supported() -> bool:
    import pyspark

    from spark_steward.kernel.compat import unsupported_reason

    return unsupported_reason(str(pyspark.__version__)) is None


def _get(jconf: Any, key: str) -> str | None:
    return str(jconf.get(key)) if jconf.contains(key) else None


def _attach_after_init(proceed: Any, sc: Any, *args: Any, **kwargs: Any) -> None:
    proceed(sc, *args, **kwargs)
    if not _enabled(sc._conf.get(ENABLED_KEY, None)):
        return
    from spark_steward.errors import StorageError
    from spark_steward.kernel.runtime import attach, mark_unavailable

    # A bad value raises ConfigError here, and pyspark stops the half-built context.
    try:
        attach(sc, explicit=False)
    except StorageError as exc:
        mark_unavailable(sc, str(exc))
        log.warning("spark-steward is off for this application, which runs as plain Spark "
                    "(addFile, df.cache() and df.checkpoint() are Spark's own; explicit "
                    "spark-steward calls raise this): %s", exc)
