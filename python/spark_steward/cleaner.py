"""A retrying cleaner: runs cleanup actions on an IO pool, off the caller's thread, and retries
each failed one per the configured :class:`~spark_steward.lifecycle.retry.RetryStrategy`.

The schedule (what is due when) is the pure :class:`CleanupSchedule`; this module adds one
scheduler thread and a thread pool. An action must be idempotent: it may run again after a
failure that left part of the work done. What the strategy gives up on is logged with its last
error and reported by :meth:`RetryingCleaner.close`; the caller keeps it recorded durably so a
later run (or ``spark-steward gc``) finishes it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

from spark_steward.applications import CleanupBacklog, GivenUp
from spark_steward.config import CLEANUP_THREADS, StewardConf
from spark_steward.lifecycle.cleanup_schedule import CleanupSchedule
from spark_steward.lifecycle.retry import RetryStrategy

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", int, str)
Action = Callable[[], None]


@dataclass(frozen=True)
class EntryKey(Generic[V]):
    """A cleaner's key for discarding one recorded entry: ``name`` is a checkpoint series or a
    cached table key, ``version`` the checkpoint's number or the table's attempt."""

    name: str
    version: V

    def describe(self) -> str:
        """``name/version``, for log lines."""
        return f"{self.name}/{self.version}"


@dataclass(frozen=True)
class OrphanKey:
    """A cleaner's key for deleting ``path`` (relative to the storage root), which no entry owns.
    ``round`` tells apart repeated sweeps of one path (a merged series is swept after each save),
    so a later sweep is not refused while an earlier one is outstanding."""

    path: str
    round: int = 0

    def describe(self) -> str:
        """The orphan's path, for log lines."""
        return self.path


class RetryingCleaner(Generic[K]):
    def __init__(self, strategy: RetryStrategy, *, threads: int = 4, name: str = "cleanup",
                 clock: Callable[[], float] = time.monotonic,
                 describe: Callable[[K], str] = str) -> None:
        self.name = name
        self.describe = describe
        self._schedule: CleanupSchedule[K] = CleanupSchedule(strategy, clock)
        self._actions: dict[K, Action] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads),
                                        thread_name_prefix=f"steward-{name}")
        self._thread = threading.Thread(target=self._run, name=f"steward-{name}-scheduler",
                                        daemon=True)
        self._thread.start()

    @property
    def strategy(self) -> RetryStrategy:
        """The retry strategy of failed deletes."""
        return self._schedule.strategy

    def submit(self, key: K, action: Action) -> bool:
        """Runs ``action`` soon, retrying on failure; False if ``key`` is already outstanding
        (or the cleaner is closed: the work stays recorded for the next run)."""
        with self._cond:
            if self._closed or key in self._actions:
                return False
            self._actions[key] = action
            self._schedule.submit(key)
            self._cond.notify_all()
            return True

    def outstanding(self) -> list[K]:
        """The keys still waiting to be deleted."""
        with self._cond:
            return self._schedule.outstanding()

    def given_up(self) -> dict[K, str]:
        """Keys the strategy gave up on, with their last error."""
        with self._cond:
            return {k: t.last_error for k, t in self._schedule.given_up.items()}

    def stats(self) -> dict[str, int]:
        """Attempts, failures, outstanding and given-up counts, for metrics."""
        with self._cond:
            return {"attempts": self._schedule.attempts, "failures": self._schedule.failures,
                    "outstanding": len(self._schedule), "given_up": len(self._schedule.given_up)}

    def backlog(self, wall_clock: Callable[[], float] = time.time) -> CleanupBacklog:
        """What is outstanding and given up, for the application record and the metrics;
        ages are converted from the cleaner's clock to ``wall_clock``."""
        with self._cond:
            schedule = self._schedule
            oldest = schedule.oldest_submitted_at()
            waited = None if oldest is None else schedule.clock() - oldest
            given_up = tuple(GivenUp(self.describe(k), t.last_error)
                             for k, t in schedule.given_up.items())
            pending, retries = len(schedule), schedule.retries
        return CleanupBacklog(pending, None if waited is None else wall_clock() - waited,
                              retries, given_up)

    def wait_idle(self, timeout: float) -> bool:
        """Waits until nothing is outstanding; False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._schedule):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def close(self, timeout: float) -> list[K]:
        """Waits up to ``timeout`` for outstanding work, then stops; returns what was left
        (outstanding or given up)."""
        self.wait_idle(timeout)
        with self._cond:
            self._closed = True
            left = self._schedule.outstanding() + list(self._schedule.given_up)
            self._cond.notify_all()
        self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return left

    # -- the scheduler thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                due = self._schedule.due()
                if not due:
                    wait = self._schedule.next_due_in()
                    self._cond.wait(1.0 if wait is None else min(max(wait, 0.001), 1.0))
                    continue
                actions = [(key, self._actions[key]) for key in due]
            for key, action in actions:
                try:
                    self._pool.submit(self._attempt, key, action)
                except RuntimeError:
                    # The interpreter is exiting (detach from atexit): concurrent.futures takes
                    # no new work then, so run it here rather than leave it for the next run.
                    self._attempt(key, action)

    def _attempt(self, key: K, action: Action) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - every failure is retried or reported
            error = f"{type(exc).__name__}: {exc}"
            with self._cond:
                delay = self._schedule.failed(key, error)
                if delay is None:
                    self._actions.pop(key, None)
                    # Logged before waiters wake, so close() never returns ahead of it.
                    log.warning("spark-steward %s gave up on %s (%s): %s; it stays recorded and "
                                "`spark-steward gc` or the next run finishes it", self.name,
                                self.describe(key), self.strategy.describe(), error)
                else:
                    log.info("spark-steward %s of %s failed (%s); retrying in %.3gs",
                             self.name, self.describe(key), error, delay)
                self._cond.notify_all()
            return
        with self._cond:
            self._schedule.succeeded(key)
            self._actions.pop(key, None)
            self._cond.notify_all()


def cleaner_from_conf(conf: "StewardConf", name: str,
                      describe: Callable[[K], str] = str) -> RetryingCleaner[K]:
    """A cleaner with the application's ``cleanup-strategy`` and ``cleanup.io-threads``."""
    return RetryingCleaner(conf.retry_strategy(), threads=conf.get(CLEANUP_THREADS), name=name,
                           describe=describe)
