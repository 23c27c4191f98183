"""The cached-table commands the driver runtime answers on a Spark Connect server (the thin
client's :func:`spark_steward.cache`, ``invalidate()`` and :func:`spark_steward.close`, sent by
:mod:`spark_steward.tables.remote`).

The DataFrame is cached in the caller's own session exactly as in classic, and the table is
kept for that session until the client invalidates it, closes its tables, or the session ends
(closed, expired, or its client killed: ``TableService.session_closed``), when its files go
with the retried cleanup. Another session's tables are not reachable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_steward.kernel import jvm
from spark_steward.kernel.remote_server import RemoteCall, RemoteResult
from spark_steward.tables.cached_table import cache as cache_table

if TYPE_CHECKING:
    from spark_steward.tables.service import TableService


def serve_cache(service: "TableService", call: RemoteCall) -> RemoteResult:
    """tables.cache: the call's DataFrame as a cached table kept for its session."""
    df = call.require_input()
    table = cache_table(df, shared=call.arg("shared", bool, False))
    if table is df:  # streaming: returned unchanged, as in classic
        return RemoteResult({"table_id": None})
    service.hold_remote(call.session_id, table)
    return RemoteResult({"table_id": table.table_id}, dataframe=table)


def serve_invalidate(service: "TableService", call: RemoteCall) -> None:
    """tables.invalidate: deletes one of the session's tables' files now."""
    service.remote_table(call.session_id, call.arg("table_id", str)).invalidate()


def serve_state(service: "TableService", call: RemoteCall) -> dict[str, Any]:
    """tables.state: whether one of the session's tables is materialized, and where."""
    table = service.remote_table(call.session_id, call.arg("table_id", str))
    return {"materialized": table.is_materialized, "storage_key": table.storage_key}


def serve_close(service: "TableService", call: RemoteCall) -> int:
    """tables.close: releases every table the caller's session cached; how many."""
    return service.close_session(jvm.session_uuid(call.session))
