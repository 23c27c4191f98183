"""What a streaming query's checkpoint location is, and when it may be dropped or swept.

Pure: the record, the clock reading and the verdict on the query's application are passed in,
so the rules are unit-tested without Spark or storage.

A location is *running* while the application of its last run is not known to be dead and that
run has not ended; *stopped* once the run ended or its application died; *abandoned* once it has
been stopped and idle longer than ``abandoned_after``; *dropping* once a drop was recorded
(FLIP-270: the discard is recorded before anything is deleted, so a crash resumes it).

A location is named by one normalised URL (:func:`normal_location`) wherever it is recorded or
looked up. A record whose location is gone (its folder deleted by someone else) is removed once
no run may be active and the drop grace passed (:func:`forget_refusal`); never on a storage
error.
"""

from __future__ import annotations

import enum
import posixpath
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

#: Spark's temp files of atomic writes: ``.<name>.<uuid>.tmp`` beside their target.
SPARK_TEMP = re.compile(r"^\..+\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
                        r"-[0-9a-fA-F]{12}\.tmp$")
#: Our own folder inside a location (delete intents); never Spark's.
OWN_FOLDER = "_steward"
INTENTS_FOLDER = f"{OWN_FOLDER}/deletes"

_QUERY_ID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                       r"[0-9a-fA-F]{12}$")


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)


def normal_location(location: str) -> str:
    """The one spelling of a checkpoint location, for recording and comparing it.

    Local paths become Hadoop's ``file:/x``: ``file:///x``, ``file://localhost/x``, ``file:/x``,
    ``/x``, ``/x/`` and ``/a/../x`` are one location. Other schemes keep their scheme (lower
    case) and authority, with the path normalised the same way (``s3a://b/a/../k/`` is
    ``s3a://b/k``). A relative path or a plain name is returned unchanged: without a working
    directory it names no location.

    >>> normal_location("file:///tmp/x/")
    'file:/tmp/x'
    """
    found = _SCHEME.match(location)
    if found is None:
        return "file:" + _normal_path(location) if location.startswith("/") else location
    scheme, rest = found.group(1).lower(), found.group(2)
    authority, path = "", rest
    if rest.startswith("//"):
        authority, _, tail = rest[2:].partition("/")
        path = "/" + tail
    if not path.startswith("/"):
        return location  # relative (``file:x``) or not a path at all (a name with a colon)
    if scheme == "file" and authority in ("", "localhost"):
        return "file:" + _normal_path(path)
    return f"{scheme}://{authority}{_normal_path(path)}"


def _normal_path(path: str) -> str:
    # lstrip: normpath keeps a leading "//" (POSIX leaves its meaning open)
    return posixpath.normpath("/" + path.lstrip("/"))


def valid_query_id(value: object) -> bool:
    """True when ``value`` is a streaming query id (a UUID string)."""
    return isinstance(value, str) and bool(_QUERY_ID.fullmatch(value))


class LocationCheck(enum.Enum):
    """What looking for a location's folder found; ``UNKNOWN`` when the storage failed."""

    PRESENT = "present"
    ABSENT = "absent"
    UNKNOWN = "unknown"


class StreamState(enum.Enum):
    RUNNING = "running"
    STOPPED = "stopped"
    ABANDONED = "abandoned"
    DROPPING = "dropping"


@dataclass(frozen=True)
class StreamRecord:
    """One query's checkpoint location as the storage dir records it (times are epoch seconds).

    ``stopped`` is when its last run ended (None while it runs or when its application died
    without saying); ``heartbeat`` the last progress seen; ``dropping`` when a drop was recorded.
    """

    query_id: str
    location: str
    name: str | None
    app_id: str
    run_id: str
    started: float
    heartbeat: float
    stopped: float | None = None
    exception: str | None = None
    dropping: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON body stored in the storage dir."""
        return {"format": 1, "query_id": self.query_id, "location": self.location,
                "name": self.name, "app_id": self.app_id, "run_id": self.run_id,
                "started": self.started, "heartbeat": self.heartbeat, "stopped": self.stopped,
                "exception": self.exception, "dropping": self.dropping}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "StreamRecord":
        """Raises ValueError naming the field that is missing or malformed. The location comes
        back normalised (:func:`normal_location`), also from records written before it was."""
        if not isinstance(body, Mapping) or type(body.get("format")) is not int \
                or body.get("format") != 1:
            raise ValueError("not a stream record of format 1")

        def text(key: str, optional: bool = False) -> Any:
            value = body.get(key)
            if value is None and optional:
                return None
            if not isinstance(value, str) or not value:
                raise ValueError(f"field {key!r} is {value!r}, not a non-empty string")
            return value

        def number(key: str, optional: bool = False) -> Any:
            value = body.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"field {key!r} is {value!r}, not a number")
            return float(value)

        query_id = text("query_id")
        if not valid_query_id(query_id):
            raise ValueError(f"field 'query_id' is {query_id!r}, not a query id")
        return cls(query_id, normal_location(text("location")), text("name", True), text("app_id"),
                   text("run_id"), number("started"), number("heartbeat"),
                   number("stopped", True), text("exception", True), number("dropping", True))

    def last_active(self) -> float:
        """The last time the query was seen running or stopping."""
        return max(self.heartbeat, self.stopped or 0.0, self.started)

    def progressed(self, now: float) -> "StreamRecord":
        """The record with a heartbeat at ``now`` (never earlier than the last one)."""
        return replace(self, heartbeat=max(self.heartbeat, now))

    def ended(self, now: float, exception: str | None) -> "StreamRecord":
        """The record of a run that stopped at ``now``, with the exception that ended it, if any."""
        return replace(self, stopped=now, heartbeat=max(self.heartbeat, now), exception=exception)


def state_of(record: StreamRecord, *, now: float, app_dead: bool,
             abandoned_after: float) -> StreamState:
    """The location's state; ``app_dead`` is proof that the last run's application ended."""
    if record.dropping is not None:
        return StreamState.DROPPING
    if record.stopped is None and not app_dead:
        return StreamState.RUNNING
    idle_since = record.last_active()
    return StreamState.ABANDONED if now - idle_since >= abandoned_after else StreamState.STOPPED


def drop_refusal(record: StreamRecord, *, now: float, app_dead: bool, grace: float,
                 newest_file: float | None) -> str | None:
    """Why the location may not be dropped now, in one line; None when it may.

    It may once no run is active (the last run ended, or its application is proven dead) and
    neither the record nor any file of the location changed for ``grace`` seconds (a run of an
    application without spark-steward still writes files)."""
    where = record.name or record.query_id
    if record.dropping is not None:
        return None  # recorded already: resuming is always allowed
    if record.stopped is None and not app_dead:
        return (f"streaming query {where!r} still runs in application {record.app_id} "
                f"(run {record.run_id}); stop it first")
    idle_since = max(record.last_active(), newest_file or 0.0)
    if now - idle_since < grace:
        return (f"streaming query {where!r} was active {now - idle_since:.0f}s ago; a location is "
                f"dropped only after {grace:.0f}s idle (spark.steward.streams.drop-grace)")
    return None


def forget_refusal(record: StreamRecord, *, now: float, app_dead: bool, grace: float,
                   location: LocationCheck) -> str | None:
    """Why the record of a location stays, in one line; None when it may be removed.

    It may once its location is known to be gone (checked absent: a storage failure is no
    proof) and, by the drop's rules (:func:`drop_refusal`), no run of the query may be active
    and the record did not change for ``grace`` seconds: a run starting on a fresh folder, or one
    whose application's liveness is unknown, keeps its record."""
    if record.dropping is not None:
        return f"a drop of {record.location} is recorded; finishing it removes the record"
    if location is LocationCheck.PRESENT:
        return f"{record.location} exists"
    if location is LocationCheck.UNKNOWN:
        return f"whether {record.location} exists is unknown (its storage failed)"
    return drop_refusal(record, now=now, app_dead=app_dead, grace=grace, newest_file=None)


def rewritten_since_asked(modified: float | None, asked_ms: object) -> bool:
    """Whether a file an intent names was written again after Spark asked to delete it
    (``modified`` in epoch seconds, the intent's ``time`` in epoch milliseconds): then it is a
    new file Spark needs (a batch planned again after ``purgeAfter``, a delete that landed late
    and a rewrite), and the intent must not delete it. Unknown times answer False: the intent
    was recorded because the delete failed, so the file it names is the one Spark gave up."""
    if modified is None or isinstance(asked_ms, bool) or not isinstance(asked_ms, (int, float)):
        return False
    return int(modified * 1000) > asked_ms


def temp_sweepable(name: str, modified: float | None, *, now: float, query_active: bool,
                   horizon: float) -> bool:
    """Whether a file is a temp file Spark left behind that may go: named like Spark's atomic
    writes, and either no run of its query is active or it is older than ``horizon`` (no
    atomic write takes that long)."""
    if not SPARK_TEMP.fullmatch(name):
        return False
    if not query_active:
        return True
    return modified is not None and now - modified >= horizon
