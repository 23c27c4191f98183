"""Hands decoded events to subscribers, in order, and notices loss.

Pure: the pump feeds it :class:`~spark_steward.kernel.events.EventBatch` values; it keeps the
last sequence number seen so :meth:`EventDispatcher.wait_for` can tell when everything the shim
accepted up to a point has been delivered. Subscriber errors are logged with the subscriber's
name and never stop delivery to the others.

Every event type takes the same path, including
:class:`~spark_steward.kernel.events.CheckpointCleaned`, which the shim sends from Spark's
ContextCleaner thread instead of the listener bus: the same buffer numbers it, so ordering,
``wait_for`` and loss accounting cover it too.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Callable

from spark_steward.kernel.events import EventBatch, SparkEvent

log = logging.getLogger(__name__)

EventHandler = Callable[[SparkEvent], None]


class EventDispatcher:
    """Ordered fan-out of events to subscribers, with loss accounting."""

    def __init__(self) -> None:
        self._handlers: list[tuple[str, EventHandler]] = []
        self._lock = threading.Lock()
        self._progress = threading.Condition()
        self.last_seq = 0
        self.delivered = 0
        self.dropped = 0
        self.gaps = 0
        self.counts: Counter[str] = Counter()

    def subscribe(self, handler: EventHandler, name: str | None = None) -> Callable[[], None]:
        """Adds ``handler``; returns a function that removes it."""
        entry = (str(name or getattr(handler, "__qualname__", repr(handler))), handler)
        with self._lock:
            self._handlers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._handlers:
                    self._handlers.remove(entry)

        return unsubscribe

    def dispatch(self, batch: EventBatch) -> None:
        """Delivers a batch's events not seen yet to every subscriber, in order."""
        with self._lock:
            handlers = list(self._handlers)
        last = self.last_seq
        for event in batch.events:
            if event.seq <= last:
                log.error("spark-steward skipped event seq %d: already delivered up to %d",
                          event.seq, last)
                continue
            if event.seq != last + 1 and last:
                # Sequence numbers count accepted events only; a gap means a lost batch.
                self.gaps += event.seq - last - 1
                log.error("spark-steward lost %d events between seq %d and %d",
                          event.seq - last - 1, last, event.seq)
            last = event.seq
            for name, handler in handlers:
                try:
                    handler(event)
                except Exception:
                    log.exception("event subscriber %s failed on %s", name, type(event).__name__)
            self.counts[type(event).__name__] += 1
        if last != self.last_seq:
            # One wake-up per batch: waiters only ask "has seq N been delivered yet?".
            with self._progress:
                self.last_seq = last
                self.delivered = sum(self.counts.values())
                self._progress.notify_all()
        if batch.dropped > self.dropped:
            log.warning(
                "spark-steward's event buffer was full: %d events dropped so far; raise "
                "spark.steward.events.buffer-capacity", batch.dropped)
            self.dropped = batch.dropped

    def wait_for(self, seq: int, timeout: float) -> bool:
        """Blocks until every event up to ``seq`` was dispatched; False on timeout."""
        with self._progress:
            return self._progress.wait_for(lambda: self.last_seq >= seq, timeout)
