"""Spark Connect sessions as owner scopes: the open sessions of a Connect server's application,
told by the shim's session events and by the job tags Connect puts on every job it runs for a
session; when one closes (its client released it, it expired, the server stops), every
capability releases what that session owned (:meth:`RuntimeService.session_closed`), with the
same retried cleanup as everything else.

A runtime restarted beside a running server has missed the start events of sessions opened
before: a session first seen in a job's tags is open from then on.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterable, Mapping, Protocol

from spark_steward.applications import SessionOwnership, SessionsReport
from spark_steward.kernel.events import JobStart, SessionClosed, SessionStarted, SparkEvent

log = logging.getLogger(__name__)

#: The tag Connect puts on a session's jobs (``ExecuteJobTag``): user, session, operation.
#: Session and operation ids are UUIDs; the user id may hold anything, underscores included.
_OPERATION_TAG = re.compile(
    r"SparkConnect_OperationTag_User_(?P<user>.*)_Session_(?P<session>[0-9a-fA-F-]{36})"
    r"_Operation_[0-9a-fA-F-]{36}")


#: How many closed session ids are remembered against late events.
RECENTLY_CLOSED_KEPT = 10_000


def session_of_tags(tags: str | None) -> tuple[str, str] | None:
    """``(session id, user id)`` of the Connect operation that ran a job with these
    ``spark.job.tags``, None for a job no Connect session ran."""
    for tag in (tags or "").split(","):
        match = _OPERATION_TAG.fullmatch(tag.strip())
        if match:
            return match.group("session"), match.group("user")
    return None


class SessionOwner(Protocol):
    """What a capability does for sessions (:class:`~spark_steward.kernel.runtime.RuntimeService`
    has both, as no-ops)."""

    name: ClassVar[str]

    def session_closed(self, session_id: str) -> None:
        """Releases what session ``session_id`` owned."""

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        """What session ``session_id`` owns now, by kind: (files, bytes)."""


@dataclass(frozen=True)
class ConnectSession:
    """An open session: its id, its user, when it started (epoch seconds)."""

    session_id: str
    user_id: str
    started_at: float


class SessionScopes:
    """The open sessions of one runtime; ``owners()`` gives the capabilities at each call."""

    def __init__(self, owners: Callable[[], Iterable[SessionOwner]]) -> None:
        self._owners = owners
        self._lock = threading.Lock()
        self._open: dict[str, ConnectSession] = {}
        self._closed = 0
        #: Recently closed sessions: a late job event of one does not open it again.
        self._recently_closed: dict[str, None] = {}

    def on_event(self, event: SparkEvent) -> None:
        """The dispatcher's subscriber."""
        if isinstance(event, SessionStarted):
            self._opened(event.session_id, event.user_id, event.time / 1000)
        elif isinstance(event, JobStart):
            found = session_of_tags(event.job_tags)
            if found is not None:
                self._opened(found[0], found[1], event.time / 1000)
        elif isinstance(event, SessionClosed):
            self.close(event.session_id)

    def _opened(self, session_id: str, user_id: str, at: float) -> None:
        with self._lock:
            if session_id not in self._open and session_id not in self._recently_closed:
                self._open[session_id] = ConnectSession(session_id, user_id, at)

    def close(self, session_id: str) -> None:
        """Session ``session_id`` ended: every capability releases what it owned."""
        with self._lock:
            known = self._open.pop(session_id, None)
            self._closed += 1
            self._recently_closed[session_id] = None
            while len(self._recently_closed) > RECENTLY_CLOSED_KEPT:
                del self._recently_closed[next(iter(self._recently_closed))]
        for owner in self._owners():
            try:
                owner.session_closed(session_id)
            except Exception:  # one capability failing must not keep the others' data
                log.exception("spark-steward capability %s could not release Connect session "
                              "%s", owner.name, session_id)
        if known is not None:
            log.info("Connect session %s of %s closed; what it owned is released",
                     session_id, known.user_id)

    def open_sessions(self) -> list[ConnectSession]:
        """The open sessions, oldest first."""
        with self._lock:
            return sorted(self._open.values(), key=lambda s: s.started_at)

    def report(self) -> SessionsReport | None:
        """The sessions for the application record; None when no session was ever seen."""
        sessions = self.open_sessions()
        with self._lock:
            closed = self._closed
        if not sessions and not closed:
            return None
        listed = []
        for session in sessions:
            owns: dict[str, tuple[int, int]] = {}
            for owner in self._owners():
                try:
                    found = owner.session_owns(session.session_id)
                except Exception:  # the report only informs
                    log.exception("spark-steward capability %s could not report what Connect "
                                  "session %s owns", owner.name, session.session_id)
                    continue
                for kind, (files, size) in found.items():
                    had = owns.get(kind, (0, 0))
                    owns[kind] = (had[0] + files, had[1] + size)
            listed.append(SessionOwnership(session.session_id, session.user_id,
                                           session.started_at, owns))
        return SessionsReport(tuple(listed), len(sessions), closed).bounded()
