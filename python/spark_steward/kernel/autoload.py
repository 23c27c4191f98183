"""Attaches to every new SparkContext whose conf enables spark-steward, with no change to the
job script. ``_spark_steward_autoload`` (run from a .pth file) calls :func:`patch_spark_context`
once pyspark defines SparkContext; this module imports nothing heavy until a context starts."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

ENABLED_KEY = "spark.steward.enabled"


def patch_spark_context(cls: Any) -> None:
    """Intercepts ``cls._do_init`` so a context with spark.steward.enabled=true attaches
    (idempotent). ``cls`` is pyspark's SparkContext, just defined."""
    from spark_steward.kernel import patches

    patches.intercept("SparkContext._do_init", "kernel", _attach_after_init, order=0)
    patches.install(["SparkContext._do_init"])


def _attach_after_init(proceed: Any, sc: Any, *args: Any, **kwargs: Any) -> None:
    proceed(sc, *args, **kwargs)
    raw = sc._conf.get(ENABLED_KEY, None)
    if raw is None or raw.strip().lower() == "false":
        return
    from spark_steward.kernel.runtime import attach

    # A bad value raises ConfigError here, and pyspark stops the half-built context.
    attach(sc, explicit=False)
