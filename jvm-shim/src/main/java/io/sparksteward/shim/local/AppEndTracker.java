package io.sparksteward.shim.local;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * The driver's view of the executors that will remove their host's folder when the application
 * ends: every executor that said hello, minus those that left during the application (they
 * answered {@code running}, or Spark reported them removed) and those that reported done. Its
 * stop waits, bounded, for that set to empty. Pure: no Spark, no IO; thread-safe.
 */
final class AppEndTracker {
  private final Map<String, String> hosts = new LinkedHashMap<>();
  private final Set<String> left = new HashSet<>();
  private final Set<String> told = new HashSet<>();
  private final Map<String, String> outcomes = new LinkedHashMap<>();

  /** An executor plugin started on {@code host}. */
  synchronized void hello(String executorId, String host) {
    if (!left.contains(executorId)) {
      hosts.put(executorId, host);
    }
  }

  /** The executor went without (or before) reporting: nothing more will come from it. */
  synchronized void left(String executorId) {
    left.add(executorId);
    notifyAll();
  }

  /** The executor was answered {@code ending}. */
  synchronized void told(String executorId) {
    told.add(executorId);
  }

  /** The executor acted on {@code ending}: {@code outcome} of its folder removal. */
  synchronized void done(String executorId, String outcome) {
    outcomes.put(executorId, outcome);
    notifyAll();
  }

  /** Executors that said hello, did not leave, and have not reported. */
  synchronized List<String> awaited() {
    List<String> out = new ArrayList<>();
    for (String id : hosts.keySet()) {
      if (!left.contains(id) && !outcomes.containsKey(id)) {
        out.add(id);
      }
    }
    return out;
  }

  /** Waits until {@link #awaited} is empty, at most {@code timeoutMillis}; whether it is. */
  synchronized boolean awaitReports(long timeoutMillis) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
    while (!awaited().isEmpty()) {
      long remaining = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
      if (remaining <= 0) {
        return false;
      }
      wait(remaining);
    }
    return true;
  }

  /** One line per executor alive at the end: what became of its host's folder. */
  synchronized List<String> summary(long waitedMillis) {
    List<String> lines = new ArrayList<>();
    for (Map.Entry<String, String> e : hosts.entrySet()) {
      String id = e.getKey();
      String where = "executor " + id + " on " + e.getValue() + ": ";
      String outcome = outcomes.get(id);
      if (outcome != null) {
        lines.add(where + outcome);
      } else if (left.contains(id) && told.contains(id)) {
        lines.add(where + "went before reporting its removal");
      } else if (!left.contains(id)) {
        lines.add(where + (told.contains(id) ? "removal not reported" : "did not ask")
            + " within " + waitedMillis + " ms: the host keeps the folder until the next "
            + "application starts there or `spark-steward gc --local-dir`");
      }
    }
    return lines;
  }
}
