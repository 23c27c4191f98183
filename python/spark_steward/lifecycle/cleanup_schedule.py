"""When each outstanding cleanup runs next, retried per a :class:`RetryStrategy`.

Pure bookkeeping with an injected clock: the cleaner thread asks what is due, runs it, and
reports success or failure here. A task that exhausted its strategy is *given up*: it leaves the
schedule but stays listed in :attr:`CleanupSchedule.given_up` so the caller can say what was
left (it stays recorded durably for ``gc``).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

from spark_steward.lifecycle.retry import RetryStrategy

K = TypeVar("K", bound=Hashable)


@dataclass
class CleanupTask(Generic[K]):
    key: K
    failures: int = 0
    due_at: float = 0.0
    last_error: str = ""
    running: bool = False
    submitted_at: float = 0.0


class CleanupSchedule(Generic[K]):
    def __init__(self, strategy: RetryStrategy, clock: Callable[[], float]) -> None:
        self.strategy = strategy
        self.clock = clock
        self._tasks: dict[K, CleanupTask[K]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        self.given_up: dict[K, CleanupTask[K]] = {}
        self.attempts = 0
        self.failures = 0
        self.retries = 0  # failures followed by another attempt (not given up)

    def submit(self, key: K, *, delay: float = 0.0) -> bool:
        """Schedules ``key`` (again, if it was given up); False when it is already scheduled."""
        if key in self._tasks:
            return False
        self.given_up.pop(key, None)
        now = self.clock()
        task = CleanupTask(key, due_at=now + delay, submitted_at=now)
        self._tasks[key] = task
        heapq.heappush(self._heap, (task.due_at, next(self._order), key))
        return True

    def due(self) -> list[K]:
        """Keys whose time has come, marked running; each must be reported back once."""
        now = self.clock()
        ready = []
        while self._heap and self._heap[0][0] <= now:
            due_at, _, key = heapq.heappop(self._heap)
            task = self._tasks.get(key)
            if task is None or task.running or task.due_at != due_at:
                continue
            task.running = True
            ready.append(key)
        self.attempts += len(ready)
        return ready

    def next_due_in(self) -> float | None:
        """Seconds until the next waiting task is due (0 if overdue), None when none waits."""
        while self._heap:
            due_at, _, key = self._heap[0]
            task = self._tasks.get(key)
            if task is None or task.running or task.due_at != due_at:
                heapq.heappop(self._heap)
                continue
            return max(0.0, due_at - self.clock())
        return None

    def succeeded(self, key: K) -> None:
        """Records that ``key`` was deleted: it leaves the schedule."""
        self._tasks.pop(key, None)

    def failed(self, key: K, error: str) -> float | None:
        """Records a failed attempt; returns the delay before the retry, None when given up."""
        task = self._tasks.get(key)
        if task is None:
            return None
        self.failures += 1
        task.failures += 1
        task.last_error = error
        task.running = False
        delay = self.strategy.delay_after(task.failures)
        if delay is None:
            del self._tasks[key]
            self.given_up[key] = task
            return None
        self.retries += 1
        task.due_at = self.clock() + delay
        heapq.heappush(self._heap, (task.due_at, next(self._order), key))
        return delay

    def task(self, key: K) -> CleanupTask[K] | None:
        """The pending task of ``key``, or None."""
        return self._tasks.get(key)

    def oldest_submitted_at(self) -> float | None:
        """When the longest-waiting scheduled task was submitted (the schedule's clock)."""
        return min((t.submitted_at for t in self._tasks.values()), default=None)

    def outstanding(self) -> list[K]:
        """Scheduled or running keys, in submission order."""
        return list(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)
