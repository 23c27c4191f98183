"""The streaming checkpoint locations of a storage dir: listing, cleaning and dropping them.

Shared by the driver service, the ``spark_steward.streams`` functions, ``spark-steward streams``
and ``spark-steward gc``: none of it needs Spark. Whether a query's application is alive comes
from the application registry (heartbeats and driver identities, across hosts), so a location is
judged the same way from any machine that sees the storage dir.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from spark_steward.applications import ApplicationRegistry
from spark_steward.errors import StewardError
from spark_steward.streams.errors import StreamActive, StreamError
from spark_steward.gc import application_liveness, is_collectable
from spark_steward.streams.lifecycle.locations import (LocationCheck, StreamRecord, StreamState,
                                                       drop_refusal, forget_refusal,
                                                       normal_location, state_of)
from spark_steward.streams.location import Location, Survey
from spark_steward.streams.packer import unpack
from spark_steward.streams.packs import Packs
from spark_steward.streams.registry import StreamRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamStatus:
    """One location as ``streams ls`` shows it; ``survey`` is None when not listed (or not
    listable: ``problem`` says why)."""

    record: StreamRecord
    state: StreamState
    liveness: str
    survey: Survey | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The status as a JSON-able dict, for ``streams ls --json``."""
        r = self.record
        body: dict[str, Any] = {"query_id": r.query_id, "name": r.name, "location": r.location,
                                "state": self.state.value, "app_id": r.app_id,
                                "application": self.liveness, "run_id": r.run_id,
                                "started": r.started, "heartbeat": r.heartbeat,
                                "stopped": r.stopped, "exception": r.exception,
                                "dropping": r.dropping}
        if self.survey is not None:
            body.update(files=self.survey.files, bytes=self.survey.bytes,
                        packs=self.survey.packs, deletes_pending=self.survey.intents,
                        temp_files=len(self.survey.temps))
        if self.problem:
            body["problem"] = self.problem
        return body


@dataclass(frozen=True)
class DropResult:
    query_id: str
    location: str
    files: int
    bytes: int


@dataclass(frozen=True)
class UnpackResult:
    """``files`` written back loose from ``packs`` packs, which are gone."""

    query_id: str
    location: str
    files: int
    packs: int


class StreamStore:
    """Every recorded streaming checkpoint location of a storage dir: their states, and safe drops
    and unpacks, with or without Spark."""
    def __init__(self, registry: ApplicationRegistry, *, abandoned_after: float,
                 drop_grace: float, temp_horizon: float,
                 options: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.apps = registry
        self.records = StreamRegistry(registry.storage)
        self.abandoned_after = abandoned_after
        self.drop_grace = drop_grace
        self.temp_horizon = temp_horizon
        self.options = options or {}
        self.clock = clock

    def location(self, record: StreamRecord) -> Location:
        """The location of ``record``, opened."""
        return Location(normal_location(record.location), self.options)

    def _liveness(self, record: StreamRecord, this_app: str | None) -> str:
        if record.app_id == this_app:
            return "live"
        return application_liveness(self.apps, record.app_id)

    def _app_dead(self, record: StreamRecord, this_app: str | None) -> bool:
        """Proof that the record's run is not active: its application ended, or it is this
        application and the run stopped."""
        return is_collectable(self._liveness(record, this_app)) or (
            record.app_id == this_app and record.stopped is not None)

    def presence(self, record: StreamRecord) -> tuple[LocationCheck, str | None]:
        """Whether the location's folder exists; ``UNKNOWN`` with the error when the storage
        could not say (fsspec's ``exists`` answers False on any error, so ``info`` is asked)."""
        try:
            storage = self.location(record).storage
            storage.fs.info(storage.root)
        except FileNotFoundError:
            return LocationCheck.ABSENT, None
        except Exception as exc:  # noqa: BLE001 - any failure is "unknown", never "absent"
            return LocationCheck.UNKNOWN, f"{type(exc).__name__}: {exc}"
        return LocationCheck.PRESENT, None

    def forget_gone(self, record: StreamRecord, *, this_app: str | None = None,
                    dry_run: bool = False) -> str | None:
        """Removes the record of a location whose folder is gone (deleted by someone else), once
        no run of the query may be active and the drop grace passed; returns None when removed
        (or, with ``dry_run``, when it would be), else why it stays. A storage failure keeps it.
        The record is read and the folder looked for again just before the removal, so a run
        that started meanwhile keeps its record."""
        check, error = self.presence(record)
        why = forget_refusal(record, now=self.clock(), app_dead=self._app_dead(record, this_app),
                             grace=self.drop_grace, location=check)
        if why is not None:
            return f"{why}: {error}" if error else why
        if dry_run:
            return None
        if self.records.read(record.query_id) != record:
            return f"the record of {record.location} changed meanwhile"
        check, error = self.presence(record)
        if check is not LocationCheck.ABSENT:
            return f"{record.location} is no longer absent ({error or check.value})"
        self.records.remove(record.query_id)
        log.info("removed the record of streaming query %s: its checkpoint location %s is gone",
                 record.name or record.query_id, record.location)
        return None

    def status(self, record: StreamRecord, *, this_app: str | None = None,
               survey: bool = False) -> StreamStatus:
        """The state of ``record``'s location (running, stopped, abandoned, dropping); with
        ``survey`` also its files."""
        liveness = self._liveness(record, this_app)
        now = self.clock()
        state = state_of(record, now=now, app_dead=is_collectable(liveness),
                         abandoned_after=self.abandoned_after)
        if not survey:
            return StreamStatus(record, state, liveness)
        try:
            found = self.location(record).survey(now=now,
                                                 query_active=state is StreamState.RUNNING,
                                                 horizon=self.temp_horizon)
        except StewardError as exc:
            return StreamStatus(record, state, liveness, problem=str(exc))
        return StreamStatus(record, state, liveness, found)

    def statuses(self, *, this_app: str | None = None, survey: bool = False) -> list[StreamStatus]:
        """The status of every recorded location, by query name and location."""
        return [self.status(r, this_app=this_app, survey=survey)
                for r in sorted(self.records.all(), key=lambda r: (r.name or "", r.location))]

    def clean(self, record: StreamRecord, *, active: bool, sweep_temps: bool = True) -> int:
        """Retries the location's recorded failed deletes and (``sweep_temps``) sweeps the temp
        files Spark's killed writers left; returns files deleted. Raises on a storage failure,
        for the caller's retry strategy."""
        location = self.location(record)
        if not location.exists():
            return 0
        done = location.retry_intents()
        if sweep_temps:
            if not active:
                # Judged idle when ``record`` was read: a run recorded since then writes its
                # temp files now, and sweeping those would fail its atomic writes.
                current = self.records.read(record.query_id)
                active = current is not None and current.run_id != record.run_id
            found = location.survey(now=self.clock(), query_active=active,
                                    horizon=self.temp_horizon)
            done += location.sweep_temps(found.temps)
        return done

    def begin_drop(self, name_or_location: str, *, this_app: str | None = None) -> StreamRecord:
        """Checks that the location may go and records the drop (FLIP-270: recorded before any
        delete); raises StreamActive with one line when it may not."""
        record = self.records.find(name_or_location)
        if record.dropping is not None:
            return record
        app_dead = self._app_dead(record, this_app)
        try:
            newest = self.location(record).survey(now=self.clock(), query_active=True,
                                                  horizon=self.temp_horizon).newest
        except StewardError as exc:
            raise StreamError(f"cannot drop {record.location}: it cannot be listed ({exc})") from exc
        why = drop_refusal(record, now=self.clock(), app_dead=app_dead, grace=self.drop_grace,
                           newest_file=newest)
        if why is not None:
            raise StreamActive(f"refusing to drop {record.location}: {why}")
        dropping = replace(record, dropping=self.clock())
        self.records.write(dropping)
        again = self.records.read(record.query_id)
        if again is None or again.run_id != record.run_id:
            raise StreamActive(f"refusing to drop {record.location}: a new run of the query "
                               f"started while the drop was being recorded")
        return dropping

    def finish_drop(self, record: StreamRecord) -> DropResult:
        """Deletes everything in the location, then its record; idempotent, raises while the
        storage fails (the record stays ``dropping``, so the next attach or gc resumes)."""
        location = self.location(record)
        files = size = 0
        if location.exists():
            files, size = location.storage.usage("")
            location.delete_all()
        self.records.remove(record.query_id)
        log.info("dropped the streaming checkpoint location %s (%d files, %d bytes)",
                 record.location, files, size)
        return DropResult(record.query_id, record.location, files, size)

    def drop(self, name_or_location: str, *, this_app: str | None = None) -> DropResult:
        """Removes a location and its record once safe (see :func:`spark_steward.streams.drop`)."""
        return self.finish_drop(self.begin_drop(name_or_location, this_app=this_app))

    def unpack(self, name_or_location: str, *, this_app: str | None = None) -> UnpackResult:
        """Writes every packed file of a stopped query's location back as a plain file and
        removes the packs, so Spark reads it without spark-steward. Refused
        (:class:`StreamActive`) while a run of the query may be active; idempotent."""
        record = self.records.find(name_or_location)
        if record.dropping is not None:
            raise StreamActive(f"refusing to unpack {record.location}: it is being dropped")
        why = drop_refusal(record, now=self.clock(), app_dead=self._app_dead(record, this_app),
                           grace=0.0,
                           newest_file=None)
        if why is not None:
            raise StreamActive(f"refusing to unpack {record.location}: {why}")
        location = self.location(record)
        packs = len(Packs(location.storage, record.location).pack_names())
        files = unpack(location)
        log.info("unpacked %s: %d file(s) written back from %d pack(s)", record.location, files,
                 packs)
        return UnpackResult(record.query_id, record.location, files, packs)
