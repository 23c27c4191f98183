"""The streaming-location commands the driver runtime answers on a Spark Connect server (the
thin client's ``streams.ls`` / ``drop`` / ``unpack``, sent by
:mod:`spark_steward.streams.remote`): the server's storage dir holds the records."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from spark_steward.kernel.remote_server import RemoteCall

if TYPE_CHECKING:
    from spark_steward.streams.service import StreamService


def _store(service: "StreamService", call: RemoteCall) -> Any:
    from spark_steward.kernel.runtime import runtime_for

    runtime = runtime_for(call.session)  # refused when spark-steward is off for the session
    assert service.store is not None
    return service.store, runtime.app_id


def serve_ls(service: "StreamService", call: RemoteCall) -> list[dict[str, Any]]:
    """streams.ls: every recorded location with its state (and files)."""
    store, app_id = _store(service, call)
    return [{"record": s.record.to_json(), "state": s.state.value, "liveness": s.liveness,
             "survey": None if s.survey is None else asdict(s.survey), "problem": s.problem}
            for s in store.statuses(this_app=app_id, survey=call.arg("files", bool, False))]


def serve_drop(service: "StreamService", call: RemoteCall) -> dict[str, Any]:
    """streams.drop: removes a stopped query's location (refused while it may run)."""
    store, app_id = _store(service, call)
    return asdict(store.drop(call.arg("name", str), this_app=app_id))


def serve_unpack(service: "StreamService", call: RemoteCall) -> dict[str, Any]:
    """streams.unpack: writes a stopped query's packed files back as plain files."""
    store, app_id = _store(service, call)
    return asdict(store.unpack(call.arg("name", str), this_app=app_id))
