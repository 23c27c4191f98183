package io.sparksteward.shim.tables;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.util.EnumSet;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.Checksum;
import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.LocalDirs;
import io.sparksteward.shim.kernel.LocalManifest;
import io.sparksteward.shim.kernel.PrivateFiles;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A read-only view of the storage dir that keeps a verified host-local replica of every file an
 * executor opens: cached tables on remote storage are read from the remote store once per host.
 *
 * <p>URI {@code stewardrep://<app id>/<path under the storage dir>}; the Hadoop conf carries
 * {@code spark.steward.replica.<app id>.target} (the storage dir's Hadoop URL),
 * {@code .workdir} (the application's host-local working dir) and {@code .max-bytes}.
 *
 * <p>A replica is the working-dir entry {@code table-replicas/<path>} and follows the Python
 * layer's protocol ({@code spark_steward.local.working_dir}): announcement record, temp file
 * (synced), rename (directory synced), complete record (checksummed JSON, synced and renamed). Its
 * crc32c is checked at its first use in each JVM and again when the file changed. Writers on one
 * host are serialized by a lock on the entry's {@code .write} file. Anything that fails falls
 * back to reading the remote file: a replica is never needed for a correct read.
 */
public final class ReplicaFileSystem extends FileSystem {
  public static final String SCHEME = "stewardrep";
  public static final String CONF_PREFIX = "spark.steward.replica.";
  static final String FOLDER = "table-replicas";
  /** Named in a log line only: the bound arrives as {@code CONF_PREFIX + <app id> + .max-bytes}. */
  static final String LOCAL_MAX_BYTES_KEY = "spark.steward.local.max-bytes";
  private static final Logger LOG = LoggerFactory.getLogger(ReplicaFileSystem.class);
  /** Local file -> identity (file key, mtime, size) of the copy whose crc32c was checked. */
  private static final Map<String, String> VERIFIED = new ConcurrentHashMap<>();
  /** One monitor per entry: a JVM cannot hold two FileLocks on one file (task threads). */
  private static final Map<String, Object> WRITERS = new ConcurrentHashMap<>();
  /** Local dir -> why it must not hold replicas ("" when it may), checked once per JVM. */
  private static final Map<String, String> ROOTS = new ConcurrentHashMap<>();

  private URI uri;
  private String appId;
  private Path target;
  private FileSystem remote;
  private FileSystem local;
  private java.nio.file.Path workDir;
  private LocalManifest manifest;
  private long maxBytes;
  private Path workingDirectory;

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    super.initialize(name, conf);
    appId = name.getAuthority();
    String targetUrl = conf.get(CONF_PREFIX + appId + ".target");
    String work = conf.get(CONF_PREFIX + appId + ".workdir");
    if (targetUrl == null || work == null) {
      throw Errors.io(name + " cannot be read: " + CONF_PREFIX + appId
          + ".target and .workdir are not in the Hadoop conf");
    }
    target = new Path(targetUrl);
    remote = target.getFileSystem(conf);
    local = FileSystem.getLocal(conf).getRawFileSystem();
    workDir = java.nio.file.Paths.get(work);
    manifest = new LocalManifest(workDir, appId, "tables", FOLDER);
    maxBytes = conf.getLong(CONF_PREFIX + appId + ".max-bytes", 0L);
    uri = URI.create(SCHEME + "://" + appId + "/");
    workingDirectory = new Path(uri);
    setConf(conf);
  }

  @Override
  public String getScheme() {
    return SCHEME;
  }

  @Override
  public URI getUri() {
    return uri;
  }

  // -- paths ------------------------------------------------------------------------------------

  private String rel(Path path) {
    String p = makeQualified(path).toUri().getPath();
    while (p.startsWith("/")) {
      p = p.substring(1);
    }
    return p;
  }

  private Path toRemote(Path path) {
    String r = rel(path);
    return r.isEmpty() ? target : new Path(target, r);
  }

  private Path fromRemote(Path remotePath) {
    String base = target.toUri().getPath();
    String p = remotePath.toUri().getPath();
    String r = p.startsWith(base) ? p.substring(base.length()) : p;
    while (r.startsWith("/")) {
      r = r.substring(1);
    }
    return new Path(SCHEME, appId, "/" + r);
  }

  private FileStatus mapped(FileStatus s) {
    return new FileStatus(s.getLen(), s.isDirectory(), s.getReplication(), s.getBlockSize(),
        s.getModificationTime(), fromRemote(s.getPath()));
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    return mapped(remote.getFileStatus(toRemote(f)));
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    FileStatus[] found = remote.listStatus(toRemote(f));
    FileStatus[] out = new FileStatus[found.length];
    for (int i = 0; i < found.length; i++) {
      out[i] = mapped(found[i]);
    }
    return out;
  }

  @Override
  public void setWorkingDirectory(Path dir) {
    workingDirectory = dir;
  }

  @Override
  public Path getWorkingDirectory() {
    return workingDirectory;
  }

  // -- reads ------------------------------------------------------------------------------------

  @Override
  public FSDataInputStream open(Path f, int bufferSize) throws IOException {
    Path remotePath = toRemote(f);
    String entry = FOLDER + "/" + rel(f);
    if (!privateRoot()) {
      return remote.open(remotePath, bufferSize);
    }
    try {
      java.nio.file.Path replica = replica(entry, remotePath);
      if (replica != null) {
        return local.open(new Path(replica.toUri()), bufferSize);
      }
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "no host-local replica of {} ({}); reading it remotely",
          remotePath, e.toString());
    }
    return remote.open(remotePath, bufferSize);
  }

  /** Whether the local dir may hold replicas; a refused one is named once per JVM. */
  private boolean privateRoot() {
    java.nio.file.Path root = workDir.toAbsolutePath().getParent();
    if (root == null) {
      return true;
    }
    String problem = ROOTS.computeIfAbsent(root.toString(), k -> {
      String why = PrivateFiles.notPrivate(root);
      if (why != null) {
        LOG.warn(Errors.PREFIX + "{}: {}; cached tables are read remotely on this host, without "
            + "replicas", LocalDirs.LOCAL_DIR_KEY, why);
      }
      return why == null ? "" : why;
    });
    return problem.isEmpty();
  }

  /** The verified replica of {@code entry}, made now when missing; null when it does not fit. */
  private java.nio.file.Path replica(String entry, Path remotePath) throws IOException {
    java.nio.file.Path file = workDir.resolve(entry);
    JsonNode record = manifest.read(entry, LocalManifest.COMPLETE);
    if (record != null && usable(record, entry, file)) {
      stampUse(file);
      return file;
    }
    PrivateFiles.createDirectories(file.getParent());
    synchronized (WRITERS.computeIfAbsent(file.toString(), k -> new Object())) {
      return replicate(entry, remotePath, file);
    }
  }

  private java.nio.file.Path replicate(String entry, Path remotePath, java.nio.file.Path file)
      throws IOException {
    JsonNode record;
    try (FileChannel lockFile = FileChannel.open(sidecar(file, "write"),
            EnumSet.of(StandardOpenOption.CREATE, StandardOpenOption.WRITE), PrivateFiles.FILE_MODE);
         FileLock writer = lockFile.lock()) {
      assert writer.isValid();
      record = manifest.read(entry, LocalManifest.COMPLETE);
      if (record != null && usable(record, entry, file)) {
        stampUse(file);
        return file;
      }
      if (record != null) {  // failed verification: the record goes first, then the file
        Files.deleteIfExists(manifest.path(entry, LocalManifest.COMPLETE));
        LocalManifest.fsyncDir(manifest.path(entry, LocalManifest.COMPLETE).getParent());
        Files.deleteIfExists(file);
        LOG.warn(Errors.PREFIX + "host-local replica {} failed verification; fetched again",
            file);
      }
      removeTemps(file);
      long size = remote.getFileStatus(remotePath).getLen();
      if (maxBytes > 0 && manifest.usage() + size > maxBytes) {
        LOG.info(Errors.PREFIX + "no room for a {}-byte replica of {} under "
            + LOCAL_MAX_BYTES_KEY + "={}; reading it remotely", size, remotePath, maxBytes);
        return null;
      }
      manifest.write(entry, LocalManifest.WRITING, manifest.body(entry, size, 0L, "writing"));
      java.nio.file.Path tmp = file.resolveSibling(
          "." + file.getFileName() + ".tmp-" + UUID.randomUUID().toString().substring(0, 12));
      long crc;
      try {
        crc = copy(remotePath, tmp, size);
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE,
            StandardCopyOption.REPLACE_EXISTING);
        LocalManifest.fsyncDir(file.getParent());
        manifest.write(entry, LocalManifest.COMPLETE, manifest.body(entry, size, crc, "complete"));
      } finally {
        Files.deleteIfExists(tmp);
        Files.deleteIfExists(manifest.path(entry, LocalManifest.WRITING));
      }
      VERIFIED.put(file.toString(), identity(file));
      stampUse(file);
      return file;
    }
  }

  private long copy(Path remotePath, java.nio.file.Path tmp, long size) throws IOException {
    Checksum crc = Checksums.crc32c();
    long copied = 0;
    byte[] buf = new byte[1 << 20];
    try (InputStream in = remote.open(remotePath);
         FileChannel out = FileChannel.open(tmp,
             EnumSet.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE),
             PrivateFiles.FILE_MODE)) {
      int n;
      while ((n = in.read(buf)) > 0) {
        crc.update(buf, 0, n);
        ByteBuffer bb = ByteBuffer.wrap(buf, 0, n);
        while (bb.hasRemaining()) {
          out.write(bb);
        }
        copied += n;
      }
      out.force(true);
    }
    if (copied != size) {
      throw new IOException("copied " + copied + " bytes of " + remotePath + ", expected " + size);
    }
    return crc.getValue();
  }

  private boolean usable(JsonNode record, String entry, java.nio.file.Path file) {
    if (!"complete".equals(record.path("state").asText())
        || !entry.equals(record.path("file").asText())) {
      return false;
    }
    String identity;
    try {
      identity = identity(file);
    } catch (IOException e) {
      return false;
    }
    if (identity.equals(VERIFIED.get(file.toString()))) {
      return true;
    }
    long[] actual;
    try {
      actual = crcOf(file);
    } catch (IOException e) {
      return false;
    }
    if (actual[0] != record.path("crc32c").asLong(-1) || actual[1] != record.path("size").asLong(-1)) {
      return false;
    }
    VERIFIED.put(file.toString(), identity);
    return true;
  }

  private static long[] crcOf(java.nio.file.Path file) throws IOException {
    Checksum crc = Checksums.crc32c();
    long size = 0;
    byte[] buf = new byte[1 << 20];
    try (InputStream in = Files.newInputStream(file)) {
      for (int n = in.read(buf); n >= 0; n = in.read(buf)) {
        size += n;
        crc.update(buf, 0, n);
      }
    }
    return new long[] {crc.getValue(), size};
  }

  private static String identity(java.nio.file.Path file) throws IOException {
    BasicFileAttributes a = Files.readAttributes(file, BasicFileAttributes.class);
    return a.fileKey() + "/" + a.lastModifiedTime().toMillis() + "/" + a.size();
  }

  private static java.nio.file.Path sidecar(java.nio.file.Path file, String kind) {
    return file.resolveSibling("." + file.getFileName() + "." + kind);
  }

  private static void stampUse(java.nio.file.Path file) {
    java.nio.file.Path use = sidecar(file, "use");
    try {
      if (!Files.exists(use)) {
        Files.createFile(use, PrivateFiles.FILE_MODE);
      }
      Files.setLastModifiedTime(use, FileTime.fromMillis(System.currentTimeMillis()));
    } catch (IOException e) {
      // only the LRU order suffers
    }
  }

  private static void removeTemps(java.nio.file.Path file) throws IOException {
    String prefix = "." + file.getFileName() + ".tmp-";
    try (DirectoryStream<java.nio.file.Path> names =
             Files.newDirectoryStream(file.getParent(), prefix + "*")) {
      for (java.nio.file.Path temp : names) {
        Files.deleteIfExists(temp);
      }
    }
  }

  // -- a read-only view ---------------------------------------------------------------------------

  private IOException readOnly(Path f) {
    return Errors.io(f + " is a read-only replica view of the storage dir");
  }

  @Override
  public FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite,
      int bufferSize, short replication, long blockSize, Progressable progress)
      throws IOException {
    throw readOnly(f);
  }

  @Override
  public FSDataOutputStream append(Path f, int bufferSize, Progressable progress)
      throws IOException {
    throw readOnly(f);
  }

  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    throw readOnly(src);
  }

  @Override
  public boolean delete(Path f, boolean recursive) throws IOException {
    throw readOnly(f);
  }

  @Override
  public boolean mkdirs(Path f, FsPermission permission) throws IOException {
    throw readOnly(f);
  }
}
