"""Moves event batches from the JVM shim to the dispatcher on one daemon thread.

One call into the JVM carries up to ``batch_size`` events and waits in the JVM up to ``poll_millis`` for
the first one, so an idle application costs one cheap call per poll interval and a busy one a
call per batch.
"""

from __future__ import annotations

import logging
import threading
import time

from spark_steward.kernel.dispatch import EventDispatcher
from spark_steward.kernel.events import decode_batch
from spark_steward.kernel.jvm import EventBridgeHandle

log = logging.getLogger(__name__)


class EventPump:
    """A thread that drains Spark events from the shim in batches and hands them to the dispatcher.
    """
    def __init__(self, bridge: EventBridgeHandle, dispatcher: EventDispatcher, *,
                 batch_size: int, poll_millis: int) -> None:
        self.bridge = bridge
        self.dispatcher = dispatcher
        self.batch_size = batch_size
        self.poll_millis = poll_millis
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-steward-events", daemon=True)
        self._drain_lock = threading.Lock()
        self.jvm_lost = False

    def start(self) -> None:
        """Starts the draining thread."""
        self._thread.start()

    def _drain_once(self, wait_millis: int) -> int:
        with self._drain_lock:
            batch = decode_batch(self.bridge.drain(self.batch_size, wait_millis))
            self.dispatcher.dispatch(batch)
            return len(batch.events)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self._drain_once(self.poll_millis)
            except Exception as exc:  # gateway errors once the JVM is gone
                if self._stop.is_set():
                    return
                self.jvm_lost = True
                log.error("spark-steward stopped receiving Spark events: %s", exc)
                return
            if 0 < got < self.batch_size:
                # Let events accumulate: a few large batches cost far less CPU (on a busy
                # driver) than a JVM round trip per handful of events. Latency stays within
                # one poll interval; a full batch is drained again at once.
                self._stop.wait(self.poll_millis / 1000)

    def flush(self, timeout: float) -> bool:
        """Returns once every event Spark posted so far was dispatched; False on timeout."""
        deadline = time.monotonic() + timeout
        target = self.bridge.flush(max(1, int(timeout * 1000)))
        if target < 0:
            return False
        return self.dispatcher.wait_for(target, max(0.0, deadline - time.monotonic()))

    def close(self, timeout: float) -> None:
        """Stops the thread, then delivers whatever is still buffered in the JVM."""
        self._stop.set()
        self._thread.join(timeout)
        if self.jvm_lost:
            return
        deadline = time.monotonic() + timeout
        try:
            while self._drain_once(0) and time.monotonic() < deadline:
                pass
        except Exception as exc:
            log.warning("spark-steward could not deliver the last events: %s", exc)
