"""Application records in the storage dir: who is (or was) running, so a later run can tell
live, finished and crashed applications apart and clean up after the crashed ones.

Layout: ``applications/<app id>.json`` (a checksummed record) and ``apps/<app id>/`` (what the
application owns, one folder per capability).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Callable

from spark_steward._version import __version__
from spark_steward.errors import RecordCorrupt, StewardError, StorageError
from spark_steward.lifecycle.liveness import (
    IDENTITY_FORMAT,
    DriverIdentity,
    Liveness,
    Place,
    classify,
)

if TYPE_CHECKING:  # fsspec costs an executor's new worker ~40 ms to import
    from spark_steward.storage import Storage

log = logging.getLogger(__name__)

RECORDS_DIR = "applications"
#: What a write into a storage dir this user may not write fails with.
_DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
OWNED_DIR = "apps"
_APP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def looks_like_app_id(name: str) -> bool:
    """Whether ``name`` (a folder name, say) could be an application id of ours."""
    return _APP_ID.fullmatch(name) is not None


def validate_app_id(app_id: str) -> str:
    """Application ids become path segments: reject anything that could escape them."""
    if not isinstance(app_id, str) or not _APP_ID.fullmatch(app_id):
        raise StewardError(f"application id {app_id!r} is not a safe path segment")
    return app_id


@dataclass(frozen=True)
class GivenUp:
    """A cleanup the retry strategy gave up on: what (a path, or a checkpoint or cached table
    id) and its last error. It stays recorded; `spark-steward gc` or the next run finishes it."""

    what: str
    error: str


#: Given-up deletions a record lists (the rest are counted): the record is rewritten every
#: heartbeat, so an application that gives up on thousands of paths must not make it grow.
GIVEN_UP_KEPT = 100
#: Characters of a given-up deletion's last error a record keeps.
ERROR_CHARS_KEPT = 500


@dataclass(frozen=True)
class CleanupBacklog:
    """An application's outstanding cleanup, as its record carries it (refreshed every
    heartbeat, final at a clean stop) for ``spark-steward status``: deletions waiting or being
    retried, when the oldest of them was asked for (wall clock; None when unknown or none),
    failed attempts retried so far, and what was given up (``given_up_total`` in all, of which
    :meth:`bounded` keeps the first :data:`GIVEN_UP_KEPT` in ``given_up``)."""

    pending: int = 0
    oldest_pending_at: float | None = None
    retries: int = 0
    given_up: tuple[GivenUp, ...] = ()
    given_up_total: int = 0

    @property
    def given_up_count(self) -> int:
        """How many deletions were given up in total (``given_up`` lists only the latest few)."""
        return max(self.given_up_total, len(self.given_up))

    def __add__(self, other: "CleanupBacklog") -> "CleanupBacklog":
        oldest = [t for t in (self.oldest_pending_at, other.oldest_pending_at) if t is not None]
        return CleanupBacklog(self.pending + other.pending, min(oldest, default=None),
                              self.retries + other.retries, self.given_up + other.given_up,
                              self.given_up_count + other.given_up_count)

    def bounded(self) -> "CleanupBacklog":
        """This backlog as a record keeps it: the first given-up deletions with their errors
        cut short, and the count of all."""
        kept = tuple(GivenUp(g.what[:ERROR_CHARS_KEPT], g.error[:ERROR_CHARS_KEPT])
                     for g in self.given_up[:GIVEN_UP_KEPT])
        return replace(self, given_up=kept, given_up_total=self.given_up_count)

    @classmethod
    def from_json(cls, body: object) -> "CleanupBacklog | None":
        """The backlog a record carries, bounded; None for anything else (the field only
        informs, so a record is never refused for it)."""
        if not isinstance(body, dict):
            return None
        try:
            listed = body.get("given_up", [])
            if not isinstance(listed, list):
                return None
            given_up = tuple(GivenUp(str(g["what"]), str(g["error"]))
                             for g in listed[:GIVEN_UP_KEPT])
            oldest = body.get("oldest_pending_at")
            numbers = [int(body.get(k, 0)) for k in ("pending", "retries", "given_up_total")]
            if min(numbers) < 0:
                return None
            pending, retries, total = numbers
            return cls(pending, None if oldest is None else float(oldest), retries, given_up,
                       max(total, len(listed))).bounded()
        except (TypeError, ValueError, KeyError, OverflowError):
            return None


#: Open Connect sessions a record lists (the rest are counted), for the same reason.
SESSIONS_KEPT = 100


@dataclass(frozen=True)
class SessionOwnership:
    """One open Spark Connect session of the application and what it owns through
    spark-steward, by capability: ``owns[kind] = (files, bytes)``."""

    session_id: str
    user_id: str
    started_at: float
    owns: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class SessionsReport:
    """The application's Spark Connect sessions as its record carries them (a Connect server's
    record; None for a classic application): the open ones (the first :data:`SESSIONS_KEPT`
    listed), how many are open in all and how many closed since the start."""

    open: tuple[SessionOwnership, ...] = ()
    open_total: int = 0
    closed_total: int = 0

    def bounded(self) -> "SessionsReport":
        """This report as a record keeps it."""
        return replace(self, open=self.open[:SESSIONS_KEPT],
                       open_total=max(self.open_total, len(self.open)))

    @classmethod
    def from_json(cls, body: object) -> "SessionsReport | None":
        """The report a record carries, bounded; None for anything else (it only informs)."""
        if not isinstance(body, dict):
            return None
        try:
            listed = body.get("open", [])
            if not isinstance(listed, list):
                return None
            sessions = tuple(
                SessionOwnership(str(s["session_id"]), str(s["user_id"]), float(s["started_at"]),
                                 {str(k): (int(v[0]), int(v[1]))
                                  for k, v in dict(s.get("owns") or {}).items()})
                for s in listed[:SESSIONS_KEPT])
            open_total, closed_total = int(body.get("open_total", 0)), int(
                body.get("closed_total", 0))
            if min(open_total, closed_total) < 0:
                return None
            return cls(sessions, max(open_total, len(sessions)), closed_total)
        except (TypeError, ValueError, KeyError, IndexError, OverflowError):
            return None


@dataclass(frozen=True)
class ApplicationRecord:
    app_id: str
    app_name: str
    host: str
    pid: int
    pid_start: int | None
    started_at: float
    heartbeat_at: float
    finished_at: float | None = None
    spark_version: str = ""
    steward_version: str = ""
    #: Where the pid means something (see :mod:`spark_steward.lifecycle.liveness`); records
    #: from before these fields read as format 0, judged by their heartbeat alone.
    boot_id: str = ""
    pid_ns: str = ""
    identity_format: int = 0
    #: What cleanup the application still owes (None in records of older versions).
    cleanup: CleanupBacklog | None = None
    #: A Connect server's sessions and what each owns (None elsewhere and in older records).
    sessions: SessionsReport | None = None

    @property
    def driver(self) -> DriverIdentity:
        """The identity of the driver process, for telling a live driver from a reused pid."""
        return DriverIdentity(self.host, self.pid, self.pid_start, self.boot_id, self.pid_ns)

    @property
    def finished(self) -> bool:
        """True once the application stopped cleanly (``finished_at`` is set)."""
        return self.finished_at is not None


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "app_id": (str,), "app_name": (str,), "host": (str,), "pid": (int,),
    "pid_start": (int, type(None)), "started_at": (int, float), "heartbeat_at": (int, float),
    "finished_at": (int, float, type(None)), "spark_version": (str,), "steward_version": (str,),
    "boot_id": (str,), "pid_ns": (str,), "identity_format": (int,),
}


def boot_id() -> str:
    """This kernel boot's random id (Linux), "" where unknown: pids of another boot mean
    nothing here."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``), "" where unknown. Also "" when the
    mounted /proc belongs to another PID namespace (``unshare --pid`` without ``--mount-proc``):
    then neither signals nor /proc answer for the pids this process sees."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return ""
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def this_place(host: str | None = None) -> Place:
    """Where this process runs: hostname (or ``host``), boot id and PID namespace."""
    return Place(host or socket.gethostname(), boot_id(), pid_namespace())


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), None where
    unknown. The name is cut at the last ")": it may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return stat.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_ticks(stat: list[str] | None) -> int | None:
    try:
        return int(stat[19]) if stat else None
    except (ValueError, IndexError):
        return None


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), None where unknown."""
    return _start_ticks(_proc_stat(pid))


def process_alive(pid: int, start_ticks: int | None) -> bool:
    """True when ``pid`` runs and, where known, is the same process (not a reused pid).

    A zombie is dead: a driver whose JVM parent was killed is re-parented to pid 1, and in a
    container whose pid 1 does not reap (no ``--init``) it stays a zombie, answering signal 0
    and keeping its start time, for as long as the container lives."""
    if pid <= 0:  # 0 and negatives address process groups, not one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc to ask: signal 0 is all there is
    if stat[:1] and stat[0] in ("Z", "X"):
        return False
    current = _start_ticks(stat)
    return start_ticks is None or current is None or current == start_ticks


class ApplicationRegistry:
    """Reads and writes application records; the clock is injected for tests."""

    def __init__(self, storage: Storage, *, heartbeat_timeout: float,
                 clock: Callable[[], float] = time.time,
                 this_host: str | None = None, here: Place | None = None,
                 probe: Callable[[int, int | None], bool] = process_alive) -> None:
        """``here`` is where this process runs (default :func:`this_place`); ``this_host`` only
        renames the host of that default."""
        self.storage = storage
        self.heartbeat_timeout = heartbeat_timeout
        self.clock = clock
        self.here = here or this_place(this_host)
        self.probe = probe

    @staticmethod
    def record_path(app_id: str) -> str:
        """The storage path of ``app_id``'s application record."""
        return f"{RECORDS_DIR}/{validate_app_id(app_id)}.json"

    @staticmethod
    def owned_path(app_id: str) -> str:
        """The storage folder of what ``app_id`` owns."""
        return f"{OWNED_DIR}/{validate_app_id(app_id)}"

    def new_record(self, app_id: str, app_name: str, *, spark_version: str = "",
                   steward_version: str = "", driver_pid: int | None = None) -> ApplicationRecord:
        """A fresh record (not yet written) for the driver process ``driver_pid``, by default
        this one; the liveness verdict probes it. A runtime hosted beside a JVM driver names
        that JVM: the application lives as long as it does, whatever becomes of the runtime."""
        now = self.clock()
        pid = os.getpid() if driver_pid is None else driver_pid
        return ApplicationRecord(validate_app_id(app_id), app_name, self.here.host, pid,
                                 process_start_ticks(pid), now, now, None, spark_version,
                                 steward_version, self.here.boot_id, self.here.pid_ns,
                                 IDENTITY_FORMAT)

    def write(self, record: ApplicationRecord) -> None:
        """Writes ``record``. A storage dir this user cannot write is reported as such
        (naming the dir, the user and what to do), not as the folder below it that failed."""
        try:
            self.storage.write_record(self.record_path(record.app_id), asdict(record))
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in _DENIED:
                self.storage.require_writable()
            raise

    def heartbeat(self, record: ApplicationRecord) -> ApplicationRecord:
        """Writes ``record`` with a new heartbeat time and returns it: proof the driver is alive."""
        updated = replace(record, heartbeat_at=self.clock())
        self.write(updated)
        return updated

    def finish(self, record: ApplicationRecord) -> ApplicationRecord:
        """Writes ``record`` as finished now and returns it, so cleanup of what it owns may start at
        once."""
        now = self.clock()
        updated = replace(record, heartbeat_at=now, finished_at=now)
        self.write(updated)
        return updated

    def read(self, app_id: str) -> ApplicationRecord | None:
        """The record of ``app_id``, or None when there is none."""
        try:
            body = self.storage.read_record(self.record_path(app_id))
        except FileNotFoundError:
            return None
        if not isinstance(body, dict) or body.get("app_id") != app_id:
            raise RecordCorrupt(f"{self.storage.url_of(self.record_path(app_id))} is not the "
                                f"application record of {app_id}")
        known = {f.name for f in fields(ApplicationRecord)}
        # Fields a newer version added are ignored, so old CLIs still read new records.
        values = {k: v for k, v in body.items() if k in known}
        values["cleanup"] = CleanupBacklog.from_json(values.get("cleanup"))
        values["sessions"] = SessionsReport.from_json(values.get("sessions"))
        for name, value in values.items():
            if name in ("cleanup", "sessions"):
                continue
            if not isinstance(value, _FIELD_TYPES[name]) or isinstance(value, bool):
                raise RecordCorrupt(f"{self.storage.url_of(self.record_path(app_id))}: field "
                                    f"{name} is {value!r}, not of the record's format")
        return ApplicationRecord(**values)

    def all(self) -> list[ApplicationRecord]:
        """Every readable record; a corrupt one is logged and skipped, never guessed at."""
        found = []
        for name in self.storage.list_names(RECORDS_DIR):
            if not name.endswith(".json"):
                continue
            try:
                record = self.read(name[: -len(".json")])
            except (RecordCorrupt, TypeError, StewardError) as exc:
                log.warning("skipping application record %s: %s", name, exc)
                continue
            if record is not None:
                found.append(record)
        return found

    def liveness(self, record: ApplicationRecord) -> Liveness:
        """Whether ``record``'s application is live, finished or crashed, judged from its heartbeat
        and driver process."""
        state = classify(finished=record.finished, heartbeat_at=record.heartbeat_at,
                         driver=record.driver, now=self.clock(),
                         heartbeat_timeout=self.heartbeat_timeout, here=self.here,
                         process_alive=self.probe, identity_format=record.identity_format)
        if state is Liveness.UNKNOWN:
            log.warning("leaving what %s owns alone: its record's driver identity format %r is "
                        "unknown to spark-steward %s (written by a newer version?)",
                        record.app_id, record.identity_format, __version__)
        return state

    def is_dead(self, app_id: str) -> bool:
        """True when ``app_id`` has a readable record that says finished or crashed. No record,
        or an unreadable one, is not proof of death: its artifacts are left alone."""
        try:
            record = self.read(app_id)
        except (StewardError, TypeError) as exc:
            log.warning("not touching what %s owns: its record is unreadable (%s)", app_id, exc)
            return False
        return record is not None and self.liveness(record).dead

    def owned_usage(self, app_id: str) -> dict[str, tuple[int, int]]:
        """``{capability: (files, bytes)}`` of what the application owns in the storage dir."""
        base = self.owned_path(app_id)
        return {name: self.storage.usage(f"{base}/{name}")
                for name in self.storage.list_names(base)}

