package io.sparksteward.shim.blob;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.LocalDirs;
import io.sparksteward.shim.kernel.PrivateFiles;
import io.sparksteward.shim.kernel.SparkCompat;
import io.sparksteward.shim.kernel.Handover;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Serves the verified blob pieces this executor's host holds to the executors of other hosts.
 * The executor JVM serves them, not a Python worker, because it lives as long as the executor
 * while workers come and go. It only reads what the Python side wrote under {@code
 * <local dir>/<app id>} ({@link PieceFiles}).
 *
 * <p>This class is the server's lifecycle: it binds the executor's own address, writes the
 * endpoint file other hosts find it by, accepts connections and hands each to {@link
 * PeerAdmission} (who may wait in the handshake, who may hold a slot) and a {@link PeerHandler}
 * thread (the {@link PeerHandshake}, then the requests of {@link PeerProtocol}); and because
 * writes have no socket timeout in Java, a reaper cuts a connection whose single write makes no
 * progress for the network timeout. Its stop removes the endpoint file, cuts every connection
 * and logs what was served. Every class of the server logs under this class's name.
 *
 * <p>Keys, scopes and numbers are validated before any path is touched ({@link PeerRequest}),
 * files are never followed through symbolic links ({@link RegularFiles}), and replies carry an
 * error code and one line, never a stack trace.
 */
public final class PeerServer {
  private static final Logger LOG = LoggerFactory.getLogger(PeerServer.class);
  private static final Pattern EXECUTOR_ID = Pattern.compile("[A-Za-z0-9._-]{1,64}");
  private static final long JOIN_MILLIS = 5000;

  private final Path endpointFile;
  private final String executorId;
  private final PeerSettings settings;
  private final ServerSocketChannel listener;
  private final Thread acceptor;
  private final ThreadPoolExecutor pool;
  private final ScheduledExecutorService reaper;
  private final SecureRandom random = new SecureRandom();
  private final LogThrottle throttle = new LogThrottle(LOG);
  private final PeerStats stats = new PeerStats();
  private final PeerAdmission admission;
  private final PeerHandler handler;

  private PeerServer(Path appDir, String executorId, PeerSettings settings,
      ServerSocketChannel listener) {
    Path peers = appDir.resolve("peers");
    this.endpointFile = peers.resolve(executorId + ".json");
    this.executorId = executorId;
    this.settings = settings;
    this.listener = listener;
    this.admission = new PeerAdmission(settings.maxConnections);
    PeerHandshake handshake =
        new PeerHandshake(peers.resolve("key"), settings, admission, stats, throttle);
    this.handler = new PeerHandler(settings, admission, handshake, new PieceFiles(appDir), stats,
        throttle);
    int threads = settings.maxConnections + PeerAdmission.MAX_PENDING;
    this.pool = new ThreadPoolExecutor(threads, threads, 30, TimeUnit.SECONDS,
        new ArrayBlockingQueue<Runnable>(PeerAdmission.MAX_PENDING),
        daemons("spark-steward-peer-conn"));
    pool.allowCoreThreadTimeOut(true);
    this.reaper = Executors.newSingleThreadScheduledExecutor(daemons("spark-steward-peer-reaper"));
    this.acceptor = daemons("spark-steward-peer-accept").newThread(this::acceptLoop);
  }

  /**
   * The executor plugin's server, or null (one WARN line said why, or serving is off): never
   * throws, the executor runs on without it.
   */
  public static PeerServer startFor(PluginContext ctx, Handover handover) {
    try {
      if (!handover.enabled || !handover.flag(PeerSettings.ENABLED_FIELD)) {
        return null;
      }
      PeerSettings settings = PeerSettings.of(handover);
      String localDir = handover.localDir;
      String appId = ctx.conf().get("spark.app.id", null);
      if (!LocalDirs.isSafeAppId(appId)) {
        throw new IllegalArgumentException("application id '" + appId + "' is not a safe path "
            + "segment");
      }
      String notPrivate = PrivateFiles.notPrivate(Paths.get(localDir));
      if (notPrivate != null) {
        throw new IOException("the local dir is not private: " + notPrivate);
      }
      String host = SparkCompat.hostname(ctx);
      InetAddress bind = InetAddress.getByName(host);
      PeerServer server = start(Paths.get(localDir, appId), bind, ctx.executorID(), settings);
      LOG.info(Errors.PREFIX + "executor {} serves its host's verified blob pieces on {}:{}",
          ctx.executorID(), bind.getHostAddress(), server.port());
      return server;
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "executor {} does not serve blob pieces to other hosts: {}",
          ctx.executorID(), e instanceof IllegalArgumentException ? e.getMessage() : e.toString());
      return null;
    }
  }

  /**
   * Binds {@code bind} (one address, never the wildcard) on a free port, starts serving and
   * writes the endpoint file {@code <appDir>/peers/<executorId>.json}.
   */
  static PeerServer start(Path appDir, InetAddress bind, String executorId, PeerSettings settings)
      throws IOException {
    if (executorId == null || !EXECUTOR_ID.matcher(executorId).matches()) {
      throw new IllegalArgumentException("executor id '" + executorId + "' is not a safe file "
          + "name");
    }
    if (bind.isAnyLocalAddress()) {
      throw new IllegalArgumentException("the peer server would listen on every interface ("
          + bind.getHostAddress() + "); it needs the executor's own address");
    }
    Path peers = appDir.resolve("peers");
    PrivateFiles.createDirectories(peers);
    String notPrivate = PrivateFiles.notPrivate(peers);
    if (notPrivate != null) {
      throw new IOException("the peer dir is not private: " + notPrivate);
    }
    ServerSocketChannel listener = ServerSocketChannel.open();
    PeerServer server;
    try {
      listener.bind(new InetSocketAddress(bind, 0), 128);
      server = new PeerServer(appDir, executorId, settings, listener);
    } catch (IOException | RuntimeException e) {
      listener.close();
      throw e;
    }
    server.acceptor.start();
    long period = Math.max(50, Math.min(1000, settings.idleMillis / 4));
    server.reaper.scheduleWithFixedDelay(server::reapStalledWrites, period, period,
        TimeUnit.MILLISECONDS);
    try {
      server.writeEndpoint(bind);
    } catch (IOException | RuntimeException e) {
      server.stop();
      throw e;
    }
    return server;
  }

  int port() {
    return listener.socket().getLocalPort();
  }

  /** {@code {"host":..,"port":..,"executor":..}}, atomically (temp, then rename), 0600. */
  private void writeEndpoint(InetAddress bind) throws IOException {
    ObjectNode endpoint = PeerProtocol.object();
    endpoint.put("host", bind.getHostAddress());
    endpoint.put("port", port());
    endpoint.put("executor", executorId);
    byte[] bytes = PeerProtocol.json(endpoint);
    byte[] suffix = new byte[6];
    random.nextBytes(suffix);
    Path temp = endpointFile.resolveSibling("." + executorId + ".json.tmp-"
        + Checksums.hex(suffix));
    try {
      try (FileChannel out = FileChannel.open(temp, new HashSet<>(Arrays.asList(
          StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)),
          PrivateFiles.FILE_MODE)) {
        ByteBuffer buffer = ByteBuffer.wrap(bytes);
        while (buffer.hasRemaining()) {
          out.write(buffer);
        }
      }
      Files.move(temp, endpointFile, StandardCopyOption.ATOMIC_MOVE,
          StandardCopyOption.REPLACE_EXISTING);
    } finally {
      Files.deleteIfExists(temp);
    }
  }

  /** Removes the endpoint file, closes every connection and logs what was served. Idempotent. */
  public void stop() {
    List<PeerConnection> open = admission.stop();
    if (open == null) {
      return;
    }
    try {
      Files.deleteIfExists(endpointFile);
    } catch (IOException e) {
      LOG.warn(Errors.PREFIX + "could not remove the peer endpoint file {}: {}", endpointFile,
          e.toString());
    }
    PeerConnection.closeQuietly(listener);
    for (PeerConnection c : open) {
      c.abort(); // Their threads end and close them; a connection never served is closed below.
    }
    reaper.shutdownNow();
    pool.shutdownNow();
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(JOIN_MILLIS);
    try {
      acceptor.join(JOIN_MILLIS);
      long left = deadline - System.nanoTime();
      if (!pool.awaitTermination(Math.max(0, left), TimeUnit.NANOSECONDS)) {
        LOG.warn(Errors.PREFIX + "peer server threads still run {} ms after the stop",
            JOIN_MILLIS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    for (PeerConnection c : open) {
      c.close();
    }
    LOG.info(Errors.PREFIX + "peer server of executor {} stopped: served {} pieces ({} bytes); "
        + "{} failed authentications, {} bad requests, {} refused busy, {} handshakes dropped",
        executorId, stats.piecesServed.get(), stats.bytesServed.get(), stats.authFailures.get(),
        stats.badRequests.get(), stats.refusedBusy.get(), stats.droppedHandshakes.get());
  }

  private void acceptLoop() {
    while (!admission.stopped()) {
      SocketChannel socket;
      try {
        socket = listener.accept();
      } catch (IOException e) {
        if (admission.stopped()) {
          return;
        }
        throttle.warn("accept", Errors.PREFIX + "peer server accept failed ({}); retrying",
            e.toString());
        sleepQuietly(50); // EMFILE and friends last a while: do not spin
        continue;
      }
      try {
        admit(socket);
      } catch (IOException | RuntimeException e) {
        throttle.warn("admit", Errors.PREFIX + "peer server could not admit a connection ({})",
            e.toString());
        PeerConnection.closeQuietly(socket);
      }
    }
  }

  /** Registers the socket as in the handshake (dropping the oldest beyond a bound), queues it. */
  private void admit(SocketChannel socket) throws IOException {
    socket.socket().setTcpNoDelay(true);
    PeerConnection conn = new PeerConnection(socket);
    PeerAdmission.Admitted admitted =
        admission.admit(conn, () -> pool.execute(() -> handler.serve(conn)));
    if (admitted == null) {
      return;
    }
    for (PeerConnection old : admitted.dropped) {
      old.close(); // In the handshake: its thread reads or writes frames, never a transferTo.
      stats.droppedHandshakes.incrementAndGet();
    }
    if (!admitted.dropped.isEmpty()) {
      throttle.warn("dropped", Errors.PREFIX + "peer server dropped {} connection(s) still in "
          + "the handshake to admit {} (at most {} in the handshake, {} per address)",
          admitted.dropped.size(), conn.peer, PeerAdmission.MAX_PENDING,
          PeerAdmission.MAX_PENDING_PER_PEER);
    }
    if (admitted.refused) {
      throttle.warn("refused", Errors.PREFIX + "peer server refused {}: no handler thread free",
          conn.peer);
      conn.close();
    }
  }

  private void reapStalledWrites() {
    long now = System.nanoTime();
    long limit = TimeUnit.MILLISECONDS.toNanos(settings.idleMillis);
    for (PeerConnection c : admission.stalled(now, limit)) {
      if (!c.aborted) {
        LOG.debug(Errors.PREFIX + "peer connection from {}: no write progress in {} ms; "
            + "cutting it", c.peer, settings.idleMillis);
      }
      c.abort();
    }
  }

  private static ThreadFactory daemons(String name) {
    AtomicInteger count = new AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, name + "-" + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  private static void sleepQuietly(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * For tests: {@code PeerServer <appDir> <bindAddress> <executorId> [maxConnections]
   * [rateBytesPerSec] [handshakeMillis] [idleMillis]}. Prints {@code port <n>} and serves until
   * stdin ends, then stops cleanly (the endpoint file removed).
   */
  public static void main(String[] args) throws Exception {
    if (args.length < 3 || args.length > 7) {
      System.err.println("usage: PeerServer <appDir> <bindAddress> <executorId> "
          + "[maxConnections] [rateBytesPerSec] [handshakeMillis] [idleMillis]");
      System.exit(2);
    }
    PeerSettings settings = new PeerSettings(
        args.length > 3 ? Integer.parseInt(args[3]) : 16,
        args.length > 4 ? Long.parseLong(args[4]) : 0,
        args.length > 5 ? Long.parseLong(args[5]) : 5000,
        args.length > 6 ? Long.parseLong(args[6]) : 60_000);
    PeerServer server = start(Paths.get(args[0]), InetAddress.getByName(args[1]), args[2],
        settings);
    System.out.println("port " + server.port());
    System.out.flush();
    byte[] sink = new byte[256];
    while (System.in.read(sink) >= 0) {
      // Until EOF.
    }
    server.stop();
  }
}
