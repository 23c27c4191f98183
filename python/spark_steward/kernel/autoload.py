"""Attaches to every new SparkContext whose conf enables spark-steward, with no change to the
job script. ``_spark_steward_autoload`` (run from a .pth file) calls :func:`patch_spark_context`
once pyspark defines SparkContext; this module imports nothing heavy until a context starts."""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

ENABLED_KEY = "spark.steward.enabled"


def patch_spark_context(cls: Any) -> None:
    """Wraps ``cls._do_init`` so a context with spark.steward.enabled=true attaches (idempotent)."""
    if getattr(cls, "_spark_steward_patched", False):
        return
    original = cls._do_init

    @functools.wraps(original)
    def _do_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        raw = self._conf.get(ENABLED_KEY, None)
        if raw is None or raw.strip().lower() == "false":
            return
        from spark_steward.kernel.runtime import attach

        # A bad value raises ConfigError here, and pyspark stops the half-built context.
        attach(self, explicit=False)

    cls._do_init = _do_init
    cls._spark_steward_patched = True
