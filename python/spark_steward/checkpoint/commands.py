"""The checkpoint commands the driver runtime answers on a Spark Connect server (the thin
client's ``checkpoints(name).save/latest/restore/ls/drop``, sent by
:mod:`spark_steward.checkpoint.remote`). Each runs the classic code in the caller's own
session: the same files, records and retries as a classic driver's; a named series outlives
the session and the application, as in classic.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from spark_steward.checkpoint.service import CheckpointSeries
from spark_steward.kernel.remote_server import RemoteCall, RemoteResult

if TYPE_CHECKING:
    from spark_steward.checkpoint.service import CheckpointService


def _series(call: RemoteCall) -> CheckpointSeries:
    return CheckpointSeries(call.arg("series", str), call.arg("retained", int, None),
                            call.session)


def serve_save(service: "CheckpointService", call: RemoteCall) -> int:
    """checkpoints.save: saves the DataFrame of the call into the series; its id."""
    return _series(call).save(call.require_input())


def serve_latest(service: "CheckpointService", call: RemoteCall) -> RemoteResult:
    """checkpoints.latest: the newest completed checkpoint, kept for the client."""
    return RemoteResult(dataframe=_series(call).latest(call.session))


def serve_restore(service: "CheckpointService", call: RemoteCall) -> RemoteResult:
    """checkpoints.restore: checkpoint ``id``, kept for the client."""
    return RemoteResult(dataframe=_series(call).restore(call.arg("id", int), call.session))


def serve_ls(service: "CheckpointService", call: RemoteCall) -> list[dict[str, Any]]:
    """checkpoints.ls: the series' checkpoints as CheckpointInfo's fields."""
    return [asdict(info) for info in _series(call).ls(call.session)]


def serve_drop(service: "CheckpointService", call: RemoteCall) -> list[int]:
    """checkpoints.drop: discards the series' completed checkpoints; their ids."""
    return _series(call).drop(call.session)
