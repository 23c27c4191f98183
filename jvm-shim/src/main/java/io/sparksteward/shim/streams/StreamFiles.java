package io.sparksteward.shim.streams;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.EventBridge;
import io.sparksteward.shim.kernel.EventEncoder;
import io.sparksteward.shim.kernel.Handover;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Spark-line-independent body of the streaming checkpoint file managers
 * ({@link StreamCheckpointFiles} for Spark 4.1+, {@link StreamCheckpointFilesV40} for 3.5 and
 * 4.0, which differ only in the package of the trait they implement). Spark creates one manager
 * per checkpoint directory, on the driver and on executors, through
 * {@code spark.sql.streaming.checkpointFileManagerClass}; every call goes to the manager Spark
 * would have used (its default, or the class the user had configured), and this class adds:
 *
 * <ul>
 *   <li><b>Deletes that are never lost.</b> A delete that throws, or after which the file is still
 *       there (Spark ignores a false from the file system), becomes a durable intent,
 *       {@code <location>/_steward/deletes/<hash>.json}, which the driver's cleanup retries until
 *       the file is gone; the call then returns normally, so Spark's own cleanup goes on with its
 *       next file instead of stopping at the first failure. When not even the intent can be
 *       written (the storage is down), the original failure is thrown as before and the intent
 *       is written with a later delete of this JVM.
 *   <li><b>Packs served.</b> Old immutable files the driver packed (FLIP-306, {@link
 *       StreamPacks}) are listed, found, opened and deleted as if they were loose, whether or not
 *       spark-steward is on for the session: a packed location is only readable this way.
 *   <li><b>The location, announced.</b> On the driver, the manager of a query's {@code offsets}
 *       log sends {@code stream_location [root, query id]} to Python, which registers the
 *       location with the query's start event.
 * </ul>
 *
 * <p>Off for a session ({@code spark.steward.enabled} or {@code spark.steward.streams.enabled}
 * false in its conf, which Spark copies into the Hadoop conf it hands the manager), it adds
 * nothing: Spark's behaviour.
 */
public final class StreamFiles {
  static final String CLASS_KEY = "spark.sql.streaming.checkpointFileManagerClass";
  /** The manager class the user had configured before spark-steward took the key over. */
  static final String DELEGATE_KEY = "spark.steward.streams.delegate-class";
  static final String STREAMS_ENABLED_KEY = "spark.steward.streams.enabled";
  /** The streams capability's handover field ({@code streams.config_keys.JVM_VALUES}). */
  static final String STREAMS_ENABLED_FIELD = "streams_enabled";
  static final String INTENTS = "_steward/deletes";
  static final String LOCATION_EVENT = "stream_location";
  private static final Logger LOG = LoggerFactory.getLogger(StreamFiles.class);
  private static final Pattern QUERY_ID = Pattern.compile("\"id\"\\s*:\\s*\"([0-9a-fA-F-]{36})\"");
  private static final int MAX_UNRECORDED = 10_000;
  /** Intents this JVM could not write yet, oldest first; retried with every later delete. */
  private static final Deque<Path[]> UNRECORDED = new ArrayDeque<>();
  private static final Set<String> ANNOUNCED = Collections.synchronizedSet(new HashSet<>());
  /** File-system calls this class made itself in this JVM (beyond those Spark asked for), for
   *  the benchmark's per-batch operation counts. */
  static final AtomicLong OWN_OPERATIONS = new AtomicLong();

  final boolean enabled;
  private final Path path;
  private final Configuration conf;
  private volatile Path root;
  private volatile boolean rootKnown;

  StreamFiles(Path path, Configuration conf) {
    this.path = path;
    this.conf = conf;
    this.enabled = switchedOn(conf);
    if (enabled && "offsets".equals(path.getName()) && EventBridge.current() != null) {
      announce(path.getParent());
    }
  }

  /**
   * Sets {@code spark.sql.streaming.checkpointFileManagerClass} in {@code sc}'s live conf to the
   * manager of this Spark line (sessions copy it into the Hadoop conf of every checkpoint
   * directory), keeping a class the user configured as the one it delegates to, and the
   * {@code handover} Python resolved at attach as the context's record the managers read.
   * Returns the class name.
   */
  public static synchronized String install(SparkContext sc, String handover) {
    String ours;
    try {
      Class.forName("org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager",
          false, StreamFiles.class.getClassLoader());
      ours = StreamCheckpointFiles.class.getName();
    } catch (ClassNotFoundException e) {
      ours = StreamCheckpointFilesV40.class.getName();
    }
    SparkConf conf = sc.conf();
    Handover.decode(handover);  // refused here, not in every manager, when malformed
    conf.set(Handover.KEY, handover);
    String current = conf.get(CLASS_KEY, "").trim();
    if (!current.isEmpty() && !ownManager(current) && !conf.contains(DELEGATE_KEY)) {
      conf.set(DELEGATE_KEY, current);
    }
    conf.set(CLASS_KEY, ours);
    return ours;
  }

  /**
   * The names spark-steward's managers have had, each the prefix of both lines' classes: today's
   * and the one before the shim had packages (whose classes stay as aliases).
   */
  private static final String[] OWN_MANAGERS = {
    "io.sparksteward.shim.streams.StreamCheckpointFiles",
    "io.sparksteward.shim.StreamCheckpointFiles",
  };

  /** Whether {@code className} is one of spark-steward's managers, of this line or another
   *  (a spark-defaults.conf copied between clusters), under its current name or its old one. */
  static boolean ownManager(String className) {
    // Names, not StreamCheckpointFiles.class: loading that class fails before Spark 4.1.
    for (String own : OWN_MANAGERS) {
      if (className.startsWith(own)) {
        return true;
      }
    }
    return false;
  }

  /**
   * On for the session whose Hadoop conf {@code conf} is: its own switches where it set them,
   * else what Python resolved for the context (Spark copies both into the conf it hands the
   * manager). Without a record (a manager configured where no spark-steward Python resolved
   * anything) it adds nothing; packs are still served.
   */
  private static boolean switchedOn(Configuration conf) {
    String raw = conf.get(Handover.KEY);
    Handover context = raw == null ? Handover.OFF : Handover.decode(raw);
    return Handover.sessionSwitch(Handover.ENABLED_KEY, conf.get(Handover.ENABLED_KEY),
            context.enabled)
        && Handover.sessionSwitch(STREAMS_ENABLED_KEY, conf.get(STREAMS_ENABLED_KEY),
            context.enabled && context.flag(STREAMS_ENABLED_FIELD));
  }

  /** {@code conf} for the manager Spark would have made: the user's class, or Spark's default. */
  static Configuration delegateConf(Configuration conf) {
    Configuration copy = new Configuration(conf);
    String theirs = conf.get(DELEGATE_KEY, "").trim();
    if (theirs.isEmpty() || ownManager(theirs)) {  // ours (any line's) would call itself
      copy.unset(CLASS_KEY);
    } else {
      copy.set(CLASS_KEY, theirs);
    }
    return copy;
  }

  // -- packs ------------------------------------------------------------------------------------

  private static final Pattern LOG_FILE = Pattern.compile("^\\d{1,18}$");
  private static final Pattern STATE_FILE = Pattern.compile("^\\d{1,18}\\.(delta|snapshot)$");
  private static final Pattern DIGITS = Pattern.compile("^\\d{1,9}$");
  private static final Pattern STORE_NAME = Pattern.compile("^[A-Za-z0-9_.-]{1,200}$");
  private static final Pattern BAD_CHARACTERS = Pattern.compile("[\\\\\\x00-\\x1f\\x7f]");

  /** Whether a pack may hold {@code rel}; the same rule as {@code streams/lifecycle/packs.py}. */
  static boolean packable(String rel) {
    if (rel.isEmpty() || rel.startsWith("/") || BAD_CHARACTERS.matcher(rel).find()) {
      return false;
    }
    String[] parts = rel.split("/", -1);
    if (parts.length == 2 && ("offsets".equals(parts[0]) || "commits".equals(parts[0]))) {
      return LOG_FILE.matcher(parts[1]).matches();
    }
    return "state".equals(parts[0]) && (parts.length == 4 || parts.length == 5)
        && DIGITS.matcher(parts[1]).matches() && DIGITS.matcher(parts[2]).matches()
        && (parts.length == 4 || STORE_NAME.matcher(parts[3]).matches()
            && !".".equals(parts[3]) && !"..".equals(parts[3]))
        && STATE_FILE.matcher(parts[parts.length - 1]).matches();
  }

  private StreamPacks packs() {
    Path location = root();
    return location == null ? null : StreamPacks.of(location, conf);
  }

  /** Spark's listing of {@code dir} with the live packed files in it. */
  FileStatus[] list(Path dir, PathFilter filter, Supplier<FileStatus[]> loose) {
    FileStatus[] found = null;
    Exception missing = null;
    try {
      found = loose.get();  // loose first, packs second: see StreamPacks
    } catch (Exception e) {  // Scala throws IOException undeclared
      if (!(e instanceof FileNotFoundException)) {
        throw Errors.sneaky(e);
      }
      missing = e;
    }
    StreamPacks packs = packs();
    String folder = packs == null ? null : relative(packs.root(), dir);
    List<StreamPacks.Member> members;
    try {
      members = folder == null ? Collections.emptyList() : packs.in(folder);
    } catch (IOException e) {
      throw Errors.sneaky(e);
    }
    if (members.isEmpty()) {
      if (missing != null) {
        throw Errors.sneaky(missing);
      }
      return found;
    }
    List<FileStatus> out = new ArrayList<>();
    Set<String> names = new HashSet<>();
    if (found != null) {
      out.addAll(Arrays.asList(found));
      for (FileStatus s : found) {
        names.add(s.getPath().getName());
      }
    }
    for (StreamPacks.Member m : members) {
      String name = m.rel.substring(m.rel.lastIndexOf('/') + 1);
      Path file = new Path(dir, name);
      if (!names.contains(name) && (filter == null || filter.accept(file))) {
        out.add(new FileStatus(m.length, false, 1, 4096, m.mtime, file));
      }
    }
    return out.toArray(new FileStatus[0]);
  }

  /** Spark's exists, true also for a live packed file. */
  boolean exists(Path file, BooleanSupplier loose) {
    if (loose.getAsBoolean()) {
      return true;
    }
    try {
      return packed(file, false) != null;
    } catch (IOException e) {
      throw Errors.sneaky(e);
    }
  }

  /** Spark's open; a file only in a pack is served from it, checked against its crc32c. */
  FSDataInputStream open(Path file, Supplier<FSDataInputStream> loose) {
    try {
      return loose.get();
    } catch (Exception e) {
      if (!(e instanceof FileNotFoundException)) {
        throw Errors.sneaky(e);
      }
      try {
        for (int attempt = 0; attempt < 2; attempt++) {
          StreamPacks.Member m = packed(file, attempt > 0);
          if (m != null) {
            try {
              return StreamPacks.stream(packs().read(m));
            } catch (FileNotFoundException gone) {
              // its pack was deleted since the view: every member was dead then; read again
            }
          }
        }
      } catch (IOException io) {
        throw Errors.sneaky(io);
      }
      throw Errors.sneaky(e);
    }
  }

  /** Refuses to create over a live packed file unless Spark asked to overwrite. */
  void refuseExisting(Path file, boolean overwrite) {
    if (overwrite) {
      return;
    }
    try {
      if (packed(file, false) != null) {
        throw Errors.sneaky(new FileAlreadyExistsException(file + " already exists (in a spark-steward "
            + "pack of the checkpoint location)"));
      }
    } catch (IOException e) {
      throw Errors.sneaky(e);
    }
  }

  private StreamPacks.Member packed(Path file, boolean fresh) throws IOException {
    StreamPacks packs = packs();
    String rel = packs == null ? null : relative(packs.root(), file);
    return rel == null || !packable(rel) ? null : packs.live(rel, fresh);
  }

  /** Runs Spark's delete; turns a failed or ineffective one into a durable intent. A packed
   *  copy of the file dies with it. */
  void delete(Path target, Runnable delete) {
    StreamPacks packs = packs();
    String packedRel = packs == null ? null : relative(packs.root(), target);
    if (packedRel != null && packable(packedRel)) {
      try {
        packs.delete(packedRel);
      } catch (IOException e) {
        throw Errors.sneaky(e);
      }
    }
    if (!enabled) {
      delete.run();
      return;
    }
    Exception failure = null;
    try {
      delete.run();
    } catch (Exception e) {  // Scala throws IOException undeclared
      failure = e;
    }
    if (failure == null && !stillThere(target)) {
      flushUnrecorded();
      return;
    }
    Path location = root();
    if (location == null || relative(location, target) == null) {
      if (failure != null) {
        throw Errors.sneaky(failure);
      }
      return;  // outside any location we own (a file sink's log): Spark's behaviour
    }
    if (!recordIntent(location, target)) {
      synchronized (UNRECORDED) {
        if (UNRECORDED.size() < MAX_UNRECORDED) {
          UNRECORDED.addLast(new Path[] {location, target});
        }
      }
      if (failure != null) {
        throw Errors.sneaky(failure);
      }
      return;
    }
    LOG.warn(Errors.PREFIX + "delete of {} {}; recorded for retry until it is gone", target,
        failure == null ? "left the file in place" : "failed (" + failure + ")");
  }

  private boolean stillThere(Path target) {
    try {
      OWN_OPERATIONS.incrementAndGet();
      return target.getFileSystem(conf).exists(target);
    } catch (IOException | RuntimeException e) {
      return true;  // unknown: an intent for a file already gone costs one idempotent delete
    }
  }

  private void flushUnrecorded() {
    while (true) {
      Path[] next;
      synchronized (UNRECORDED) {
        next = UNRECORDED.peekFirst();
      }
      if (next == null || !recordIntent(next[0], next[1])) {
        return;
      }
      synchronized (UNRECORDED) {
        UNRECORDED.remove(next);
      }
    }
  }

  /** Writes the intent (temp file, then rename); false when the storage refused. */
  private boolean recordIntent(Path location, Path target) {
    String rel = relative(location, target);
    if (rel == null) {
      return true;  // nothing we could ever retry: drop it
    }
    Path dir = new Path(location, INTENTS);
    Path intent = new Path(dir, Checksums.sha256Hex(rel).substring(0, 32) + ".json");
    Path tmp = new Path(dir, "." + intent.getName() + "." + UUID.randomUUID() + ".tmp");
    StringBuilder body = new StringBuilder("{\"path\":");
    EventEncoder.quote(body, rel);
    body.append(",\"time\":").append(System.currentTimeMillis()).append('}');
    try {
      FileSystem fs = location.getFileSystem(conf);
      if (fs instanceof LocalFileSystem) {  // no .crc sidecars beside our own small files
        fs = ((LocalFileSystem) fs).getRawFileSystem();
      }
      OWN_OPERATIONS.addAndGet(4);  // mkdirs, create, rename, exists
      fs.mkdirs(dir);
      try (FSDataOutputStream out = fs.create(tmp, true)) {
        out.write(body.toString().getBytes(StandardCharsets.UTF_8));
      }
      if (!fs.rename(tmp, intent)) {  // it exists already: the same path failed before
        fs.delete(tmp, false);
      }
      return fs.exists(intent);
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "could not record the failed delete of {} ({})", target,
          e.toString());
      return false;
    }
  }

  /** {@code target} relative to {@code location}, or null when it is not inside it. */
  static String relative(Path location, Path target) {
    String base = location.toUri().getPath();
    String full = target.toUri().getPath();
    if (base.endsWith("/")) {
      base = base.substring(0, base.length() - 1);
    }
    if (!full.startsWith(base + "/") || full.contains("/../") || full.endsWith("/..")) {
      return null;
    }
    return full.substring(base.length() + 1);
  }

  /**
   * The query's checkpoint location this manager's directory belongs to: the parent of
   * {@code offsets}/{@code commits}, of the nearest {@code state} or {@code sources} ancestor,
   * or the directory itself when it holds {@code offsets} (the query's own manager). Null for
   * anything else, such as a file sink's {@code _spark_metadata}.
   */
  Path root() {
    if (!rootKnown) {
      root = findRoot();
      rootKnown = true;
    }
    return root;
  }

  private Path findRoot() {
    String name = path.getName();
    if (("offsets".equals(name) || "commits".equals(name)) && path.getParent() != null) {
      return path.getParent();
    }
    for (Path p = path; p != null && p.getParent() != null; p = p.getParent()) {
      if ("state".equals(p.getName()) || "sources".equals(p.getName())) {
        return p.getParent();
      }
    }
    try {
      FileSystem fs = path.getFileSystem(conf);
      OWN_OPERATIONS.addAndGet(2);
      return fs.exists(new Path(path, "offsets")) || fs.exists(new Path(path, "metadata"))
          ? path : null;
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  /** Sends the location (once per JVM) with the query id from its {@code metadata} file. */
  private void announce(Path location) {
    try {
      String qualified = location.getFileSystem(conf).makeQualified(location).toString();
      EventBridge bridge = EventBridge.current();
      if (bridge == null || !ANNOUNCED.add(qualified)) {
        return;
      }
      bridge.offerCurrent(EventEncoder.event(LOCATION_EVENT, System.currentTimeMillis())
          .str(qualified).str(queryId(location)));
    } catch (IOException | RuntimeException | LinkageError e) {
      LOG.warn(Errors.PREFIX + "could not register the streaming checkpoint location {} ({})",
          location, e.toString());
    }
  }

  private String queryId(Path location) {
    Path metadata = new Path(location, "metadata");
    byte[] buffer = new byte[4096];
    OWN_OPERATIONS.incrementAndGet();
    try (InputStream in = metadata.getFileSystem(conf).open(metadata)) {
      int n = 0;
      int got;
      while (n < buffer.length && (got = in.read(buffer, n, buffer.length - n)) > 0) {
        n += got;
      }
      Matcher m = QUERY_ID.matcher(new String(buffer, 0, n, StandardCharsets.UTF_8));
      return m.find() ? m.group(1) : null;
    } catch (IOException | RuntimeException e) {
      return null;  // not written yet: Python reads it at the query's start
    }
  }
}
