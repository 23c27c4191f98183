"""Typed records of the Spark events the JVM shim forwards, and the decoder for its batches.

A batch is one JSON string ``{"dropped", "accepted", "stopped", "events": [...]}``; each event is
a positional array ``[seq, type, time, fields...]`` whose ``seq`` the shim assigns in acceptance
order, so gaps are visible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from spark_steward.errors import EventDecodeError


@dataclass(frozen=True, slots=True)
class JobStart:
    seq: int
    time: int
    job_id: int
    stage_ids: tuple[int, ...]
    job_group: str | None
    job_tags: str | None
    properties: Mapping[str, str] = field(default_factory=dict)
    #: Every RDD of the job's stages (the first 2,048): who computed, or wrote, which RDD.
    rdd_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class JobEnd:
    seq: int
    time: int
    job_id: int
    succeeded: bool
    message: str | None


@dataclass(frozen=True, slots=True)
class _TaskEvent:
    """Identity of one task attempt, shared by its start and end events."""

    seq: int
    time: int
    task_id: int
    stage_id: int
    stage_attempt: int
    partition: int
    index: int
    attempt: int
    executor_id: str
    host: str


@dataclass(frozen=True, slots=True)
class TaskStart(_TaskEvent):
    """A task attempt was launched."""


@dataclass(frozen=True, slots=True)
class TaskEnd(_TaskEvent):
    """``reason`` is ``success``, ``failed`` or ``killed``; ``message`` says why for the last two."""

    reason: str
    message: str | None
    task_type: str

    @property
    def succeeded(self) -> bool:
        """True when the task ended successfully."""
        return self.reason == "success"


@dataclass(frozen=True, slots=True)
class ExecutorAdded:
    seq: int
    time: int
    executor_id: str
    host: str
    cores: int


@dataclass(frozen=True, slots=True)
class ExecutorRemoved:
    seq: int
    time: int
    executor_id: str
    message: str | None


@dataclass(frozen=True, slots=True)
class ApplicationEnd:
    seq: int
    time: int


@dataclass(frozen=True, slots=True)
class CheckpointCleaned:
    """Spark's ContextCleaner deleted the reliable checkpoint of RDD ``rdd_id``.

    Sent by the shim's CheckpointCleanWatch from the cleaner's thread, after Spark deleted
    ``<current checkpoint dir>/rdd-<rdd_id>``: the dir at cleaning time, not at writing time, so
    after a ``setCheckpointDir`` in between the real folder is still there (delete the recorded
    path, not this one).
    Only checkpoints written while ``spark.cleaner.referenceTracking.cleanCheckpoints`` was true
    are ever cleaned, and only once the checkpointed RDD was garbage collected on the JVM.
    """

    seq: int
    time: int
    rdd_id: int


@dataclass(frozen=True, slots=True)
class RddCleaned:
    """Spark's ContextCleaner cleaned RDD ``rdd_id`` (registered with it and then garbage
    collected on the JVM). Sent by the shim's CheckpointCleanWatch; drives the release of
    ``df.checkpoint()`` results the checkpoint store served."""

    seq: int
    time: int
    rdd_id: int


@dataclass(frozen=True, slots=True)
class StreamLocation:
    """The driver opened the ``offsets`` log of a streaming query's checkpoint ``location``
    (qualified); ``query_id`` from its ``metadata`` file, None when that was not written yet.
    Sent by the shim's checkpoint file manager (StreamFiles), once per location and JVM."""

    seq: int
    time: int
    location: str
    query_id: str | None


@dataclass(frozen=True, slots=True)
class StreamStarted:
    """A streaming query run started (Spark's QueryStartedEvent)."""

    seq: int
    time: int
    query_id: str
    run_id: str
    name: str | None


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """A streaming query run reported progress (one per micro-batch, or idle every ~10 s)."""

    seq: int
    time: int
    query_id: str
    run_id: str
    batch_id: int


@dataclass(frozen=True, slots=True)
class StreamTerminated:
    """A streaming query run ended; ``exception`` says why when it failed."""

    seq: int
    time: int
    query_id: str
    run_id: str
    exception: str | None


@dataclass(frozen=True, slots=True)
class SessionStarted:
    """A Spark Connect session started on this driver (a Connect server)."""

    seq: int
    time: int
    session_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """A Spark Connect session ended: its client released it, it expired, or the server
    stops."""

    seq: int
    time: int
    session_id: str
    user_id: str


SparkEvent = Union[JobStart, JobEnd, TaskStart, TaskEnd, ExecutorAdded, ExecutorRemoved,
                   ApplicationEnd, CheckpointCleaned, RddCleaned, StreamLocation, StreamStarted,
                   StreamProgress, StreamTerminated, SessionStarted, SessionClosed]


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events of one drain call plus the shim's counters at that moment."""

    events: tuple[SparkEvent, ...]
    dropped: int
    accepted: int
    stopped: bool


# Each event arrives as [seq, type, time, fields...]; the field order per type is fixed by the
# shim's StewardListener (checkpoint_cleaned [rdd_id] and rdd_cleaned [rdd_id]:
# CheckpointCleanWatch) and mirrored here.

def _job_start(r: list[Any]) -> JobStart:
    return JobStart(r[0], r[2], r[3], tuple(r[4]), r[5], r[6], dict(r[7] or {}),
                    tuple(r[8]) if len(r) > 8 else ())


def _job_end(r: list[Any]) -> JobEnd:
    return JobEnd(r[0], r[2], r[3], r[4] == "succeeded", r[5])


def _task_start(r: list[Any]) -> TaskStart:
    return TaskStart(r[0], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10])


def _task_end(r: list[Any]) -> TaskEnd:
    return TaskEnd(r[0], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
                   r[13] or "")


def _executor_added(r: list[Any]) -> ExecutorAdded:
    return ExecutorAdded(r[0], r[2], r[3], r[4], r[5])


def _executor_removed(r: list[Any]) -> ExecutorRemoved:
    return ExecutorRemoved(r[0], r[2], r[3], r[4])


def _application_end(r: list[Any]) -> ApplicationEnd:
    return ApplicationEnd(r[0], r[2])


def _checkpoint_cleaned(r: list[Any]) -> CheckpointCleaned:
    return CheckpointCleaned(r[0], r[2], int(r[3]))


def _rdd_cleaned(r: list[Any]) -> RddCleaned:
    return RddCleaned(r[0], r[2], int(r[3]))


def _stream_location(r: list[Any]) -> StreamLocation:
    return StreamLocation(r[0], r[2], r[3], r[4])


def _stream_started(r: list[Any]) -> StreamStarted:
    return StreamStarted(r[0], r[2], r[3], r[4], r[5])


def _stream_progress(r: list[Any]) -> StreamProgress:
    return StreamProgress(r[0], r[2], r[3], r[4], int(r[5]))


def _stream_terminated(r: list[Any]) -> StreamTerminated:
    return StreamTerminated(r[0], r[2], r[3], r[4], r[5])


def _session_started(r: list[Any]) -> SessionStarted:
    return SessionStarted(r[0], r[2], str(r[3]), str(r[4]))


def _session_closed(r: list[Any]) -> SessionClosed:
    return SessionClosed(r[0], r[2], str(r[3]), str(r[4]))


_DECODERS: dict[str, Callable[[list[Any]], SparkEvent]] = {
    "session_started": _session_started,
    "session_closed": _session_closed,
    "job_start": _job_start,
    "job_end": _job_end,
    "task_start": _task_start,
    "task_end": _task_end,
    "executor_added": _executor_added,
    "executor_removed": _executor_removed,
    "application_end": _application_end,
    "checkpoint_cleaned": _checkpoint_cleaned,
    "rdd_cleaned": _rdd_cleaned,
    "stream_location": _stream_location,
    "stream_started": _stream_started,
    "stream_progress": _stream_progress,
    "stream_terminated": _stream_terminated,
}


def decode_batch(payload: str) -> EventBatch:
    """Parses one drain payload; unknown event types are a shim/package version mismatch."""
    try:
        raw = json.loads(payload)
        events: list[SparkEvent] = []
        for row in raw["events"]:
            decoder = _DECODERS.get(row[1])
            if decoder is None:
                raise EventDecodeError(f"unknown event type {row[1]!r} from the JVM shim")
            events.append(decoder(row))
        return EventBatch(tuple(events), int(raw["dropped"]), int(raw["accepted"]),
                          bool(raw["stopped"]))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        if isinstance(exc, EventDecodeError):
            raise
        raise EventDecodeError(f"unreadable event batch from the JVM shim: {exc}") from None
