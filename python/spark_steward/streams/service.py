"""The streams service on the driver: owns the checkpoint locations of Structured Streaming queries.

At attach it makes the shim's checkpoint file manager Spark's
(``spark.sql.streaming.checkpointFileManagerClass``, keeping a manager the user configured as
the one it delegates to) and resumes what crashed drivers left: drops recorded but not finished,
failed deletes and temp files of locations no run holds, and records of locations whose folder
is gone (after the drop grace). While queries run it records each
location at start (``stream_location`` from the manager joined with Spark's QueryStartedEvent),
keeps a heartbeat from progress, retries failed deletes every ``streams.sweep-interval`` (temp
files of killed tasks every ``streams.temp-horizon``) and cleans a location once its run ends.
With ``streams.pack.enabled`` it packs each running query's old files after every batch
(``packer.py``), on a thread of its own so neither Spark's listener nor the cleanup waits.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from spark_steward.applications import CleanupBacklog
from spark_steward.cleaner import RetryingCleaner, cleaner_from_conf
from spark_steward.config import CLEANUP_SHUTDOWN_TIMEOUT, RESOLVED_KEY
from spark_steward.streams.config_keys import (STREAMS_ABANDONED_AFTER, STREAMS_DELEGATE_CLASS,
                                               STREAMS_DROP_GRACE, STREAMS_PACK_ENABLED,
                                               STREAMS_PACK_GRACE, STREAMS_PACK_KEEP_BATCHES,
                                               STREAMS_PACK_MAX_AMPLIFICATION,
                                               STREAMS_PACK_MAX_MEMBER, STREAMS_SWEEP_INTERVAL,
                                               STREAMS_TEMP_HORIZON)
from spark_steward.errors import StewardError
from spark_steward.kernel import handover, jvm
from spark_steward.kernel.events import (StreamLocation, StreamProgress, StreamStarted,
                                         StreamTerminated)
from spark_steward.kernel.runtime import RuntimeService
from spark_steward.kernel.session import active_session
from spark_steward.streams.lifecycle.locations import (StreamRecord, StreamState, normal_location,
                                                       valid_query_id)
from spark_steward.streams.location import Location
from spark_steward.streams.packer import Cancelled, Packer
from spark_steward.streams.store import StreamStore

if TYPE_CHECKING:
    from spark_steward.kernel.runtime import DriverRuntime

log = logging.getLogger(__name__)

CLASS_KEY = "spark.sql.streaming.checkpointFileManagerClass"
DELEGATE_KEY = STREAMS_DELEGATE_CLASS.name
#: Progress events come once per micro-batch; the record is rewritten at most this often.
HEARTBEAT_EVERY = 10.0
#: How long stop() waits for an in-flight packing cycle to reach its next write and stop.
PACK_STOP_TIMEOUT = 10.0

#: A cleaner key: (what, query id); "clean" retries intents and sweeps temp files, "retry" only
#: retries intents, "drop" finishes a recorded drop, "recover" removes the record of a location
#: that is gone or else cleans it.
Key = tuple[str, str]


def describe_key(key: Key) -> str:
    """A cleanup key as the cleaner's log lines name it."""
    return f"{key[0]} of streaming query {key[1]}"


class StreamService(RuntimeService):
    name: ClassVar[str] = "streams"
    remote_ops: ClassVar[Mapping[str, str]] = {
        op: f"spark_steward.streams.commands:serve_{op.split('.')[1]}"
        for op in ("streams.ls", "streams.drop", "streams.unpack")}
    rank: ClassVar[int] = 50

    def __init__(self) -> None:
        self.store: StreamStore | None = None
        self.cleaner: RetryingCleaner[Key] | None = None
        self._runtime: DriverRuntime | None = None
        self._lock = threading.Lock()
        self._locations: dict[str, str] = {}   # query id -> location
        self._unmatched: list[str] = []        # locations announced without a query id
        # Starts seen before their location: the order of the two differs between Spark lines
        # and between a first start and a restart.
        self._waiting: dict[str, StreamStarted] = {}
        self._records: dict[str, StreamRecord] = {}  # this application's running queries
        # Ended in this application: executors may still record failed deletes after the end
        # (state maintenance runs on), so their intents are retried for the application's life.
        self._ended: dict[str, StreamRecord] = {}
        self._written: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.manager_class: str | None = None
        self._pack = False
        self._packers: dict[str, Packer] = {}  # query id -> the packer of its running location
        self._pack_due: set[str] = set()
        self._pack_wake = threading.Event()
        self._pack_thread: threading.Thread | None = None

    @property
    def runtime(self) -> "DriverRuntime | None":
        """The runtime this service started in (None before start)."""
        return self._runtime

    def start(self, runtime: "DriverRuntime") -> None:
        conf = runtime.conf
        self._runtime = runtime
        self.cleaner = cleaner_from_conf(conf, "stream-cleanup", describe_key)
        self.store = StreamStore(runtime.registry,
                                 abandoned_after=conf.get(STREAMS_ABANDONED_AFTER),
                                 drop_grace=conf.get(STREAMS_DROP_GRACE),
                                 temp_horizon=conf.get(STREAMS_TEMP_HORIZON),
                                 options=runtime.storage.options)
        # Attached, spark-steward is on for the context whatever its conf said at start.
        record = handover.Handover({**handover.resolve(conf).fields, "enabled": True}).encode()
        self.manager_class = str(jvm.call(runtime.sc, "installStreamFiles",
                                          jvm.context_handle(runtime.sc), record))
        spark = active_session()
        if spark is not None:  # made before attach: it copied the context's conf then
            current = spark.conf.get(CLASS_KEY, None)
            if current and current != self.manager_class and not spark.conf.get(DELEGATE_KEY,
                                                                                None):
                spark.conf.set(DELEGATE_KEY, current)
            spark.conf.set(CLASS_KEY, self.manager_class)
            spark.conf.set(RESOLVED_KEY, record)
        runtime.dispatcher.subscribe(self._on_event, "streams")
        self._recover()
        interval = conf.get(STREAMS_SWEEP_INTERVAL)
        self._thread = threading.Thread(target=self._sweep_loop, args=(interval,),
                                        name="steward-streams", daemon=True)
        self._thread.start()
        self._pack = conf.get(STREAMS_PACK_ENABLED)
        if self._pack:
            self._pack_thread = threading.Thread(target=self._pack_loop, name="steward-packer",
                                                 daemon=True)
            self._pack_thread.start()

    # -- events ------------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        if isinstance(event, StreamLocation):
            location = normal_location(event.location)
            with self._lock:
                if event.query_id and valid_query_id(event.query_id):
                    self._locations[event.query_id] = location
                else:
                    self._unmatched.append(location)
                waiting = list(self._waiting.values())
            for started in waiting:
                self._started(started)
        elif isinstance(event, StreamStarted):
            self._started(event)
        elif isinstance(event, StreamProgress):
            self._progressed(event)
        elif isinstance(event, StreamTerminated):
            self._terminated(event)

    def _location_of(self, query_id: str) -> str | None:
        with self._lock:
            found = self._locations.get(query_id)
            unmatched = list(self._unmatched)
        if found is not None:
            return found
        for location in unmatched:  # the metadata file was not written when it was announced
            if _metadata_id(location, self.store.options if self.store else {}) == query_id:
                with self._lock:
                    self._locations[query_id] = location
                    if location in self._unmatched:
                        self._unmatched.remove(location)
                return location
        return None

    def _started(self, event: StreamStarted) -> None:
        assert self.store is not None and self._runtime is not None
        location = self._location_of(event.query_id)
        with self._lock:
            if location is None:
                # Its location comes later, or never: spark-steward is off in its session.
                self._waiting[event.query_id] = event
                return
            self._waiting.pop(event.query_id, None)
        now = time.time()
        earlier = self.store.records.read(event.query_id) if valid_query_id(event.query_id) \
            else None
        if earlier is not None and earlier.dropping is not None:
            log.warning("streaming query %s starts on %s while a drop of it is recorded; the "
                        "drop is called off", event.name or event.query_id, location)
        record = StreamRecord(event.query_id, location, event.name, self._runtime.app_id,
                              event.run_id, started=now, heartbeat=now)
        self._write(record)

    def _progressed(self, event: StreamProgress) -> None:
        with self._lock:
            record = self._records.get(event.query_id)
            due = record is not None and record.run_id == event.run_id and \
                time.time() - self._written.get(event.query_id, 0.0) >= HEARTBEAT_EVERY
        if record is not None and due:
            self._write(record.progressed(time.time()))
        if self._pack and record is not None and record.run_id == event.run_id:
            with self._lock:
                self._pack_due.add(event.query_id)
            self._pack_wake.set()

    def _terminated(self, event: StreamTerminated) -> None:
        with self._lock:
            self._waiting.pop(event.query_id, None)
            record = self._records.get(event.query_id)
        if record is None or record.run_id != event.run_id:
            return
        ended = record.ended(time.time(), event.exception)
        self._write(ended, running=False)
        self._submit("clean", ended, active=False)

    def _write(self, record: StreamRecord, running: bool = True) -> None:
        assert self.store is not None
        with self._lock:
            if running:
                if self._records.get(record.query_id, record).run_id != record.run_id:
                    self._retire_packer(record.query_id)
                self._records[record.query_id] = record
                self._ended.pop(record.query_id, None)
            else:
                self._records.pop(record.query_id, None)
                self._retire_packer(record.query_id)
                self._pack_due.discard(record.query_id)
                self._ended[record.query_id] = record
            self._written[record.query_id] = time.time()
        try:
            self.store.records.write(record)
        except StewardError as exc:
            log.warning("could not record streaming query %s at %s: %s",
                        record.name or record.query_id, record.location, exc)

    def _retire_packer(self, query_id: str) -> None:
        """Under the lock: the run's packer writes nothing more, also mid-cycle."""
        packer = self._packers.pop(query_id, None)
        if packer is not None:
            packer.cancel()

    def _owns(self, record: StreamRecord) -> Callable[[], bool]:
        """Whether ``record``'s run still owns its location: the run this application runs,
        and the run the query's record names (a restart elsewhere writes its own)."""
        store = self.store
        assert store is not None

        def owns() -> bool:
            with self._lock:
                current = self._records.get(record.query_id)
            if current is None or current.run_id != record.run_id:
                return False
            try:
                stored = store.records.read(record.query_id)
            except StewardError:
                return False  # unknown: write nothing this cycle
            return stored is None or stored.run_id == record.run_id

        return owns

    # -- cleanup -----------------------------------------------------------------------------

    def _submit(self, what: str, record: StreamRecord, *, active: bool) -> None:
        store, cleaner = self.store, self.cleaner
        if store is None or cleaner is None:
            return
        if what == "drop":
            def action() -> None:
                store.finish_drop(record)
        elif what == "recover":
            this_app = self._runtime.app_id if self._runtime is not None else None

            def action() -> None:
                if store.forget_gone(record, this_app=this_app) is not None:
                    store.clean(record, active=active)
        else:
            def action() -> None:
                store.clean(record, active=active, sweep_temps=what != "retry")
        cleaner.submit((what, record.query_id), action)

    def _recover(self) -> None:
        """Resumes what earlier drivers left: recorded drops, the failed deletes and temp files
        of locations no run holds any more, and the records of locations that are gone."""
        assert self.store is not None and self._runtime is not None
        for status in self.store.statuses(this_app=self._runtime.app_id):
            if status.state is StreamState.DROPPING:
                self._submit("drop", status.record, active=False)
            elif status.state is not StreamState.RUNNING:
                self._submit("recover", status.record, active=False)

    def _sweep_loop(self, interval: float) -> None:
        assert self.store is not None
        horizon = self.store.temp_horizon
        last_temps = time.monotonic()
        while not self._stop.wait(interval):
            with self._lock:
                owned = [(r, True) for r in self._records.values()]
                owned += [(r, False) for r in self._ended.values()]
            temps_due = time.monotonic() - last_temps >= horizon
            for record, running in owned:
                if temps_due and running:
                    self._submit("clean", record, active=True)
                    continue
                try:
                    pending = Location(record.location, self.store.options).pending_intents()
                except StewardError as exc:
                    log.debug("could not list the intents of %s: %s", record.location, exc)
                    continue
                if pending:
                    self._submit("retry", record, active=running)
            if temps_due:
                last_temps = time.monotonic()

    # -- packing -----------------------------------------------------------------------------

    def _pack_loop(self) -> None:
        """Packs each running query's location after its batches; at most one cycle a second
        per query, and only while this application runs it."""
        assert self._runtime is not None and self.store is not None
        conf = self._runtime.conf
        while not self._stop.is_set():
            self._pack_wake.wait(5.0)
            self._pack_wake.clear()
            with self._lock:
                due = [(qid, self._records[qid]) for qid in self._pack_due if qid in self._records]
                self._pack_due.clear()
            for qid, record in due:
                if self._stop.is_set():
                    return
                with self._lock:
                    packer = self._packers.get(qid)
                if packer is None:
                    try:
                        packer = Packer(Location(record.location, self.store.options),
                                        keep=conf.get(STREAMS_PACK_KEEP_BATCHES),
                                        grace=conf.get(STREAMS_PACK_GRACE),
                                        max_member=conf.get(STREAMS_PACK_MAX_MEMBER),
                                        max_amplification=conf.get(
                                            STREAMS_PACK_MAX_AMPLIFICATION),
                                        owns=self._owns(record))
                    except StewardError as exc:
                        log.warning("cannot pack %s: %s", record.location, exc)
                        continue
                    with self._lock:
                        current = self._records.get(qid)
                        if current is None or current.run_id != record.run_id:
                            continue  # ended meanwhile
                        self._packers[qid] = packer
                try:
                    result = packer.cycle()
                except Cancelled as exc:
                    log.debug("%s", exc)
                    continue
                except Exception as exc:  # noqa: BLE001 - one location never stops the thread
                    log.warning("packing %s failed (the next batch retries): %s",
                                record.location, exc, exc_info=not isinstance(exc, StewardError))
                    continue
                log.debug("packed %s: %s", record.location, result)
            self._stop.wait(1.0)

    # -- lifecycle ---------------------------------------------------------------------------

    def metrics(self) -> Mapping[str, int]:
        with self._lock:
            return {"streams.running": len(self._records)}

    def cleanup_backlog(self) -> CleanupBacklog | None:
        return None if self.cleaner is None else self.cleaner.backlog()

    def stop(self, runtime: "DriverRuntime") -> None:
        self._stop.set()
        with self._lock:
            left = list(self._records.values())
            for query_id in list(self._packers):
                self._retire_packer(query_id)
        self._pack_wake.set()
        if self._pack_thread is not None:  # its cycle stops at its next write
            self._pack_thread.join(PACK_STOP_TIMEOUT)
        for record in left:  # Spark stops its queries with the context, not always with an event
            ended = record.ended(time.time(), None)
            self._write(ended, running=False)
            self._submit("clean", ended, active=False)
        if self.cleaner is not None:
            left_keys = self.cleaner.close(runtime.conf.get(CLEANUP_SHUTDOWN_TIMEOUT))
            if left_keys:
                log.warning("spark-steward: %d streaming cleanup(s) still outstanding at stop; the "
                            "next attach or spark-steward gc finishes them", len(left_keys))


def _metadata_id(location: str, options: dict[str, Any]) -> str | None:
    """The query id in ``<location>/metadata`` (``{"id": "..."}``), or None."""
    try:
        data = Location(location, options).storage.read_bytes("metadata")
        value = json.loads(data.splitlines()[0] if data else b"{}").get("id")
    except (StewardError, ValueError, AttributeError, IndexError):
        return None
    return value if valid_query_id(value) else None
