"""Spark Connect's ``spark.addArtifacts`` owned per session, on a Connect server started with
``spark-steward conf --server``.

Spark keeps a session's artifacts under its Spark session id: in the artifact store, in the
context's added files, in the driver's and the executors' copies; and again under the ids of
the session clones ``df.cache()`` makes, which nothing closes. The shim (``SessionArtifacts``,
``ConnectArtifacts``) tells which files a session added and, when the session ends, which ids
and folders were its. This module takes those reports:

- each added file becomes a blob of the session's owner scope (content-addressed and verified as
  every blob: ``spark_steward.blobs.ls()`` on the thin client lists it, ``blobs.get`` reads it in
  the session's UDFs), deleted when the session ends;
- the session's folders on the driver are deleted with the retried cleanup, and only folders a
  report names that sit directly in a root the shim named under a Spark session id (a UUID);
- executors evict the ended ids themselves (the shim asks the driver plugin).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from spark_steward.blob.connect_gc import spark_folders_path
from spark_steward.cleaner import RetryingCleaner, cleaner_from_conf
from spark_steward.errors import StewardError
from spark_steward.kernel import jvm

if TYPE_CHECKING:
    from spark_steward.blob.depot import BlobDepot
    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)

#: The interceptor that tells artifacts (``conf --server`` sets it).
INTERCEPTOR_KEY, INTERCEPTOR_CLASS = jvm.CONNECT_EXTENSIONS[1]
#: How often the shim's reports are taken, seconds.
DRAIN_EVERY = 1.0
#: Spark session ids (``SparkSession.sessionUUID``): the only folder names deleted.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Ended sessions remembered against their late ``added`` reports.
ENDED_KEPT = 10_000


class SessionScopes(Protocol):
    """The blob service, as far as sessions' artifacts go (``BlobService``; it imports this
    module, not the other way round)."""

    def require_depot(self) -> "BlobDepot":
        """The depot the artifacts are kept in."""

    def session_scope(self, session_id: str, *, open_it: bool = True) -> str:
        """The owner scope of Connect session ``session_id``."""

    def session_closed(self, session_id: str) -> None:
        """Closes the session's scope: its blobs are deleted."""


@dataclass(frozen=True)
class ArtifactAdded:
    """Connect session ``session_id`` added artifact ``name`` (``files/x.txt``), at ``path``;
    ``roots`` are the folders Spark keeps every session's artifacts and copies in."""

    session_id: str
    path: str
    name: str
    size: int
    roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionEnded:
    """Connect session ``session_id`` ended: Spark sessions ``uuids`` held its artifacts;
    ``folders`` are left of them on the driver, under ``roots``."""

    session_id: str
    uuids: tuple[str, ...]
    folders: tuple[str, ...]
    roots: tuple[str, ...]


Report = ArtifactAdded | SessionEnded


def parse_reports(text: str) -> tuple[list[Report], int]:
    """The shim's reports (a JSON array) and how many were malformed (skipped)."""
    try:
        items = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return [], 1
    if not isinstance(items, list):
        return [], 1
    reports: list[Report] = []
    bad = 0
    for item in items:
        report = _report(item)
        if report is None:
            bad += 1
        else:
            reports.append(report)
    return reports, bad


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def _report(item: Any) -> Report | None:
    if not isinstance(item, dict) or not isinstance(item.get("session"), str):
        return None
    kind = item.get("kind")
    if kind == "added":
        path, name, size = item.get("path"), item.get("name"), item.get("size")
        roots = _strings(item.get("roots", []))
        if isinstance(path, str) and isinstance(name, str) and isinstance(size, int) \
                and not isinstance(size, bool) and size >= 0 and roots is not None:
            return ArtifactAdded(item["session"], path, name, size, roots)
    elif kind == "ended":
        uuids, folders, roots = (_strings(item.get(k)) for k in ("uuids", "folders", "roots"))
        if uuids is not None and folders is not None and roots is not None:
            return SessionEnded(item["session"], uuids, folders, roots)
    return None


def deletable(folder: str, roots: Iterable[str], uuids: Iterable[str]) -> bool:
    """Whether ``folder`` may be deleted: directly inside one of ``roots`` (absolute, not the
    file system's root), named by one of the session's Spark session ids ``uuids``."""
    path = Path(folder)
    if not path.is_absolute() or ".." in path.parts or path.name not in set(uuids):
        return False
    if not _UUID.fullmatch(path.name):
        return False
    return any(Path(root).is_absolute() and len(Path(root).parts) > 1
               and path.parent == Path(root) for root in roots)


def _remove(folder: str) -> None:
    """Deletes ``folder`` (gone already is done); raises what failed, to be retried."""
    path = Path(folder)
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


class ConnectArtifacts:
    """Takes the shim's artifact reports for one runtime (``BlobService`` starts it on a
    Connect server with spark-steward's interceptor)."""

    def __init__(self, service: SessionScopes, drain: Callable[[], str],
                 cleaner: RetryingCleaner[str],
                 remember: Callable[[list[str]], None] | None = None) -> None:
        """``remember(folders)`` keeps Spark's artifact folders for ``gc`` after a crash."""
        self._service = service
        self._drain = drain
        self.cleaner = cleaner
        self._remember = remember
        self._roots: set[str] = set()
        self._lock = threading.Lock()
        #: session id -> {artifact name: size} of the artifacts kept as its blobs
        self._owned: dict[str, dict[str, int]] = {}
        self._ended: dict[str, None] = {}
        self.malformed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def wanted(cls, runtime: "DriverRuntime") -> bool:
        """Whether the driver loads spark-steward's interceptor (``conf --server``)."""
        classes = runtime.sc.getConf().get(INTERCEPTOR_KEY, "") or ""
        return INTERCEPTOR_CLASS in [c.strip() for c in classes.split(",")]

    @classmethod
    def start_for(cls, service: SessionScopes, runtime: "DriverRuntime"
                  ) -> "ConnectArtifacts | None":
        """Starts taking reports when the driver is such a server; else None."""
        if not cls.wanted(runtime):
            return None
        def remember(folders: list[str]) -> None:
            runtime.storage.write_record(spark_folders_path(runtime.app_id), {"folders": folders})

        owner = cls(service, lambda: str(jvm.call(runtime.sc, "drainConnectArtifacts")),
                    cleaner_from_conf(runtime.conf, "connect-artifacts"), remember)
        owner._thread = threading.Thread(target=owner._run, daemon=True,
                                         name="spark-steward-connect-artifacts")
        owner._thread.start()
        return owner

    def _run(self) -> None:
        while not self._stop.wait(DRAIN_EVERY):
            try:
                self.take()
            except Exception:  # the thread must live: the next reports are taken as usual
                log.exception("spark-steward could not take Connect artifact reports")

    def stop(self, timeout: float = 10.0) -> None:
        """Takes the last reports, then waits (bounded) for the deletions under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.take()
        self.cleaner.close(timeout)

    def take(self) -> None:
        """Acts on the reports since the last call (a failure is logged; the next call goes on).
        """
        try:
            text = self._drain()
        except Exception as exc:  # the JVM is going away: nothing to take
            log.debug("no Connect artifact reports: %s", exc)
            return
        reports, bad = parse_reports(text)
        if bad:
            self.malformed += bad
            log.warning("spark-steward skipped %d malformed Connect artifact report(s)", bad)
        ending = {r.session_id for r in reports if isinstance(r, SessionEnded)}
        for report in reports:
            try:
                if isinstance(report, ArtifactAdded):
                    if report.session_id not in ending:
                        self._added(report)
                else:
                    self._ended_session(report)
            except Exception:
                log.exception("spark-steward could not act on a Connect artifact report of "
                              "session %s", report.session_id)

    def _added(self, report: ArtifactAdded) -> None:
        self._remember_roots(report.roots)
        with self._lock:
            if report.session_id in self._ended:
                return
        depot = self._service.require_depot()
        try:
            depot.put_file(report.path, scope=self._service.session_scope(report.session_id),
                           name=report.name)
        except (OSError, StewardError) as exc:
            # Spark's copy stays usable; only the verified blob is missing.
            log.warning("spark-steward could not keep artifact %s of Connect session %s as a "
                        "blob: %s", report.name, report.session_id, exc)
            return
        with self._lock:
            self._owned.setdefault(report.session_id, {})[report.name] = report.size

    def _remember_roots(self, roots: Iterable[str]) -> None:
        """Names Spark's artifact folders for ``gc`` once (again when a new one shows)."""
        with self._lock:
            new = set(roots) - self._roots
            if not new or self._remember is None:
                return
            self._roots |= new
            folders = sorted(self._roots)
        try:
            self._remember(folders)
        except (OSError, StewardError) as exc:
            with self._lock:
                self._roots -= new  # named again at the next report
            log.warning("spark-steward could not record Spark's Connect artifact folders for "
                        "gc after a crash: %s", exc)

    def _ended_session(self, report: SessionEnded) -> None:
        with self._lock:
            self._owned.pop(report.session_id, None)
            self._ended[report.session_id] = None
            while len(self._ended) > ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
        self._service.session_closed(report.session_id)
        for folder in report.folders:
            if deletable(folder, report.roots, report.uuids):
                self.cleaner.submit(folder, functools.partial(_remove, folder))
            else:
                log.warning("spark-steward left %s alone: not a Spark session folder of Connect "
                            "session %s", folder, report.session_id)

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        """``{"artifacts": (files, bytes)}`` the session added, when it added any."""
        with self._lock:
            owned = self._owned.get(session_id)
            if not owned:
                return {}
            return {"artifacts": (len(owned), sum(owned.values()))}
