package io.sparksteward.shim.kernel;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Bounded hand-over between Spark's listener thread and the Python drain thread. {@link #offer}
 * never blocks: when the buffer is full the event is dropped and counted, so Spark's listener bus
 * is never held up and no loss is silent.
 */
final class EventBuffer {
  private final ArrayBlockingQueue<String> queue;
  private final AtomicLong accepted = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();

  EventBuffer(int capacity) {
    this.queue = new ArrayBlockingQueue<>(capacity);
  }

  /** Numbers the event and enqueues it; returns false (and counts a drop) when full. */
  synchronized boolean offer(EventEncoder.Builder event) {
    long seq = accepted.get() + 1;
    if (queue.offer(event.seq(seq).build())) {
      accepted.set(seq);
      return true;
    }
    dropped.incrementAndGet();
    return false;
  }

  /** Waits up to {@code waitMillis} for a first event, then takes at most {@code max} events. */
  List<String> drain(int max, long waitMillis) throws InterruptedException {
    List<String> out = new ArrayList<>();
    String first = waitMillis > 0 ? queue.poll(waitMillis, TimeUnit.MILLISECONDS) : queue.poll();
    if (first == null) {
      return out;
    }
    out.add(first);
    queue.drainTo(out, Math.max(0, max - 1));
    return out;
  }

  long accepted() {
    return accepted.get();
  }

  long dropped() {
    return dropped.get();
  }
}
