"""The driver's bookkeeping of blobs (FLIP-19, server side): references, owner scopes, jobs and
staged cleanup.

Pure: no IO, no clock, no Spark. The driver's blob service feeds it events (puts, job and task
ends, executors' first-use and receipt reports, cleanup ticks) and performs the
:class:`Deletion` values it returns. A blob is ``(scope, key)``, both opaque strings.

Two lifecycles, as in FLIP-19. *Permanent* blobs (jars, files: needed again by a retry) hold one
reference per job that uses them and survive a failed job. *Transient* blobs (offloaded
messages: re-creatable) count their outstanding receivers, are deleted as soon as the last one
succeeds, and are reset when their owning job fails. Anything unreferenced goes through staged
cleanup; a scope's final state deletes its whole directory whatever the counts say.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

from spark_steward.lifecycle.refcount import RefCounts
from spark_steward.lifecycle.staged_cleanup import StagedCleanup

APPLICATION_SCOPE = "_app"
#: How many ended stage ids are remembered to ignore late binds.
ENDED_STAGES_KEPT = 10_000
#: Most stages bound before any job named them (a bind that outran its job-start event: a few
#: at a time in a real application). Beyond that the oldest is forgotten with its references,
#: so reports naming made-up stages pin neither blobs nor memory. They are forgotten sooner
#: too: when a job starts whose newest stage is newer (Spark numbers stages in submission order
#: and posts each job's start before it creates the next job's stages, so a real stage older
#: than a started job's is named by then). A bind naming a stage more than this many ids past
#: the newest one a job named binds nothing: no real job runs that far ahead of its events.
PENDING_STAGES_KEPT = 1024
#: Most task attempts holding receipts whose end was not seen yet; beyond that the oldest
#: receipt is forgotten (its transient blob then waits for its job's end or its scope).
RECEIVING_TASKS_KEPT = 65_536

Blob = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Deletion:
    """What the caller must delete, locally and in HA storage; ``key=None`` is the scope dir."""

    scope: str
    key: str | None
    reason: str  # "staged", "received", "scope-final" or "application-end"


class ScopeState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # closed by the user, some of its jobs still run
    FINAL = "final"      # deleted; the id is never reused


_MOVES: dict[ScopeState | None, frozenset[ScopeState]] = {
    None: frozenset({ScopeState.OPEN}),
    ScopeState.OPEN: frozenset({ScopeState.CLOSING, ScopeState.FINAL}),
    ScopeState.CLOSING: frozenset({ScopeState.FINAL}),
    ScopeState.FINAL: frozenset(),
}


@dataclass(slots=True)
class _BlobState:
    transient: bool
    owner: int | None = None                         # transient: first job that bound it
    jobs: set[int] = field(default_factory=set)      # running jobs holding a reference
    stages: set[int] = field(default_factory=set)    # stage records that bound it
    tasks: set[int] = field(default_factory=set)     # task attempts that received it
    pinned: bool = False                             # held until its scope ends (addFile)


@dataclass(slots=True)
class _Job:
    scope: str
    stages: tuple[int, ...]
    held: set[Blob] = field(default_factory=set)     # permanent blobs it holds a reference to
    owned: set[Blob] = field(default_factory=set)    # transient blobs it owns


@dataclass(slots=True)
class _Stage:
    """Blobs bound by a stage's tasks. Without running jobs it is *pending* (the bind came
    before the job-start event) and holds the permanent references itself until a job names it."""

    jobs: set[int] = field(default_factory=set)
    blobs: set[Blob] = field(default_factory=set)


class BlobLedger:
    """Reference counts and cleanup decisions for every blob the driver stores.

    Every map is keyed by something alive (a tracked blob, a running job, a stage of a running
    job or a pending bind, a task that received a blob), and everything is dropped when that
    ends, so memory stays bounded however many jobs run. Only the ids of final scopes are kept,
    to refuse their reuse.
    """

    def __init__(self) -> None:
        self._reset(ended=False)

    def _reset(self, *, ended: bool) -> None:
        self._refs: RefCounts[Blob] = RefCounts()
        self._cleanup: StagedCleanup[Blob] = StagedCleanup()
        self._blobs: dict[Blob, _BlobState] = {}
        self._by_scope: dict[str, set[str]] = {}
        self._scopes: dict[str, ScopeState] = {} if ended else {APPLICATION_SCOPE: ScopeState.OPEN}
        self._running: dict[str, int] = {}
        self._jobs: dict[int, _Job] = {}
        self._stages: dict[int, _Stage] = {}
        self._pending_stages: OrderedDict[int, None] = OrderedDict()  # no job named them yet
        self._newest_stage = -1  # the newest stage id a started job named
        self._tasks: dict[int, set[Blob]] = {}
        # Stages whose jobs all ended, bounded: a straggler's late bind must not pin a blob.
        self._ended_stages: OrderedDict[int, None] = OrderedDict()
        self._ended = ended

    def open_scope(self, scope: str) -> None:
        """Registers an owner scope; blobs can only be put into an open scope."""
        self._refuse_if_ended()
        self._move(scope, ScopeState.OPEN)

    def close_scope(self, scope: str) -> list[Deletion]:
        """The user is done with ``scope``: final now, or at the end of its last running job."""
        if scope == APPLICATION_SCOPE:
            raise ValueError(f"scope {scope!r} cannot be closed; it ends with the application")
        if self._running.get(scope):
            self._move(scope, ScopeState.CLOSING)
            return []
        return [self._finalize(scope)]

    def _move(self, scope: str, to: ScopeState) -> None:
        """The one place scope states change; illegal moves (reopen, double close) are refused."""
        now = self._scopes.get(scope)
        if to not in _MOVES[now]:
            state = now.value if now else "unknown"
            raise ValueError(f"scope {scope!r} is {state} and cannot become {to.value}; "
                             "a closed scope id is never reused, open a new one")
        self._scopes[scope] = to

    def _finalize(self, scope: str) -> Deletion:
        """FLIP-19 safety net: the scope's directory goes, whatever its references say."""
        self._move(scope, ScopeState.FINAL)
        for key in sorted(self._by_scope.get(scope, ())):
            self.forget(scope, key)
        return Deletion(scope, None, "scope-final")

    def put(self, scope: str, key: str, *, transient: bool, receivers: int = 0) -> None:
        """Tracks a stored blob. Unreferenced puts are staged, so they must be bound within
        one cleanup interval (FLIP-19 upload before submission); a re-put restarts that wait."""
        self._refuse_if_ended()
        if receivers < 0:
            raise ValueError(f"receivers of blob {key!r} in scope {scope!r} must be >= 0, "
                             f"got {receivers}")
        if self._scopes.get(scope) is not ScopeState.OPEN:
            raise ValueError(f"cannot put blob {key!r}: scope {scope!r} is not open")
        blob = (scope, key)
        state = self._blobs.get(blob)
        if state is None:
            self._blobs[blob] = _BlobState(transient)
            self._by_scope.setdefault(scope, set()).add(key)
            self._refs.track(blob, receivers if transient else 0)
        elif state.transient and not transient:
            self._make_permanent(blob, state)
        elif state.transient and receivers:
            self._acquire(blob, receivers)
        elif self._refs.count(blob) == 0:
            self._cleanup.rescue(blob)  # so that stage() below restarts the full interval
        if self._refs.count(blob) == 0:
            self._cleanup.stage(blob)

    def _make_permanent(self, blob: Blob, state: _BlobState) -> None:
        """Receivers are no references of a permanent blob: recount it from the stages using it."""
        state.transient = False
        if state.owner is not None:
            self._jobs[state.owner].owned.discard(blob)
            state.owner = None
        self._drop_receipts(blob, state)
        self._refs.reset(blob)
        self._cleanup.rescue(blob)
        for stage_id in state.stages:
            stage = self._stages[stage_id]
            for job_id in stage.jobs:
                self._attribute(job_id, blob)
            if not stage.jobs:
                self._acquire(blob)

    def bind(self, scope: str, key: str, stage_id: int) -> bool:
        """A task of ``stage_id`` uses the blob; False if it is not tracked (already deleted)."""
        blob = (scope, key)
        state = self._blobs.get(blob)
        if state is None:
            return False
        if stage_id in self._ended_stages and stage_id not in self._stages:
            return True  # its jobs are over: a late report (straggler, speculation) binds nothing
        if stage_id > self._newest_stage + PENDING_STAGES_KEPT:
            return True  # no job of this application is that far ahead of its events
        stage = self._stages.setdefault(stage_id, _Stage())
        if blob in stage.blobs:
            return True
        if not stage.jobs and stage_id not in self._pending_stages:
            self._pending_stages[stage_id] = None
            if len(self._pending_stages) > PENDING_STAGES_KEPT:
                self._forget_pending(next(iter(self._pending_stages)))
        stage.blobs.add(blob)
        state.stages.add(stage_id)
        for job_id in stage.jobs:
            self._attribute(job_id, blob)
        if not stage.jobs and not state.transient:
            self._acquire(blob)  # held by the pending stage until a job names it
        return True

    def pin(self, scope: str, key: str) -> bool:
        """Holds a permanent blob until its scope reaches its final state, as Spark keeps an
        added file for the whole application; False if it is not tracked. Idempotent."""
        blob = (scope, key)
        state = self._blobs.get(blob)
        if state is None:
            return False
        if state.transient:
            raise ValueError(f"blob {key!r} in scope {scope!r} is transient and cannot be pinned")
        if not state.pinned:
            state.pinned = True
            self._acquire(blob)
        return True

    def received(self, scope: str, key: str, task_id: int) -> bool:
        """A task attempt loaded a transient blob; it counts once that task succeeds."""
        blob = (scope, key)
        state = self._blobs.get(blob)
        if state is None or not state.transient:
            return False
        state.tasks.add(task_id)
        self._tasks.setdefault(task_id, set()).add(blob)
        if len(self._tasks) > RECEIVING_TASKS_KEPT:
            oldest = next(iter(self._tasks))
            for received in self._tasks.pop(oldest):
                self._blobs[received].tasks.discard(oldest)
        return True

    def _forget_pending(self, stage_id: int) -> None:
        """Drops a stage no job has named, with the references it held."""
        del self._pending_stages[stage_id]
        stage = self._stages.pop(stage_id)
        for blob in stage.blobs:
            state = self._blobs[blob]
            state.stages.discard(stage_id)
            if not state.transient and self._refs.release(blob):
                self._cleanup.stage(blob)

    def forget(self, scope: str, key: str) -> None:
        """Drops the blob from every map (the caller deleted it); idempotent."""
        blob = (scope, key)
        state = self._blobs.pop(blob, None)
        if state is None:
            return
        self._refs.forget(blob)
        self._cleanup.rescue(blob)
        keys = self._by_scope[scope]
        keys.discard(key)
        if not keys:
            del self._by_scope[scope]
        for job_id in state.jobs:
            self._jobs[job_id].held.discard(blob)
        if state.owner is not None:
            self._jobs[state.owner].owned.discard(blob)
        for stage_id in state.stages:
            stage = self._stages[stage_id]
            stage.blobs.discard(blob)
            if not stage.blobs and not stage.jobs:
                del self._stages[stage_id]
                self._pending_stages.pop(stage_id, None)
        self._drop_receipts(blob, state)

    def job_started(self, job_id: int, scope: str, stage_ids: Iterable[int]) -> None:
        """Maps the job's stages to it and takes over what those stages already bound."""
        if self._ended or job_id in self._jobs:
            return
        job = self._jobs[job_id] = _Job(scope, tuple(dict.fromkeys(stage_ids)))
        self._running[scope] = self._running.get(scope, 0) + 1
        for stage_id in job.stages:
            self._ended_stages.pop(stage_id, None)
            self._pending_stages.pop(stage_id, None)
            stage = self._stages.setdefault(stage_id, _Stage())
            pending = not stage.jobs
            stage.jobs.add(job_id)
            for blob in stage.blobs:
                self._attribute(job_id, blob)
                if pending and not self._blobs[blob].transient:
                    self._refs.release(blob)  # the stage's reference passed to the job
        self._newest_stage = max(self._newest_stage, *job.stages)
        for stage_id in [s for s in self._pending_stages if s < self._newest_stage]:
            self._forget_pending(stage_id)  # older than a started job's: no job of ours

    def job_ended(self, job_id: int, succeeded: bool) -> list[Deletion]:
        """Success releases the job's references. Failure keeps permanent ones (a retry needs
        them; the scope's final delete is the net) and resets the transient blobs it owns."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return []
        for stage_id in job.stages:
            stage = self._stages[stage_id]
            stage.jobs.discard(job_id)
            if not stage.jobs:
                del self._stages[stage_id]
                self._ended_stages[stage_id] = None
                if len(self._ended_stages) > ENDED_STAGES_KEPT:
                    self._ended_stages.popitem(last=False)
                for blob in stage.blobs:
                    self._blobs[blob].stages.discard(stage_id)
        for blob in job.held:
            self._blobs[blob].jobs.discard(job_id)
            if succeeded and self._refs.release(blob):
                self._cleanup.stage(blob)
        for blob in job.owned:
            state = self._blobs[blob]
            state.owner = None
            if not succeeded:
                self._drop_receipts(blob, state)
                self._refs.reset(blob)
                self._cleanup.stage(blob)
        self._running[job.scope] -= 1
        if self._running[job.scope]:
            return []
        del self._running[job.scope]
        closing = self._scopes.get(job.scope) is ScopeState.CLOSING
        return [self._finalize(job.scope)] if closing else []

    def task_ended(self, task_id: int, succeeded: bool) -> list[Deletion]:
        """A successful receiver releases its transient blobs (the last one deletes at once);
        a failed attempt releases nothing, its retry receives the blob again."""
        received = self._tasks.pop(task_id, None)
        if received is None:
            return []
        deletions = []
        for blob in sorted(received):
            self._blobs[blob].tasks.discard(task_id)
            if succeeded and self._refs.count(blob) > 0 and self._refs.release(blob):
                self.forget(*blob)
                deletions.append(Deletion(blob[0], blob[1], "received"))
        return deletions

    def _attribute(self, job_id: int, blob: Blob) -> None:
        job, state = self._jobs[job_id], self._blobs[blob]
        if state.transient:
            if state.owner is None:
                state.owner = job_id
                job.owned.add(blob)
        elif blob not in job.held:
            job.held.add(blob)
            state.jobs.add(job_id)
            self._acquire(blob)

    def _acquire(self, blob: Blob, n: int = 1) -> None:
        self._refs.acquire(blob, n)
        self._cleanup.rescue(blob)

    def _drop_receipts(self, blob: Blob, state: _BlobState) -> None:
        for task_id in state.tasks:
            received = self._tasks[task_id]
            received.discard(blob)
            if not received:
                del self._tasks[task_id]
        state.tasks.clear()

    def tick(self) -> list[Deletion]:
        """One cleanup period: the blobs unreferenced since the previous tick, as one directory
        delete per scope when they are all of an idle scope (cheaper, especially in HA)."""
        due: dict[str, list[str]] = {}
        for scope, key in self._cleanup.tick():
            due.setdefault(scope, []).append(key)
        deletions: list[Deletion] = []
        for scope, keys in sorted(due.items()):
            whole = (len(keys) == len(self._by_scope[scope]) and not self._running.get(scope))
            for key in keys:
                self.forget(scope, key)
            deletions += ([Deletion(scope, None, "staged")] if whole
                          else [Deletion(scope, key, "staged") for key in sorted(keys)])
        return deletions

    def end_application(self) -> list[Deletion]:
        """Everything goes: one directory delete per scope that is open or still has blobs."""
        scopes = {s for s, st in self._scopes.items() if st is not ScopeState.FINAL}
        deletions = [Deletion(s, None, "application-end")
                     for s in sorted(scopes | self._by_scope.keys())]
        self._reset(ended=True)
        return deletions

    def _refuse_if_ended(self) -> None:
        if self._ended:
            raise ValueError("the application ended: the blob ledger takes no more scopes or blobs")

    def count(self, scope: str, key: str) -> int:
        """The reference count of a blob."""
        return self._refs.count((scope, key))

    def is_tracked(self, scope: str, key: str) -> bool:
        """True while the ledger tracks the blob."""
        return (scope, key) in self._blobs

    def is_staged(self, scope: str, key: str) -> bool:
        """True while the blob waits in staged cleanup."""
        return self._cleanup.is_waiting((scope, key))

    def kind_of(self, scope: str, key: str) -> str:
        """``"transient"`` or ``"permanent"`` for a tracked blob; ValueError otherwise."""
        state = self._blobs.get((scope, key))
        if state is None:
            raise ValueError(f"blob {key!r} in scope {scope!r} is not tracked")
        return "transient" if state.transient else "permanent"

    def scopes(self) -> list[str]:
        """Open scopes and scopes that still have blobs, sorted."""
        open_ = {s for s, st in self._scopes.items() if st is ScopeState.OPEN}
        return sorted(open_ | self._by_scope.keys())

    def blobs(self, scope: str) -> list[str]:
        """The keys of ``scope``'s tracked blobs, sorted."""
        return sorted(self._by_scope.get(scope, ()))

    def running_jobs(self, scope: str) -> int:
        """How many jobs of ``scope`` are running."""
        return self._running.get(scope, 0)

    def is_closed(self, scope: str) -> bool:
        """True once ``scope`` is closing or closed."""
        return self._scopes.get(scope) in (ScopeState.CLOSING, ScopeState.FINAL)
