package io.sparksteward.shim.streams;

import java.io.ByteArrayInputStream;
import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import java.util.zip.Checksum;

import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PositionedReadable;
import org.apache.hadoop.fs.Seekable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The packs of one streaming checkpoint location as this JVM sees them (FLIP-306): which
 * logical files they hold, their bytes, and the deletes of packed files Spark asks for.
 * {@code spark_steward/streams/lifecycle/packs.py} states the rules and {@code streams/packs.py}
 * the format; this class applies the same ones.
 *
 * <p>A reader lists loose files first and packs second, and caches its view of the packs for at
 * most {@link #TTL_NANOS}; the packer removes a loose file only {@code streams.pack.grace}
 * (longer) after its pack became visible, so a listing never misses a committed file. A delete
 * of a packed file is applied to this JVM's view at once and written as a tombstone within
 * half a second (one file per flush, not per delete); a tombstone lost with a killed JVM leaves
 * the file listed, and Spark's retention, which deletes every version below its watermark on
 * each cleanup, deletes it again.
 */
final class StreamPacks {
  static final String FOLDER = "_steward/packs";
  /** Under {@link #FOLDER}: the tombstone files, one per flush. */
  static final String TOMBSTONES = "dead";
  /** Under {@link #FOLDER}: the catalog Python's packer writes. */
  static final String CATALOG = "catalog.txt";
  static final long TTL_NANOS = 2_000_000_000L;
  private static final Logger LOG = LoggerFactory.getLogger(StreamPacks.class);
  private static final Pattern PACK_NAME = Pattern.compile("^\\d{16}-[0-9a-f]{32}\\.pack$");
  private static final byte[] MAGIC = "STWPACK1".getBytes(StandardCharsets.US_ASCII);
  private static final int TRAILER = 24;
  private static final int MAX_INDEX = 64 << 20;
  private static final int MAX_TOMBSTONES = 16 << 20;
  private static final int MAX_CATALOG = 256 << 20;
  /** A pack holds at most 256 MiB of members (the packer's bound), so no member is larger. */
  private static final int MAX_MEMBER = 256 << 20;
  private static final Pattern NUMBER = Pattern.compile("^[0-9]{1,19}$");
  private static final Pattern CRC = Pattern.compile("^[0-9a-f]{8}$");
  private static final Map<String, StreamPacks> BY_ROOT = new ConcurrentHashMap<>();
  private static final String JVM_ID = UUID.randomUUID().toString().replace("-", "");
  private static final AtomicLong FLUSHES = new AtomicLong();
  private static volatile Thread flusher;

  /** One member: its pack, path relative to the location, place and checksum, and mtime. */
  static final class Member {
    final String pack;
    final String rel;
    final long offset;
    final int length;
    final long crc;
    final long mtime;

    Member(String pack, String rel, long offset, int length, long crc, long mtime) {
      this.pack = pack;
      this.rel = rel;
      this.offset = offset;
      this.length = length;
      this.crc = crc;
      this.mtime = mtime;
    }
  }

  /** One reading of the packs: the live member of every packed path, by folder. */
  private static final class View {
    final long fetched;
    final Map<String, Member> live;
    final Map<String, List<String>> holders;
    final Map<String, List<Member>> byFolder;

    View(long fetched, Map<String, Member> live, Map<String, List<String>> holders) {
      this.fetched = fetched;
      this.live = live;
      this.holders = holders;
      this.byFolder = new HashMap<>();
      for (Member m : live.values()) {
        int slash = m.rel.lastIndexOf('/');
        byFolder.computeIfAbsent(slash < 0 ? "" : m.rel.substring(0, slash), k -> new ArrayList<>())
            .add(m);
      }
    }
  }

  private final Path root;
  private final Path folder;
  private final FileSystem fs;
  private final Map<String, List<Member>> indexes = new ConcurrentHashMap<>();
  /** Deletes of packed files this JVM made: "pack\trel" (applied before any tombstone). */
  private final Set<String> killed = ConcurrentHashMap.newKeySet();
  private final List<String> unflushed = new ArrayList<>();
  private volatile View view;

  private StreamPacks(Path root, FileSystem fs) {
    this.root = root;
    this.folder = new Path(root, FOLDER);
    this.fs = fs;
  }

  /** This JVM's packs of the location {@code root}; null when its file system cannot be had. */
  static StreamPacks of(Path root, Configuration conf) {
    try {
      FileSystem fs = root.getFileSystem(conf);
      String key = fs.makeQualified(root).toString();
      if (fs instanceof LocalFileSystem) {  // our files carry their own checksums
        fs = ((LocalFileSystem) fs).getRawFileSystem();
      }
      final FileSystem use = fs;
      return BY_ROOT.computeIfAbsent(key, k -> new StreamPacks(root, use));
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "cannot read the packs of {} ({})", root, e.toString());
      return null;
    }
  }

  /** The live member named {@code rel}, or null; {@code fresh} rereads the packs first. */
  Member live(String rel, boolean fresh) throws IOException {
    Member m = view(fresh).live.get(rel);
    return m == null || killed.contains(m.pack + "\t" + m.rel) ? null : m;
  }

  /** The live members in folder {@code folderRel} (relative to the location). */
  List<Member> in(String folderRel) throws IOException {
    List<Member> found = view(false).byFolder.get(folderRel);
    if (found == null) {
      return Collections.emptyList();
    }
    List<Member> out = new ArrayList<>(found.size());
    for (Member m : found) {
      if (!killed.contains(m.pack + "\t" + m.rel)) {
        out.add(m);
      }
    }
    return out;
  }

  /** The member's bytes, checked against its crc32c. */
  byte[] read(Member m) throws IOException {
    byte[] data = new byte[m.length];
    StreamFiles.OWN_OPERATIONS.incrementAndGet();
    Path file = new Path(folder, m.pack);
    try (FSDataInputStream in = fs.open(file)) {
      in.readFully(m.offset, data);
    } catch (FileNotFoundException e) {
      throw e;
    } catch (IOException e) {
      throw Errors.io("could not read " + m.rel + " from the pack " + file
          + " (" + e + ")", e);
    }
    if (Checksums.crc32c(data, 0, data.length) != m.crc) {
      throw Errors.io(m.rel + " in the pack " + new Path(folder, m.pack)
          + " fails its checksum");
    }
    return data;
  }

  /** A stream over a member's bytes, for Spark's open. */
  static FSDataInputStream stream(byte[] data) {
    return new FSDataInputStream(new MemberStream(data));
  }

  /** Spark deleted {@code rel}: every pack holding it live loses it. */
  void delete(String rel) throws IOException {
    View current = view(false);
    List<String> packs = current.holders.get(rel);
    if (packs == null) {
      return;
    }
    synchronized (unflushed) {
      for (String pack : packs) {
        if (killed.add(pack + "\t" + rel)) {
          unflushed.add(pack + "\t" + rel + "\n");
        }
      }
    }
    startFlusher();
  }

  private synchronized View view(boolean fresh) throws IOException {
    View current = view;
    long now = System.nanoTime();
    if (!fresh && current != null && now - current.fetched < TTL_NANOS) {
      return current;
    }
    view = read(now);
    return view;
  }

  /**
   * Reads the packs in the order that keeps every live file in the view: tombstones, then the
   * catalog, then the pack listing. A tombstone folded meanwhile is then in the catalog, and a
   * pack whose members the catalog declares copied elsewhere (a compaction) has its copy,
   * written before the catalog, in the listing.
   */
  private View read(long now) throws IOException {
    if (packNames() == null) {  // no pack: one listing, the common case
      return new View(now, Collections.emptyMap(), Collections.emptyMap());
    }
    // Deletes (this JVM's and the tombstones) follow a compaction's copies; the catalog's own
    // dead marks do not (a compacted pack's members are all marked dead there, copied or not).
    Set<String> marks = new HashSet<>(killed);
    Path dir = new Path(folder, TOMBSTONES);
    StreamFiles.OWN_OPERATIONS.incrementAndGet();
    FileStatus[] tombstones;
    try {
      tombstones = fs.listStatus(dir);
    } catch (FileNotFoundException e) {
      tombstones = new FileStatus[0];
    }
    for (FileStatus s : tombstones) {
      String name = s.getPath().getName();
      if (!regular(s) || name.startsWith(".") || !name.endsWith(".txt")
          || s.getLen() > MAX_TOMBSTONES) {
        continue;
      }
      String text = readText(s.getPath(), MAX_TOMBSTONES, false);
      if (text != null) {
        for (String line : text.split("\n")) {
          if (line.indexOf('\t') > 0) {
            marks.add(line);
          }
        }
      }
    }
    Path catalogFile = new Path(folder, CATALOG);
    if (!regularOrAbsent(catalogFile)) {  // a FIFO would hang every view; it cannot be skipped
      throw Errors.io("the pack catalog " + catalogFile + " is not a "
          + "regular file; the packed files cannot be served");
    }
    String catalog = readText(catalogFile, MAX_CATALOG, true);
    Set<String> dead = new HashSet<>();
    Map<String, List<String>> moved = new HashMap<>();
    if (catalog != null) {
      for (String line : catalog.split("\n")) {
        if (line.startsWith("dead\t")) {
          dead.add(line.substring(5));
        } else if (line.startsWith("moved\t")) {
          String[] f = line.split("\t");
          if (f.length == 3) {
            moved.computeIfAbsent(f[1], k -> new ArrayList<>(1)).add(f[2]);
          }
        }
      }
    }
    forward(marks, moved);
    dead.addAll(marks);
    List<String> packs = packNames();
    if (packs == null) {
      return new View(now, Collections.emptyMap(), Collections.emptyMap());
    }
    Map<String, Member> live = new HashMap<>();
    Map<String, List<String>> holders = new HashMap<>();
    Set<String> present = new HashSet<>(packs);
    indexes.keySet().retainAll(present);
    killed.removeIf(k -> !present.contains(k.substring(0, k.indexOf('\t'))));
    for (String pack : packs) {
      List<Member> members;
      try {
        members = index(pack);
      } catch (FileNotFoundException e) {
        continue;  // deleted since the listing: every member was dead
      }
      for (Member m : members) {
        if (!dead.contains(pack + "\t" + m.rel)) {
          live.put(m.rel, m);  // newest pack last: it wins
          holders.computeIfAbsent(m.rel, k -> new ArrayList<>(1)).add(pack);
        }
      }
    }
    return new View(now, live, holders);
  }

  /** The pack files in the folder, oldest first; null when there is none. */
  private List<String> packNames() throws IOException {
    StreamFiles.OWN_OPERATIONS.incrementAndGet();
    FileStatus[] entries;
    try {
      entries = fs.listStatus(folder);
    } catch (FileNotFoundException e) {
      return null;
    }
    List<String> packs = new ArrayList<>();
    for (FileStatus s : entries) {
      if (regular(s) && PACK_NAME.matcher(s.getPath().getName()).matches()) {
        packs.add(s.getPath().getName());
      }
    }
    Collections.sort(packs);  // the sequence leads the name: newest last
    return packs.isEmpty() ? null : packs;
  }

  /**
   * The file's text; null when it is gone, or when it grows past {@code limit} and not
   * {@code required} (a tombstone that is not ours is skipped; the catalog cannot be).
   */
  private String readText(Path file, int limit, boolean required) throws IOException {
    StreamFiles.OWN_OPERATIONS.incrementAndGet();
    try (FSDataInputStream in = fs.open(file)) {
      java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
      byte[] buffer = new byte[65536];
      int got;
      while ((got = in.read(buffer)) > 0) {
        out.write(buffer, 0, got);
        if (out.size() > limit) {
          if (!required) {
            LOG.warn(Errors.PREFIX + "skipping {}: larger than any tombstone it writes", file);
            return null;
          }
          throw Errors.io(file + " is larger than any file it writes");
        }
      }
      return new String(out.toByteArray(), StandardCharsets.UTF_8);
    } catch (FileNotFoundException e) {
      return null;  // folded and removed meanwhile: the catalog has it
    }
  }

  /** A pack's index, read once (packs never change); an unreadable pack is an error naming it. */
  private List<Member> index(String pack) throws IOException {
    List<Member> cached = indexes.get(pack);
    if (cached != null) {
      return cached;
    }
    Path file = new Path(folder, pack);
    List<Member> members = new ArrayList<>();
    StreamFiles.OWN_OPERATIONS.addAndGet(2);
    try (FSDataInputStream in = fs.open(file)) {
      long size = fs.getFileStatus(file).getLen();
      if (size < TRAILER) {
        throw corrupt(file, size + " bytes, shorter than its trailer");
      }
      byte[] tail = new byte[TRAILER];
      in.readFully(size - TRAILER, tail);
      ByteBuffer trailer = ByteBuffer.wrap(tail);
      long indexAt = trailer.getLong();
      long indexLength = trailer.getInt() & 0xffffffffL;
      long indexCrc = trailer.getInt() & 0xffffffffL;
      byte[] magic = new byte[8];
      trailer.get(magic);
      if (!java.util.Arrays.equals(magic, MAGIC)) {
        throw corrupt(file, "no pack trailer");
      }
      if (indexLength > MAX_INDEX || indexAt < 0 || indexAt + indexLength + TRAILER != size) {
        throw corrupt(file, "its index does not fit its size");
      }
      byte[] raw = new byte[(int) indexLength];
      in.readFully(indexAt, raw);
      if (Checksums.crc32c(raw, 0, raw.length) != indexCrc) {
        throw corrupt(file, "index checksum mismatch");
      }
      int line = 0;
      for (String text : new String(raw, StandardCharsets.UTF_8).split("\n")) {
        line++;
        if (text.isEmpty()) {
          continue;
        }
        String[] f = text.split("\t", 5);
        try {
          if (f.length != 5 || !NUMBER.matcher(f[0]).matches() || !NUMBER.matcher(f[1]).matches()
              || !CRC.matcher(f[2]).matches() || !NUMBER.matcher(f[3]).matches()) {
            throw new IllegalArgumentException("bad field");
          }
          Member m = new Member(pack, f[4], Long.parseLong(f[0]), Integer.parseInt(f[1]),
              Long.parseLong(f[2], 16), Long.parseLong(f[3]));
          // No overflow: indexAt >= 0 and length >= 0, so indexAt - length cannot wrap.
          if (m.offset < 0 || m.length < 0 || m.length > MAX_MEMBER
              || m.offset > indexAt - m.length || !StreamFiles.packable(m.rel)) {
            throw new IllegalArgumentException("not a member of this pack");
          }
          members.add(m);
        } catch (RuntimeException e) {  // short line, bad number, bad path
          throw corrupt(file, "index line " + line + " is malformed (" + e.getMessage() + ")");
        }
      }
    } catch (EOFException e) {
      throw corrupt(file, "truncated");
    }
    indexes.put(pack, members);
    return members;
  }

  /**
   * A regular file: on a local file system neither a symlink (it could lead anywhere) nor a
   * FIFO or device (opening one would hang or never end), which Hadoop reports as files.
   */
  private boolean regular(FileStatus s) {
    if (!s.isFile()) {
      return false;
    }
    if (!(fs instanceof org.apache.hadoop.fs.RawLocalFileSystem)) {
      return true;
    }
    try {
      java.io.File local = ((org.apache.hadoop.fs.RawLocalFileSystem) fs).pathToFile(s.getPath());
      return java.nio.file.Files.isRegularFile(local.toPath(),
          java.nio.file.LinkOption.NOFOLLOW_LINKS);
    } catch (RuntimeException e) {
      return false;
    }
  }

  /** {@link #regular} for a path that may not exist (absent is fine: no catalog yet). */
  private boolean regularOrAbsent(Path file) throws IOException {
    if (!(fs instanceof org.apache.hadoop.fs.RawLocalFileSystem)) {
      return true;
    }
    java.io.File local = ((org.apache.hadoop.fs.RawLocalFileSystem) fs).pathToFile(file);
    java.nio.file.Path nio = local.toPath();
    return !java.nio.file.Files.exists(nio, java.nio.file.LinkOption.NOFOLLOW_LINKS)
        || java.nio.file.Files.isRegularFile(nio, java.nio.file.LinkOption.NOFOLLOW_LINKS);
  }

  /** Delete marks also apply to the copies a compaction made of their pack (transitively). */
  static void forward(Set<String> dead, Map<String, List<String>> moved) {
    if (moved.isEmpty()) {
      return;
    }
    List<String> todo = new ArrayList<>(dead);
    while (!todo.isEmpty()) {
      String mark = todo.remove(todo.size() - 1);
      int tab = mark.indexOf('\t');
      List<String> copies = tab < 0 ? null : moved.get(mark.substring(0, tab));
      if (copies == null) {
        continue;
      }
      for (String copy : copies) {
        String next = copy + "\t" + mark.substring(tab + 1);
        if (dead.add(next)) {
          todo.add(next);
        }
      }
    }
  }

  private static IOException corrupt(Path file, String why) {
    return Errors.io("the pack " + file + " is unreadable (" + why
        + "); the files it holds cannot be served");
  }

  // -- tombstones -------------------------------------------------------------------------------

  private static synchronized void startFlusher() {
    if (flusher != null) {
      return;
    }
    Thread thread = new Thread(() -> {
      while (true) {
        try {
          Thread.sleep(500);
        } catch (InterruptedException e) {
          return;
        }
        flushAll();
      }
    }, "steward-stream-tombstones");
    thread.setDaemon(true);
    thread.start();
    // Through Hadoop's hook manager, above FileSystem's own hook (priority 10), which closes
    // the cached file systems, and below Spark's (40): the deletes Spark makes while it stops
    // are written, with a file system still open.
    org.apache.hadoop.util.ShutdownHookManager.get().addShutdownHook(StreamPacks::flushAll,
        FileSystem.SHUTDOWN_HOOK_PRIORITY + 10);
    flusher = thread;
  }

  /** Writes every JVM's pending tombstones; called by the flusher and at JVM exit. */
  static void flushAll() {
    for (StreamPacks packs : BY_ROOT.values()) {
      packs.flush();
    }
  }

  private void flush() {
    String body;
    synchronized (unflushed) {
      if (unflushed.isEmpty()) {
        return;
      }
      body = String.join("", unflushed);
      unflushed.clear();
    }
    Path dir = new Path(folder, TOMBSTONES);
    String name = JVM_ID + "-" + FLUSHES.incrementAndGet() + ".txt";
    Path tmp = new Path(dir, "." + name + ".tmp");
    try {
      StreamFiles.OWN_OPERATIONS.addAndGet(3);
      fs.mkdirs(dir);
      try (FSDataOutputStream out = fs.create(tmp, true)) {
        out.write(body.getBytes(StandardCharsets.UTF_8));
      }
      if (!fs.rename(tmp, new Path(dir, name))) {
        throw new IOException("rename of " + tmp + " refused");
      }
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "could not record deletes of packed files in {} ({}); retried",
          dir, e.toString());
      synchronized (unflushed) {
        if (unflushed.size() < 100_000) {
          unflushed.add(0, body);
        }
      }
    }
  }

  /** Test access: this JVM's pending tombstones, written now. */
  static int flushNow() {
    flushAll();
    return BY_ROOT.size();
  }

  Path root() {
    return root;
  }

  /** A member's bytes as the seekable stream Hadoop's FSDataInputStream wants. */
  private static final class MemberStream extends ByteArrayInputStream
      implements Seekable, PositionedReadable {
    MemberStream(byte[] data) {
      super(data);
    }

    @Override
    public synchronized void seek(long position) throws IOException {
      if (position < 0 || position > count) {
        throw new EOFException("seek to " + position + " outside 0.." + count);
      }
      pos = (int) position;
    }

    @Override
    public synchronized long getPos() {
      return pos;
    }

    @Override
    public boolean seekToNewSource(long target) {
      return false;
    }

    @Override
    public int read(long position, byte[] buffer, int offset, int length) {
      if (position >= count) {
        return -1;
      }
      int n = (int) Math.min(length, count - position);
      System.arraycopy(buf, (int) position, buffer, offset, n);
      return n;
    }

    @Override
    public void readFully(long position, byte[] buffer, int offset, int length)
        throws IOException {
      if (position < 0 || position + length > count) {
        throw new EOFException("read of " + length + " bytes at " + position + " past " + count);
      }
      System.arraycopy(buf, (int) position, buffer, offset, length);
    }

    @Override
    public void readFully(long position, byte[] buffer) throws IOException {
      readFully(position, buffer, 0, buffer.length);
    }
  }
}
