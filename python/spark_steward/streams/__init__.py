"""Structured Streaming checkpoint locations, owned (FLIP-270 where Spark's checkpoints live).

With spark-steward on for a session, every streaming query's checkpoint location is recorded in
the storage dir at start, the deletes Spark asks for there that fail are retried until done, and
temp files of killed writers are swept; nothing changes in the job. This module lists locations
and drops them safely:

>>> spark_steward.streams.ls()                      # doctest: +SKIP
[StreamStatus(record=StreamRecord(query_id='…', location='file:/ckpt/q1', …), state=…)]
>>> spark_steward.streams.drop("q1")                # doctest: +SKIP  (name, id or location)
DropResult(query_id='…', location='file:/ckpt/q1', files=4210, bytes=1893391)

With ``spark.steward.streams.pack.enabled`` old files are packed into few physical files
(FLIP-306); :func:`unpack` restores the plain layout, for Spark without spark-steward.

``spark-steward streams ls|du|drop|unpack`` does the same from any machine that sees the storage dir.

Inside: ``lifecycle/`` (the pure rules of locations and packs), ``registry`` (the records),
``location`` (one location through fsspec), ``store`` (states, drops, unpacks),
``packs``/``packer`` (packing), ``service`` (the driver service) and ``gc``
(``spark-steward gc``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_steward.kernel.runtime import DriverRuntime
    from spark_steward.streams.store import DropResult, StreamStatus, StreamStore, UnpackResult

__all__ = ["ls", "drop", "unpack", "DropResult", "StreamStatus", "UnpackResult"]

#: Result types, imported on first use: the package itself stays cheap to import (the CLI loads
#: this capability's declaration through it).
_RESULTS = ("DropResult", "StreamStatus", "UnpackResult")


def __getattr__(name: str) -> Any:
    if name not in _RESULTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from spark_steward.streams import store

    return getattr(store, name)


def _store() -> "tuple[StreamStore, DriverRuntime]":
    from spark_steward.kernel.runtime import runtime_for
    from spark_steward.streams.service import StreamService

    runtime = runtime_for(None)
    store = runtime.service(StreamService).store
    assert store is not None
    return store, runtime


def _remote() -> Any:
    """The active Spark Connect session (the thin client's calls), None in a classic driver."""
    from spark_steward.kernel.remote_client import connect_session

    return connect_session(None)


def ls(*, files: bool = False) -> list[StreamStatus]:
    """Every recorded location with its state (running, stopped, abandoned, dropping); with
    ``files`` also its files, bytes and pending deletes (one listing of each location)."""
    remote = _remote()
    if remote is not None:
        from spark_steward.streams import remote as remote_streams

        return remote_streams.ls(remote, files)
    store, runtime = _store()
    return store.statuses(this_app=runtime.app_id, survey=files)


def drop(name_or_location: str) -> DropResult:
    """Removes a query's checkpoint location: its name, query id or location. Refused
    (:class:`~spark_steward.errors.StreamActive`, one line saying why) while a run of the query
    may be active anywhere or it was active within ``spark.steward.streams.drop-grace``. The drop
    is recorded before anything is deleted; a failure leaves it recorded and the next attach or
    ``spark-steward gc`` finishes it."""
    remote = _remote()
    if remote is not None:
        from spark_steward.streams import remote as remote_streams

        return remote_streams.drop(remote, name_or_location)
    store, runtime = _store()
    return store.drop(name_or_location, this_app=runtime.app_id)


def unpack(name_or_location: str) -> UnpackResult:
    """Writes every packed file of a stopped query's location back as a plain file and removes
    its packs: the layout Spark reads without spark-steward. Refused
    (:class:`~spark_steward.errors.StreamActive`) while a run of the query may be active."""
    remote = _remote()
    if remote is not None:
        from spark_steward.streams import remote as remote_streams

        return remote_streams.unpack(remote, name_or_location)
    store, runtime = _store()
    return store.unpack(name_or_location, this_app=runtime.app_id)
