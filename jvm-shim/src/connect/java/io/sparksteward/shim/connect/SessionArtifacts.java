package io.sparksteward.shim.connect;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

import io.sparksteward.shim.blob.ConnectArtifacts;
import io.sparksteward.shim.kernel.Errors;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.SparkFiles;
import org.apache.spark.rpc.RpcEnvFileServer;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Which Spark sessions and folders hold what a Connect session added with {@code
 * spark.addArtifacts} (told to {@link ConnectArtifacts}, which the driver runtime drains).
 *
 * <p>A session's artifacts live under its Spark session id: in the artifact store, in the
 * context's added files (and so the file server), in the driver's and the executors' copies.
 * {@code df.cache()} clones the session (the cache manager plans with some confs off), and the
 * clone adds every artifact again under its own id, which nothing closes: those ids are the
 * session's too, taken where its persists are served ({@link SessionCaches}). A session whose
 * Spark session shares the context's files (artifact isolation off) owns none of them: only ids
 * the context registered the session's files under are taken.
 */
final class SessionArtifacts {
  private static final Logger LOG = LoggerFactory.getLogger(SessionArtifacts.class);
  /** Files reported per session, at most (the rest stay Spark's). */
  static final int MAX_FILES_PER_SESSION = 10_000;
  private static final Map<String, Owned> OWNED = new ConcurrentHashMap<>();

  /** What one Connect session's artifacts are held under. */
  private static final class Owned {
    final Set<String> uuids = ConcurrentHashMap.newKeySet();
    final Set<String> reported = ConcurrentHashMap.newKeySet();
    volatile Path root;
  }

  private SessionArtifacts() {}

  /** After an {@code AddArtifacts} call of Connect session {@code sessionId} was served. */
  static void added(String userId, String sessionId) {
    SessionHolder holder = SessionCaches.holder(userId, sessionId);
    if (holder == null) {
      return;
    }
    SparkSession session = holder.session();
    String uuid = session.sessionUUID();
    Path dir = session.artifactManager().artifactPath();
    Owned owned = OWNED.computeIfAbsent(sessionId, k -> new Owned());
    owned.root = dir.getParent();
    if (sparkSessions(session.sparkContext()).contains(uuid)) {
      owned.uuids.add(uuid);
    }
    if (!Files.isDirectory(dir)) {
      return;
    }
    List<String> roots = Arrays.asList(owned.root.toString(), SparkFiles.getRootDirectory());
    try (Stream<Path> files = Files.walk(dir)) {
      files.filter(Files::isRegularFile).forEach(file -> {
        String name = dir.relativize(file).toString().replace(File.separatorChar, '/');
        if (!name.startsWith("classes/") && owned.reported.size() < MAX_FILES_PER_SESSION
            && owned.reported.add(name)) {
          ConnectArtifacts.added(sessionId, file.toString(), name, file.toFile().length(),
              roots);
        }
      });
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "could not list the artifacts of Connect session {}: {}",
          sessionId, e.toString());
    }
  }

  /** The Spark session ids the context holds added files, archives or jars under. */
  static Set<String> sparkSessions(SparkContext sc) {
    Set<String> ids = new HashSet<>();
    List<scala.collection.concurrent.Map<String, ?>> all = Arrays.asList(sc.addedFiles(),
        sc.addedArchives(), sc.addedJars());
    for (scala.collection.concurrent.Map<String, ?> added : all) {
      scala.collection.Iterator<String> it = added.keysIterator();
      while (it.hasNext()) {
        ids.add(it.next());
      }
    }
    return ids;
  }

  /** Spark session ids registered while session {@code sessionId} persisted: its clones. */
  static void cloned(String sessionId, Set<String> before, SparkContext sc) {
    Owned owned = OWNED.get(sessionId);
    if (owned == null) {
      return;  // no artifacts: its clones register none
    }
    Set<String> after = sparkSessions(sc);
    after.removeAll(before);
    owned.uuids.addAll(after);
  }

  /** How many Spark sessions hold session {@code sessionId}'s artifacts (tests, status). */
  static int held(String sessionId) {
    Owned owned = OWNED.get(sessionId);
    return owned == null ? 0 : owned.uuids.size();
  }

  /**
   * Session {@code sessionId} ended: its Spark sessions' files leave the context and the file
   * server now; their folders go to the driver runtime, which deletes them (retried), and the
   * executors evict the sessions.
   */
  static void release(String sessionId, SparkContext sc) {
    Owned owned = OWNED.remove(sessionId);
    if (owned == null || owned.root == null) {
      return;
    }
    List<String> uuids = new ArrayList<>(owned.uuids);
    Collections.sort(uuids);
    boolean changed = false;
    RpcEnvFileServer server = SparkEnv.get().rpcEnv().fileServer();
    for (String uuid : uuids) {
      changed |= unregister(sc.addedFiles(), uuid, server, false);
      changed |= unregister(sc.addedArchives(), uuid, server, false);
      changed |= unregister(sc.addedJars(), uuid, server, true);
    }
    if (changed) {
      sc.postEnvironmentUpdate();
    }
    Path driverFiles = new File(SparkFiles.getRootDirectory()).toPath();
    List<String> folders = new ArrayList<>();
    for (String uuid : uuids) {
      folders.add(owned.root.resolve(uuid).toString());
      folders.add(driverFiles.resolve(uuid).toString());
    }
    ConnectArtifacts.ended(sessionId, uuids, folders,
        Arrays.asList(owned.root.toString(), driverFiles.toString()));
  }

  private static boolean unregister(
      scala.collection.concurrent.Map<String, scala.collection.concurrent.Map<String, Object>>
          added, String uuid, RpcEnvFileServer server, boolean jars) {
    scala.Option<scala.collection.concurrent.Map<String, Object>> gone = added.remove(uuid);
    if (gone.isEmpty()) {
      return false;
    }
    scala.collection.Iterator<String> keys = gone.get().keysIterator();
    while (keys.hasNext()) {
      String key = keys.next();
      if (jars) {
        server.removeJar(key);
      } else {
        server.removeFile(key);
      }
    }
    return true;
  }
}
