"""The checkpoint state machine (FLIP-270): pending → completed → marked for deletion →
discarded, with subsumption and the failover rules. Pure: records in, decisions out.

A pending checkpoint is registered durably *before* any of its data is written, so a crash at any
point leaves an entry that names what to delete. Discarding always goes mark (durably) → delete
data → delete the serialized artifact → remove the entry; each step is idempotent, so a discard
interrupted anywhere is simply run again.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from spark_steward.checkpoint.errors import CheckpointError

_SERIES = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
#: Series of Spark's own checkpoints are named ``_spark.<application id>``.
SPARK_SERIES_PREFIX = "_spark."


class CheckpointState(enum.Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    DISCARDING = "marked-for-deletion"


class CheckpointKind(enum.Enum):
    #: Written by ``checkpoints(name).save(df)``; data in the storage dir.
    SERIES = "series"
    #: Spark's own ``rdd.checkpoint()`` / ``df.checkpoint()`` folder (an absolute URL).
    SPARK_RDD = "spark-rdd"
    #: The ``<dir>/<uuid>`` folder ``sc.setCheckpointDir`` creates for one SparkContext.
    SPARK_CONTEXT_DIR = "spark-context-dir"
    #: ``df.checkpoint()`` served by the store (``checkpoints.replace-builtin``): data in the
    #: storage dir like a series', never restored by another application.
    SPARK_DATAFRAME = "spark-dataframe"

    @property
    def in_storage(self) -> bool:
        """Whether the data path is relative to the storage root (else an absolute URL)."""
        return self in (CheckpointKind.SERIES, CheckpointKind.SPARK_DATAFRAME)


def validate_series(name: str, *, internal_ok: bool = True) -> str:
    """A series name is a path segment; ``_spark.<app id>`` is reserved for Spark's own."""
    inner = name[len(SPARK_SERIES_PREFIX):] if (
        internal_ok and isinstance(name, str) and name.startswith(SPARK_SERIES_PREFIX)) else name
    if not isinstance(inner, str) or not _SERIES.fullmatch(inner):
        raise CheckpointError(
            f"checkpoint series name {name!r} is not valid: use 1-200 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit")
    return name


def spark_series(app_id: str) -> str:
    """The internal series holding Spark's own checkpoints of application ``app_id``."""
    return SPARK_SERIES_PREFIX + app_id


@dataclass(frozen=True)
class CheckpointEntry:
    """One checkpoint's durable metadata entry (the StateHandleStore record).

    ``data`` is where its data lives: a path relative to the storage root for series
    checkpoints, an absolute URL for Spark's own. ``discard_reason`` says why it was marked.
    """

    series: str
    number: int
    app_id: str
    kind: CheckpointKind
    state: CheckpointState
    data: str
    created_at: float
    completed_at: float | None = None
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    discard_reason: str = ""
    marked_at: float | None = None
    #: File-merged (FLIP-306): ``data`` is the creator folder of the save and ``physical`` the
    #: physical files whose segments it uses (for a pending one: those it reuses).
    merged: bool = False
    physical: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """``series/number``, for messages."""
        return f"{self.series}/{self.number}"

    @property
    def key(self) -> tuple[str, int]:
        """``(series, number)``: the entry's identity."""
        return (self.series, self.number)

    def to_json(self) -> dict[str, object]:
        """The entry as the JSON body of its metadata record."""
        body = {k: v for k, v in self.__dict__.items()}
        body["kind"] = self.kind.value
        body["state"] = self.state.value
        body["physical"] = list(self.physical)
        return body

    @classmethod
    def from_json(cls, body: dict[str, object]) -> "CheckpointEntry":
        """The entry a metadata record holds (unknown fields ignored)."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in body.items() if k in known}
        values["kind"] = CheckpointKind(values["kind"])
        values["state"] = CheckpointState(values["state"])
        physical = body.get("physical") or ()
        values["physical"] = tuple(str(p) for p in physical) \
            if isinstance(physical, (list, tuple)) else ()
        return cls(**values)  # type: ignore[arg-type]


def pending(series: str, number: int, app_id: str, kind: CheckpointKind, data: str, now: float,
            *, merged: bool = False, reuses: Iterable[str] = ()) -> CheckpointEntry:
    """A new pending entry: written before any data, so a crash leaves something to clean."""
    return CheckpointEntry(series, number, app_id, kind, CheckpointState.PENDING, data, now,
                           merged=merged, physical=tuple(sorted(set(reuses))))


def complete(entry: CheckpointEntry, now: float, *, rows: int | None = None,
             bytes_: int | None = None, files: int | None = None,
             physical: Iterable[str] | None = None) -> CheckpointEntry:
    """PENDING → COMPLETED; anything else is a bug in the caller, reported with the id.

    ``physical`` (merged checkpoints) replaces the pending reuse list by every physical file the
    checkpoint's segments are in."""
    if entry.state is not CheckpointState.PENDING:
        raise CheckpointError(f"checkpoint {entry.id} cannot complete: it is {entry.state.value}")
    done = replace(entry, state=CheckpointState.COMPLETED, completed_at=now, rows=rows,
                   bytes=bytes_, files=files)
    return done if physical is None else replace(done, physical=tuple(sorted(set(physical))))


def mark_for_deletion(entry: CheckpointEntry, reason: str, now: float) -> CheckpointEntry:
    """Any state → DISCARDING (idempotent: an already marked entry keeps its first reason)."""
    if entry.state is CheckpointState.DISCARDING:
        return entry
    return replace(entry, state=CheckpointState.DISCARDING, discard_reason=reason, marked_at=now)


def next_number(existing: Iterable[int]) -> int:
    """The next checkpoint number after ``existing``."""
    return max(existing, default=0) + 1


def subsumed(entries: Iterable[CheckpointEntry], retained: int) -> list[CheckpointEntry]:
    """Completed checkpoints of one series beyond the newest ``retained``, oldest first."""
    done = sorted((e for e in entries if e.state is CheckpointState.COMPLETED),
                  key=lambda e: e.number)
    keep = max(1, retained)
    return done[:-keep] if len(done) > keep else []


def to_discard_at_recovery(entries: Iterable[CheckpointEntry], is_dead: Callable[[str], bool],
                           own_app: str) -> list[CheckpointEntry]:
    """What failover must clean: everything marked for deletion, pending checkpoints of
    applications that are no longer alive, and Spark's own checkpoints of dead applications
    (they are never restored by another application). Completed series checkpoints are kept.
    """
    found = []
    dead: dict[str, bool] = {}

    def gone(app: str) -> bool:
        if app == own_app:
            return False
        if app not in dead:
            dead[app] = is_dead(app)
        return dead[app]

    for entry in entries:
        if entry.state is CheckpointState.DISCARDING:
            found.append(entry)
        elif entry.kind is not CheckpointKind.SERIES and gone(entry.app_id):
            found.append(entry)
        elif entry.state is CheckpointState.PENDING and gone(entry.app_id):
            found.append(entry)
    return sorted(found, key=lambda e: e.key)
