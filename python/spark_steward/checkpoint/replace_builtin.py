"""``df.checkpoint(eager)`` served by the checkpoint store: with
``spark.steward.checkpoints.replace-builtin=true`` (per session) an unmodified job's DataFrame
checkpoints become file-merged checkpoints of the application's ``_spark.<app id>`` series.

The returned DataFrame reads the saved segments, so its lineage is cut as with Spark's; no
checkpoint dir is needed. Both ``eager`` values write at the call (Spark defers the write of
``eager=False`` to the first action). The checkpoints are owned like every other: deleted at
``spark.stop()`` and, after a crash, by the next attach or ``spark-steward gc``.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from spark_steward.config import CHECKPOINTS_REPLACE_BUILTIN
from spark_steward.kernel.session import session_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_steward.checkpoint.service import CheckpointService

log = logging.getLogger(__name__)

_lock = threading.Lock()
_installed = False


def replacing_service(df: "DataFrame") -> "CheckpointService | None":
    """The checkpoint service when it serves ``df.checkpoint()`` for ``df``'s session."""
    from spark_steward.kernel.runtime import current_runtime

    runtime = current_runtime()
    if runtime is None or getattr(df, "_jdf", None) is None or df.isStreaming:
        return None
    session = df.sparkSession
    if session.sparkContext is not runtime.sc or not runtime.enabled_for(session):
        return None
    on = session_value(session, CHECKPOINTS_REPLACE_BUILTIN,
                       runtime.conf.get(CHECKPOINTS_REPLACE_BUILTIN))
    return runtime.service("checkpoints") if on else None


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def checkpoint(self: "DataFrame", eager: bool = True) -> "DataFrame":
        service = replacing_service(self)
        if service is None:
            return original(self, eager)
        return service.checkpoint_dataframe(self)

    checkpoint.__wrapped__ = original  # type: ignore[attr-defined]
    return checkpoint


def install_builtin_checkpoint_hook() -> None:
    """Wraps the classic DataFrame's ``checkpoint`` (idempotent); it stays Spark's for every
    session that has not turned ``replace-builtin`` on."""
    global _installed
    with _lock:
        if _installed:
            return
        from pyspark.sql.classic.dataframe import DataFrame

        DataFrame.checkpoint = _wrap(DataFrame.checkpoint)  # type: ignore[method-assign]
        _installed = True
