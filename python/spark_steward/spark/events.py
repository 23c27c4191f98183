"""Typed records of the Spark events the JVM shim forwards, and the decoder for its batches.

A batch is one JSON string ``{"dropped", "accepted", "stopped", "events": [...]}``; each event
carries a ``seq`` assigned by the shim in acceptance order, so gaps are visible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Union


@dataclass(frozen=True, slots=True)
class JobStart:
    seq: int
    time: int
    job_id: int
    stage_ids: tuple[int, ...]
    job_group: str | None
    job_tags: str | None
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobEnd:
    seq: int
    time: int
    job_id: int
    succeeded: bool
    message: str | None


@dataclass(frozen=True, slots=True)
class TaskStart:
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
class TaskEnd:
    """``reason`` is ``success``, ``failed`` or ``killed``; ``message`` says why for the last two."""

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
    reason: str
    message: str | None
    task_type: str

    @property
    def succeeded(self) -> bool:
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


SparkEvent = Union[JobStart, JobEnd, TaskStart, TaskEnd, ExecutorAdded, ExecutorRemoved,
                   ApplicationEnd]


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events of one drain call plus the shim's counters at that moment."""

    events: tuple[SparkEvent, ...]
    dropped: int
    accepted: int
    stopped: bool


def _job_start(e: dict[str, Any]) -> JobStart:
    return JobStart(e["seq"], e["time"], e["job_id"], tuple(e["stage_ids"]), e.get("job_group"),
                    e.get("job_tags"), dict(e.get("properties") or {}))


def _job_end(e: dict[str, Any]) -> JobEnd:
    return JobEnd(e["seq"], e["time"], e["job_id"], e["result"] == "succeeded", e.get("message"))


_TASK_FIELDS = ("seq", "time", "task_id", "stage_id", "stage_attempt", "partition", "index",
                "attempt", "executor_id", "host")


def _task_start(e: dict[str, Any]) -> TaskStart:
    return TaskStart(*(e[k] for k in _TASK_FIELDS))


def _task_end(e: dict[str, Any]) -> TaskEnd:
    return TaskEnd(*(e[k] for k in _TASK_FIELDS), e["reason"], e.get("message"),
                   e.get("task_type") or "")


_DECODERS = {
    "job_start": _job_start,
    "job_end": _job_end,
    "task_start": _task_start,
    "task_end": _task_end,
    "executor_added": lambda e: ExecutorAdded(e["seq"], e["time"], e["executor_id"], e["host"],
                                              e["cores"]),
    "executor_removed": lambda e: ExecutorRemoved(e["seq"], e["time"], e["executor_id"],
                                                  e.get("message")),
    "application_end": lambda e: ApplicationEnd(e["seq"], e["time"]),
}


class EventDecodeError(ValueError):
    """The shim sent something this version cannot read (a version mismatch)."""


def decode_batch(payload: str) -> EventBatch:
    """Parses one drain payload; unknown event types are a shim/package version mismatch."""
    try:
        raw = json.loads(payload)
        events = []
        for e in raw["events"]:
            decoder = _DECODERS.get(e.get("type"))
            if decoder is None:
                raise EventDecodeError(f"unknown event type {e.get('type')!r} from the JVM shim")
            events.append(decoder(e))
        return EventBatch(tuple(events), int(raw["dropped"]), int(raw["accepted"]),
                          bool(raw["stopped"]))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, EventDecodeError):
            raise
        raise EventDecodeError(f"unreadable event batch from the JVM shim: {exc}") from None
