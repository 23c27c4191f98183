package io.sparksteward.shim.blob;

import java.io.File;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.EventEncoder;
import io.sparksteward.shim.kernel.PrivateFiles;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What Spark Connect's artifact manager keeps for a session ({@code spark.addArtifacts}): the
 * files in the server's artifact store, the driver's copies, the executors' copies. Spark
 * deletes the store's folder of a closed session, but not the copies of the session clones
 * {@code df.cache()} makes, not the driver's copies, and the executors' only when 100 newer
 * sessions have pushed the session out of their cache.
 *
 * <p>The Connect side ({@code io.sparksteward.shim.connect.SessionArtifacts}) tells this class
 * what a session added and, when it ends, which Spark session ids and folders were its. The
 * driver runtime drains those reports ({@link #drain}): it keeps a verified copy of each artifact
 * as a blob of the session and deletes the folders with its retried cleanup. Executors holding
 * sessions ask the driver plugin every {@link #ASK_EVERY_MILLIS} which ended and evict them from
 * Spark's own isolated-session cache, which deletes their copies once no task uses them (and
 * fetches them again, should a task of the session still come).
 */
public final class ConnectArtifacts {
  /** The key of the executors' extra conf (the plugin's own map, not a Spark conf). */
  public static final String ENABLED_KEY = "connect-artifacts";
  static final String ASK = "ended-sessions?";
  /** The ended Connect sessions an executor lists for its Python workers (one id a line). */
  public static final String ENDED_FILE = "spark-steward-ended-sessions";
  /** Marks a Connect session's id among the ended Spark session ids. */
  private static final String SESSION = "connect:";
  static final long ASK_EVERY_MILLIS = 5000;
  /** Reports kept for a runtime that does not drain (stopped, restarting). */
  static final int MAX_REPORTS = 100_000;
  /** Ended Spark session ids kept for executors that have not asked yet. */
  static final int MAX_ENDED = 4096;
  private static final Logger LOG = LoggerFactory.getLogger(ConnectArtifacts.class);

  private static final List<String> REPORTS = new ArrayList<>();
  private static final LinkedHashMap<String, Long> ENDED = new LinkedHashMap<>();
  private static long generation;
  private static long dropped;

  private ConnectArtifacts() {}

  // -- the driver ----------------------------------------------------------------------------

  /**
   * Session {@code sessionId} added {@code file} (its artifact {@code name}); {@code roots} are
   * the folders Spark keeps every session's artifacts and copies in (for {@code gc} after a
   * crash).
   */
  public static void added(String sessionId, String file, String name, long size,
      List<String> roots) {
    StringBuilder sb = new StringBuilder("{\"kind\":\"added\",\"session\":");
    EventEncoder.quote(sb, sessionId);
    sb.append(",\"path\":");
    EventEncoder.quote(sb, file);
    sb.append(",\"name\":");
    EventEncoder.quote(sb, name);
    sb.append(",\"size\":").append(size);
    list(sb.append(",\"roots\":"), roots);
    report(sb.append('}').toString());
  }

  /**
   * Session {@code sessionId} ended: Spark sessions {@code uuids} were its (its own and its
   * clones'), {@code folders} are what is left of them on the driver, under {@code roots}.
   */
  public static void ended(String sessionId, List<String> uuids, List<String> folders,
      List<String> roots) {
    StringBuilder sb = new StringBuilder("{\"kind\":\"ended\",\"session\":");
    EventEncoder.quote(sb, sessionId);
    list(sb.append(",\"uuids\":"), uuids);
    list(sb.append(",\"folders\":"), folders);
    list(sb.append(",\"roots\":"), roots);
    report(sb.append('}').toString());
    synchronized (ENDED) {
      for (String uuid : uuids) {
        ENDED.remove(uuid);
        ENDED.put(uuid, ++generation);
      }
      trimEnded();
    }
  }

  /**
   * Connect session {@code sessionId} ended (any session, with artifacts or not): executors list
   * it in {@link #ENDED_FILE}, where spark-steward's Python workers find which sessions' local
   * state to remove.
   */
  public static void sessionEnded(String sessionId) {
    synchronized (ENDED) {
      ENDED.remove(SESSION + sessionId);
      ENDED.put(SESSION + sessionId, ++generation);
      trimEnded();
    }
  }

  private static void trimEnded() {
    while (ENDED.size() > MAX_ENDED) {
      Iterator<String> oldest = ENDED.keySet().iterator();
      oldest.next();
      oldest.remove();
    }
  }

  private static void list(StringBuilder sb, List<String> items) {
    sb.append('[');
    for (int i = 0; i < items.size(); i++) {
      if (i > 0) {
        sb.append(',');
      }
      EventEncoder.quote(sb, items.get(i));
    }
    sb.append(']');
  }

  private static void report(String json) {
    synchronized (REPORTS) {
      if (REPORTS.size() >= MAX_REPORTS) {
        if (dropped++ % 1000 == 0) {
          LOG.warn(Errors.PREFIX + "{} Connect artifact report(s) dropped: the driver runtime "
              + "has not taken them (is it running?)", dropped);
        }
        return;
      }
      REPORTS.add(json);
    }
  }

  /** The reports since the last drain, as a JSON array (the driver runtime takes them). */
  public static String drain() {
    List<String> taken;
    synchronized (REPORTS) {
      taken = new ArrayList<>(REPORTS);
      REPORTS.clear();
    }
    StringBuilder sb = new StringBuilder("[");
    for (int i = 0; i < taken.size(); i++) {
      sb.append(i > 0 ? "," : "").append(taken.get(i));
    }
    return sb.append(']').toString();
  }

  /**
   * The driver plugin's answer to {@code message}, or null when it is not ours: the current
   * generation, a newline, and the ended sessions after the generation the executor names.
   */
  public static Object answer(Object message) {
    if (!(message instanceof String) || !((String) message).startsWith(ASK)) {
      return null;
    }
    long since;
    try {
      since = Long.parseLong(((String) message).substring(ASK.length()));
    } catch (NumberFormatException e) {
      since = 0;
    }
    StringBuilder sb = new StringBuilder();
    synchronized (ENDED) {
      sb.append(generation).append('\n');
      boolean first = true;
      for (Map.Entry<String, Long> e : ENDED.entrySet()) {
        // A generation above ours is an earlier driver's: everything is new to that executor.
        if (e.getValue() > since || since > generation) {
          sb.append(first ? "" : ",").append(e.getKey());
          first = false;
        }
      }
    }
    return sb.toString();
  }

  // -- an executor ---------------------------------------------------------------------------

  /** Starts asking the driver, on an executor whose driver enabled it; else returns null. */
  public static ScheduledExecutorService forExecutor(PluginContext ctx,
      Map<String, String> conf) {
    if (!"true".equals(conf.get(ENABLED_KEY))) {
      return null;
    }
    ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "spark-steward-connect-artifacts");
      t.setDaemon(true);
      return t;
    });
    long[] seen = {0};
    timer.scheduleWithFixedDelay(() -> seen[0] = askOnce(ctx, seen[0]), ASK_EVERY_MILLIS,
        ASK_EVERY_MILLIS, TimeUnit.MILLISECONDS);
    return timer;
  }

  static long askOnce(PluginContext ctx, long seen) {
    try {
      if (heldSessions() == 0) {
        return seen;  // no Connect session's files here: nothing to ask the driver about
      }
      Object answer = ctx.ask(ASK + seen);
      if (!(answer instanceof String)) {
        return seen;
      }
      String[] parts = ((String) answer).split("\n", 2);
      long now = Long.parseLong(parts[0]);
      if (parts.length > 1 && !parts[1].isEmpty()) {
        List<String> uuids = new ArrayList<>();
        List<String> sessions = new ArrayList<>();
        for (String id : parts[1].split(",")) {
          if (id.startsWith(SESSION)) {
            sessions.add(id.substring(SESSION.length()));
          } else {
            uuids.add(id);
          }
        }
        int evicted = 0;
        for (String uuid : uuids) {
          evicted += evict(uuid) ? 1 : 0;
        }
        if (!uuids.isEmpty()) {
          LOG.info(Errors.PREFIX + "{} of {} ended Spark Connect session(s) evicted here: "
              + "Spark deletes their files once no task uses them", evicted, uuids.size());
        }
        if (!sessions.isEmpty()) {
          listEnded(sessions);
        }
      }
      return now;
    } catch (Exception e) {
      LOG.debug(Errors.PREFIX + "could not ask the driver which Connect sessions ended", e);
      return seen;
    }
  }

  /**
   * Adds {@code sessions} to {@link #ENDED_FILE} in this executor's first block-manager dir
   * (Spark's {@code SPARK_LOCAL_DIRS} for its Python workers), owner-only, the last {@link
   * #MAX_ENDED} kept, replaced atomically.
   */
  static void listEnded(List<String> sessions) throws IOException {
    File dir = SparkEnv.get().blockManager().diskBlockManager().localDirs()[0];
    Path target = dir.toPath().resolve(ENDED_FILE);
    LinkedHashSet<String> all = new LinkedHashSet<>();
    if (Files.isRegularFile(target, LinkOption.NOFOLLOW_LINKS)) {
      all.addAll(Files.readAllLines(target, StandardCharsets.UTF_8));
    }
    all.addAll(sessions);
    List<String> kept = new ArrayList<>(all);
    kept = kept.subList(Math.max(0, kept.size() - MAX_ENDED), kept.size());
    Path tmp = Files.createTempFile(dir.toPath(), ENDED_FILE, ".tmp", PrivateFiles.FILE_MODE);
    try {
      Files.write(tmp, kept, StandardCharsets.UTF_8);
      Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE,
          StandardCopyOption.REPLACE_EXISTING);
    } finally {
      Files.deleteIfExists(tmp);
    }
  }

  /** How many isolated sessions this executor holds (-1 where unknown: ask anyway). */
  static long heldSessions() {
    try {
      Object size = onIsolatedSessions("size");
      return size == null ? -1 : ((Number) size).longValue();
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      return -1;
    }
  }

  /**
   * Calls Spark's {@code Cache.<method>(args)} on this executor's isolated sessions (a Guava
   * cache of Spark's own, so by reflection); null where the executor has none.
   */
  private static Object onIsolatedSessions(String method, Object... args)
      throws ReflectiveOperationException {
    Object cache = SparkCompat.isolatedSessions(SparkEnv.get());
    if (cache == null) {
      return null;
    }
    Class<?>[] types = new Class<?>[args.length];
    java.util.Arrays.fill(types, Object.class);
    Method call = cache.getClass().getMethod(method, types);
    call.setAccessible(true);
    return call.invoke(cache, args);
  }

  /**
   * Evicts Spark session {@code uuid} from this executor's isolated-session cache: Spark deletes
   * its files once no running task holds it. Read by reflection: the cache is Spark's own.
   */
  static boolean evict(String uuid) {
    try {
      if (SparkCompat.isolatedSessions(SparkEnv.get()) == null) {
        return false;
      }
      onIsolatedSessions("invalidate", uuid);
      return true;
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      if (!warned) {
        warned = true;
        LOG.warn(Errors.PREFIX + "cannot evict ended Spark Connect sessions on this executor "
            + "(their files stay until Spark evicts them): {}", e.toString());
      }
      return false;
    }
  }

  private static volatile boolean warned;
}
