"""``df.checkpoint(eager)`` served by the checkpoint store: with
``spark.steward.checkpoints.replace-builtin=true`` (per session) an unmodified job's DataFrame
checkpoints become file-merged checkpoints of the application's ``_spark.<app id>`` series.

The returned DataFrame reads the saved segments, so its lineage is cut as with Spark's; no
checkpoint dir is needed. Both ``eager`` values write at the call (Spark defers the write of
``eager=False`` to the first action). The checkpoints are owned like every other: deleted at
``spark.stop()`` and, after a crash, by the next attach or ``spark-steward gc``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from spark_steward.checkpoint.config_keys import CHECKPOINTS_REPLACE_BUILTIN
from spark_steward.kernel import jvm, patches
from spark_steward.kernel.session import session_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_steward.checkpoint.service import CheckpointService

log = logging.getLogger(__name__)

_service: "CheckpointService | None" = None
_warned_unshared = False


def replacing_service(df: "DataFrame") -> "CheckpointService | None":
    """The checkpoint service when it serves ``df.checkpoint()`` for ``df``'s session."""
    service = _service
    runtime = service.runtime if service is not None else None
    if runtime is None or runtime.stopped or not jvm.is_classic(df) or df.isStreaming:
        return None
    session = df.sparkSession
    if session.sparkContext is not runtime.sc or not runtime.enabled_for(session):
        return None
    on = session_value(session, CHECKPOINTS_REPLACE_BUILTIN,
                       runtime.conf.get(CHECKPOINTS_REPLACE_BUILTIN))
    if on and not runtime.storage_shared:
        global _warned_unshared
        if not _warned_unshared:
            _warned_unshared = True
            log.warning("%s is on, but spark.steward.storage.dir is not set on this cluster: "
                        "df.checkpoint() stays Spark's own (the embedded default storage is on "
                        "the driver's host only)", CHECKPOINTS_REPLACE_BUILTIN.name)
        return None
    return service if on else None


def _checkpoint(proceed: Callable[..., Any], df: "DataFrame", *args: Any, **kwargs: Any
                ) -> Any:
    service = replacing_service(df)
    if service is None:
        return proceed(df, *args, **kwargs)
    return service.checkpoint_dataframe(df)


def install(service: "CheckpointService") -> None:
    """The checkpoint service's driver hook: ``df.checkpoint()`` stays Spark's for every
    session that has not turned ``replace-builtin`` on. Outermost (order 10): a replaced
    checkpoint never reaches Spark's, nor the ownership probe after it."""
    global _service
    _service = service
    patches.intercept("DataFrame.checkpoint", "checkpoints-replace", _checkpoint, order=10)
