package io.sparksteward.shim;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.SparkConf;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Serves the verified blob pieces this executor's host holds to the executors of other hosts.
 * The executor JVM serves them, not a Python worker, because it lives as long as the executor
 * while workers come and go. It only reads what the Python side wrote under {@code
 * <local dir>/<app id>}: complete blobs in {@code blob-cache/<scope>/<key>} (renamed into place
 * only once verified) and downloads in progress, whose {@code .<key>.tmp-have} file names the
 * temp file and flags each piece written and verified in it.
 *
 * <p>Framing and handshake are the Python blob server's ({@code spark_steward.blob.protocol}):
 * length-prefixed JSON objects, the length checked before the body is read, and an HMAC proof
 * of the peer secret ({@code peers/key}, written by Python) over a fresh nonce. Keys, scopes and
 * numbers are validated before any path is touched, files are never followed through symbolic
 * links, and replies carry an error code and one line, never a stack trace.
 *
 * <p>Nobody without the secret can lock good clients out: connections still in the handshake
 * are bounded apart from authenticated ones (globally and per peer address; the oldest is
 * dropped to admit a new one) and get the handshake timeout, not the network timeout, to
 * authenticate. Writes have no socket timeout in Java, so a reaper cuts a connection whose
 * single write makes no progress for the network timeout.
 *
 * <p>A piece's body goes from the file to the socket with {@link FileChannel#transferTo}
 * (sendfile on Linux), never through the heap. Frames are read through the channel's socket
 * adaptor, whose reads honour SO_TIMEOUT on every Java the shim runs on (8: a non-blocking
 * read and poll; 11 and later: a timed poll). On Java 8 to 21 a thread in transferTo is not
 * known to the socket channel (25 registers it), so closing the channel from another thread
 * neither wakes it nor keeps its file descriptor from being reused under it: other threads
 * only shut an authenticated connection down (which fails the blocked sendfile with EPIPE and
 * ends reads); the thread serving it closes it.
 */
public final class PeerServer {
  private static final Logger LOG = LoggerFactory.getLogger(PeerServer.class);

  static final String ENABLED_KEY = "spark.steward.blob.peer.enabled";
  static final String MAX_CONNECTIONS_KEY = "spark.steward.blob.peer.max-connections";
  static final String RATE_KEY = "spark.steward.blob.peer.rate";
  static final String NETWORK_TIMEOUT_KEY = "spark.steward.blob.network-timeout";
  static final String HANDSHAKE_TIMEOUT_KEY = "spark.steward.blob.server.handshake-timeout";
  /** The defaults of those keys, as config.py documents them (used when a key is unset). */
  static final String ENABLED_DEFAULT = "true";
  static final String MAX_CONNECTIONS_DEFAULT = "16";
  static final String RATE_DEFAULT = "0";
  static final String NETWORK_TIMEOUT_DEFAULT = "60s";
  static final String HANDSHAKE_TIMEOUT_DEFAULT = "5s";

  /** {@code blob.protocol.PROTOCOL_VERSION}, sent in the server's hello. */
  static final int PROTOCOL_VERSION = 1;
  /** {@code blob.protocol.HEADER_SIZE}: a frame's big-endian length prefix. */
  static final int HEADER_SIZE = 4;
  /** The requests a peer server answers (sent by {@code blob.client}, {@code blob.pieces}). */
  static final String OP_HAVE = "have";
  static final String OP_PIECE = "piece";
  /** The error codes of a reply; {@code blob.client} maps each to its own exception. */
  static final String ERROR_BAD_REQUEST = "bad_request";
  static final String ERROR_AUTH = "auth";
  static final String ERROR_BUSY = "busy";
  static final String ERROR_NOT_FOUND = "not_found";
  static final String ERROR_INTERNAL = "internal";
  /** {@code blob.cache.BlobCache.FOLDER}: complete blobs, under the application's folder. */
  static final String BLOB_CACHE = "blob-cache";
  /** {@code blob.pieces.HAVE_SUFFIX}: the have-file of a download in progress. */
  static final String HAVE_SUFFIX = ".tmp-have";
  /** The auth answer is ~80 bytes: an unauthenticated peer gets no more. */
  private static final int AUTH_FRAME = 1024;
  private static final int REQUEST_FRAME = 65536;
  /** Deeper JSON is never a request; refused before Jackson recurses into it. */
  private static final int MAX_DEPTH = 32;
  private static final int MAX_PENDING = 64;
  private static final int MAX_PENDING_PER_PEER = 8;
  /**
   * Bytes per transferTo call, the most a single write can take: a client that does not
   * take 1 MiB within the network timeout is cut.
   */
  private static final int CHUNK_BYTES = 1 << 20;
  /** transferTo calls in a row that may move nothing before the connection is given up. */
  private static final int MAX_ZERO_TRANSFERS = 3;
  private static final long MAX_SIZE = 1L << 50;
  private static final long MIN_PIECE = 65536;
  private static final long MAX_PIECE = 1L << 30;
  private static final long MAX_PIECES = 65536;
  /** {@code .<64 hex>.tmp-<12 hex>}: the have-file's first line. */
  private static final int HAVE_HEADER = 82;
  private static final long LINGER_MILLIS = 200;
  private static final long LOG_EVERY_NANOS = TimeUnit.SECONDS.toNanos(10);
  private static final long JOIN_MILLIS = 5000;
  private static final byte[] AUTH_DOMAIN =
      "spark-steward-blob-v1:".getBytes(StandardCharsets.UTF_8);

  private static final Pattern EXECUTOR_ID = Pattern.compile("[A-Za-z0-9._-]{1,64}");
  private static final Pattern KEY = Pattern.compile("[0-9a-f]{64}");
  private static final Pattern SCOPE =
      Pattern.compile("_app|[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\\.[0-9]{1,9}");
  private static final Pattern HEX12 = Pattern.compile("[0-9a-f]{12}");
  private static final Pattern SECRET = Pattern.compile("[0-9a-f]{64}");
  private static final char[] HEX = "0123456789abcdef".toCharArray();
  private static final ObjectMapper MAPPER =
      new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  private final Path blobCache;
  private final Path keyFile;
  private final Path endpointFile;
  private final String executorId;
  private final Settings settings;
  private final ServerSocketChannel listener;
  private final Thread acceptor;
  private final ThreadPoolExecutor pool;
  private final ScheduledExecutorService reaper;
  private final TokenBucket bucket;
  private final SecureRandom random = new SecureRandom();
  private final Throttle throttle = new Throttle();
  private volatile String secret;
  private volatile boolean stopped;

  private final Object lock = new Object();
  private final Set<Conn> live = new HashSet<>();
  /** In the handshake, oldest first. */
  private final LinkedHashSet<Conn> pending = new LinkedHashSet<>();
  private final Map<String, Integer> pendingPerPeer = new HashMap<>();
  private int authenticated;

  private final AtomicLong piecesServed = new AtomicLong();
  private final AtomicLong bytesServed = new AtomicLong();
  private final AtomicLong authFailures = new AtomicLong();
  private final AtomicLong badRequests = new AtomicLong();
  private final AtomicLong refusedBusy = new AtomicLong();
  private final AtomicLong droppedHandshakes = new AtomicLong();

  /** What the server is allowed to do, from the executor's conf or {@link #main}'s arguments. */
  static final class Settings {
    final int maxConnections;
    /** Bytes per second for all connections together; 0: no cap. */
    final long rate;
    final long handshakeMillis;
    final long idleMillis;

    Settings(int maxConnections, long rate, long handshakeMillis, long idleMillis) {
      if (maxConnections < 1 || rate < 0 || handshakeMillis < 1 || idleMillis < 1) {
        throw new IllegalArgumentException("peer server settings out of range: max-connections "
            + maxConnections + ", rate " + rate + ", handshake " + handshakeMillis + " ms, idle "
            + idleMillis + " ms");
      }
      this.maxConnections = maxConnections;
      this.rate = rate;
      this.handshakeMillis = handshakeMillis;
      this.idleMillis = idleMillis;
    }

    /**
     * Parsed as Python's config parses the same keys (so a value one side takes the other
     * does); IllegalArgumentException names the key and value.
     */
    static Settings fromConf(SparkConf conf) {
      long max =
          parseInt(MAX_CONNECTIONS_KEY, conf.get(MAX_CONNECTIONS_KEY, MAX_CONNECTIONS_DEFAULT));
      long rate = parseSize(RATE_KEY, conf.get(RATE_KEY, RATE_DEFAULT));
      long idle = parseMillis(NETWORK_TIMEOUT_KEY,
          conf.get(NETWORK_TIMEOUT_KEY, NETWORK_TIMEOUT_DEFAULT), 10);
      long handshake = parseMillis(HANDSHAKE_TIMEOUT_KEY,
          conf.get(HANDSHAKE_TIMEOUT_KEY, HANDSHAKE_TIMEOUT_DEFAULT), 50);
      if (max < 1) {
        throw invalid(MAX_CONNECTIONS_KEY, conf.get(MAX_CONNECTIONS_KEY, MAX_CONNECTIONS_DEFAULT),
            "must be at least 1");
      }
      return new Settings((int) Math.min(max, 100_000), rate, handshake, idle);
    }
  }

  private static final Pattern NUMBER_WITH_UNIT =
      Pattern.compile("\\s*([0-9]+(?:\\.[0-9]+)?)\\s*([a-zA-Z]*)\\s*");

  private static IllegalArgumentException invalid(String key, String raw, String expected) {
    return new IllegalArgumentException(key + "='" + raw + "' is not valid: " + expected);
  }

  /** Python's {@code _parse_int}. */
  static long parseInt(String key, String raw) {
    try {
      return Long.parseLong(raw.trim());
    } catch (NumberFormatException e) {
      throw invalid(key, raw, "expected a whole number");
    }
  }

  /** Python's {@code _parse_size}: {@code 512k}, {@code 64m}, {@code 1g}; bare is bytes. */
  static long parseSize(String key, String raw) {
    Matcher m = NUMBER_WITH_UNIT.matcher(raw);
    long unit = -1;
    if (m.matches()) {
      switch (m.group(2).toLowerCase(Locale.ROOT)) {
        case "":
        case "b":
          unit = 1;
          break;
        case "k":
        case "kb":
          unit = 1L << 10;
          break;
        case "m":
        case "mb":
          unit = 1L << 20;
          break;
        case "g":
        case "gb":
          unit = 1L << 30;
          break;
        case "t":
        case "tb":
          unit = 1L << 40;
          break;
        default:
          break;
      }
    }
    if (unit < 0) {
      throw invalid(key, raw, "expected a size such as 512k, 64m or 1g");
    }
    return (long) (Double.parseDouble(m.group(1)) * unit);
  }

  /** Python's {@code _parse_duration} in milliseconds (rounded up); bare is seconds. */
  static long parseMillis(String key, String raw, long minimumMillis) {
    Matcher m = NUMBER_WITH_UNIT.matcher(raw);
    double unit = -1;
    if (m.matches()) {
      switch (m.group(2).toLowerCase(Locale.ROOT)) {
        case "ms":
          unit = 1;
          break;
        case "":
        case "s":
          unit = 1000;
          break;
        case "m":
        case "min":
          unit = 60_000;
          break;
        case "h":
          unit = 3_600_000;
          break;
        case "d":
          unit = 86_400_000;
          break;
        default:
          break;
      }
    }
    if (unit < 0) {
      throw invalid(key, raw, "expected a duration such as 500ms, 10s, 5min or 1h");
    }
    double millis = Math.ceil(Double.parseDouble(m.group(1)) * unit);
    if (millis < minimumMillis) {
      throw invalid(key, raw, "must be at least " + minimumMillis + " ms");
    }
    return (long) Math.min(millis, Integer.MAX_VALUE);
  }

  private PeerServer(Path appDir, String executorId, Settings settings,
      ServerSocketChannel listener) {
    this.blobCache = appDir.resolve(BLOB_CACHE);
    this.keyFile = appDir.resolve("peers").resolve("key");
    this.endpointFile = appDir.resolve("peers").resolve(executorId + ".json");
    this.executorId = executorId;
    this.settings = settings;
    this.listener = listener;
    this.bucket = settings.rate > 0 ? new TokenBucket(settings.rate) : null;
    int threads = settings.maxConnections + MAX_PENDING;
    this.pool = new ThreadPoolExecutor(threads, threads, 30, TimeUnit.SECONDS,
        new ArrayBlockingQueue<Runnable>(MAX_PENDING), daemons("spark-steward-peer-conn"));
    pool.allowCoreThreadTimeOut(true);
    this.reaper = Executors.newSingleThreadScheduledExecutor(daemons("spark-steward-peer-reaper"));
    this.acceptor = daemons("spark-steward-peer-accept").newThread(this::acceptLoop);
  }

  /**
   * The executor plugin's server, or null (one WARN line said why, or serving is off): never
   * throws, the executor runs on without it.
   */
  static PeerServer startFor(PluginContext ctx, String localDir) {
    try {
      SparkConf conf = ctx.conf();
      if (!StewardPlugin.parseBool(ENABLED_KEY, conf.get(ENABLED_KEY, ENABLED_DEFAULT))) {
        return null;
      }
      Settings settings = Settings.fromConf(conf);
      String appId = conf.get("spark.app.id", null);
      if (!LocalDirs.isSafeAppId(appId)) {
        throw new IllegalArgumentException("application id '" + appId + "' is not a safe path "
            + "segment");
      }
      String notPrivate = LocalDirs.notPrivate(Paths.get(localDir));
      if (notPrivate != null) {
        throw new IOException("the local dir is not private: " + notPrivate);
      }
      String host = AppEndExecutor.hostname(ctx);
      InetAddress bind = InetAddress.getByName(host);
      PeerServer server = start(Paths.get(localDir, appId), bind, ctx.executorID(), settings);
      LOG.info(Messages.PREFIX + "executor {} serves its host's verified blob pieces on {}:{}",
          ctx.executorID(), bind.getHostAddress(), server.port());
      return server;
    } catch (IOException | RuntimeException e) {
      LOG.warn(Messages.PREFIX + "executor {} does not serve blob pieces to other hosts: {}",
          ctx.executorID(), e instanceof IllegalArgumentException ? e.getMessage() : e.toString());
      return null;
    }
  }

  /**
   * Binds {@code bind} (one address, never the wildcard) on a free port, starts serving and
   * writes the endpoint file {@code <appDir>/peers/<executorId>.json}.
   */
  static PeerServer start(Path appDir, InetAddress bind, String executorId, Settings settings)
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
    LocalDirs.createPrivateDirectories(peers);
    String notPrivate = LocalDirs.notPrivate(peers);
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
    ObjectNode endpoint = MAPPER.createObjectNode();
    endpoint.put("host", bind.getHostAddress());
    endpoint.put("port", port());
    endpoint.put("executor", executorId);
    byte[] bytes = MAPPER.writeValueAsBytes(endpoint);
    byte[] suffix = new byte[6];
    random.nextBytes(suffix);
    Path temp = endpointFile.resolveSibling("." + executorId + ".json.tmp-" + hex(suffix));
    try {
      try (FileChannel out = FileChannel.open(temp, new HashSet<>(Arrays.asList(
          StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)),
          LocalDirs.PRIVATE_FILE)) {
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
  void stop() {
    List<Conn> open;
    synchronized (lock) {
      if (stopped) {
        return;
      }
      stopped = true;
      open = new ArrayList<>(live);
    }
    try {
      Files.deleteIfExists(endpointFile);
    } catch (IOException e) {
      LOG.warn(Messages.PREFIX + "could not remove the peer endpoint file {}: {}", endpointFile,
          e.toString());
    }
    closeQuietly(listener);
    for (Conn c : open) {
      c.abort(); // Their threads end and close them; a connection never served is closed below.
    }
    reaper.shutdownNow();
    pool.shutdownNow();
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(JOIN_MILLIS);
    try {
      acceptor.join(JOIN_MILLIS);
      long left = deadline - System.nanoTime();
      if (!pool.awaitTermination(Math.max(0, left), TimeUnit.NANOSECONDS)) {
        LOG.warn(Messages.PREFIX + "peer server threads still run {} ms after the stop",
            JOIN_MILLIS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    for (Conn c : open) {
      c.close();
    }
    LOG.info(Messages.PREFIX + "peer server of executor {} stopped: served {} pieces ({} bytes); "
        + "{} failed authentications, {} bad requests, {} refused busy, {} handshakes dropped",
        executorId, piecesServed.get(), bytesServed.get(), authFailures.get(), badRequests.get(),
        refusedBusy.get(), droppedHandshakes.get());
  }

  // -- admission -------------------------------------------------------------------------------

  private void acceptLoop() {
    while (!stopped) {
      SocketChannel socket;
      try {
        socket = listener.accept();
      } catch (IOException e) {
        if (stopped) {
          return;
        }
        throttle.warn("accept", Messages.PREFIX + "peer server accept failed ({}); retrying",
            e.toString());
        sleepQuietly(50); // EMFILE and friends last a while: do not spin
        continue;
      }
      try {
        admit(socket);
      } catch (IOException | RuntimeException e) {
        throttle.warn("admit", Messages.PREFIX + "peer server could not admit a connection ({})",
            e.toString());
        closeQuietly(socket);
      }
    }
  }

  /** Registers the socket as in the handshake (dropping the oldest beyond a bound), queues it. */
  private void admit(SocketChannel socket) throws IOException {
    socket.socket().setTcpNoDelay(true);
    Conn conn = new Conn(socket);
    List<Conn> dropped = new ArrayList<>(2);
    boolean refused = false;
    synchronized (lock) {
      if (stopped) {
        conn.close();
        return;
      }
      if (pendingPerPeer.getOrDefault(conn.address, 0) >= MAX_PENDING_PER_PEER) {
        for (Conn old : pending) {
          if (old.address.equals(conn.address)) {
            dropped.add(old);
            break;
          }
        }
      }
      if (pending.size() - dropped.size() >= MAX_PENDING) {
        for (Conn old : pending) {
          if (!dropped.contains(old)) {
            dropped.add(old);
            break;
          }
        }
      }
      for (Conn old : dropped) {
        old.dropped = true;
        leavePending(old);
      }
      pending.add(conn);
      pendingPerPeer.merge(conn.address, 1, Integer::sum);
      live.add(conn);
      try {
        pool.execute(() -> serve(conn));
      } catch (RejectedExecutionException e) {
        unregister(conn);
        refused = true;
      }
    }
    for (Conn old : dropped) {
      old.close(); // In the handshake: its thread reads or writes frames, never a transferTo.
      droppedHandshakes.incrementAndGet();
    }
    if (!dropped.isEmpty()) {
      throttle.warn("dropped", Messages.PREFIX + "peer server dropped {} connection(s) still in "
          + "the handshake to admit {} (at most {} in the handshake, {} per address)",
          dropped.size(), conn.peer, MAX_PENDING, MAX_PENDING_PER_PEER);
    }
    if (refused) {
      throttle.warn("refused", Messages.PREFIX + "peer server refused {}: no handler thread free",
          conn.peer);
      conn.close();
    }
  }

  /** The caller holds the lock. */
  private void leavePending(Conn conn) {
    if (pending.remove(conn)) {
      pendingPerPeer.computeIfPresent(conn.address, (k, n) -> n > 1 ? n - 1 : null);
    }
  }

  /** The caller holds the lock. */
  private void unregister(Conn conn) {
    leavePending(conn);
    live.remove(conn);
  }

  private void reapStalledWrites() {
    long now = System.nanoTime();
    long limit = TimeUnit.MILLISECONDS.toNanos(settings.idleMillis);
    List<Conn> stalled = new ArrayList<>();
    synchronized (lock) {
      for (Conn c : live) {
        long since = c.writingSince;
        if (since != 0 && now - since > limit) {
          stalled.add(c);
        }
      }
    }
    for (Conn c : stalled) {
      if (!c.aborted) {
        LOG.debug(Messages.PREFIX + "peer connection from {}: no write progress in {} ms; "
            + "cutting it", c.peer, settings.idleMillis);
      }
      c.abort();
    }
  }

  // -- one connection --------------------------------------------------------------------------

  private void serve(Conn conn) {
    boolean counted = false;
    try {
      if (conn.dropped || stopped) {
        return;
      }
      if (handshake(conn)) {
        counted = true;
        while (!stopped && serveOne(conn)) {
          // Next request.
        }
      }
    } catch (Lost e) {
      LOG.debug(Messages.PREFIX + "peer connection from {} lost: {}", conn.peer, e.getMessage());
    } catch (RuntimeException e) {
      LOG.warn(Messages.PREFIX + "peer connection from {} failed unexpectedly", conn.peer, e);
    } finally {
      synchronized (lock) {
        unregister(conn);
        if (counted) {
          authenticated--;
        }
      }
      conn.close();
    }
  }

  /** Challenge, proof, then a free authenticated slot; true when requests may follow. */
  private boolean handshake(Conn conn) throws Lost {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.handshakeMillis);
    byte[] nonceBytes = new byte[32];
    random.nextBytes(nonceBytes);
    String nonce = hex(nonceBytes);
    ObjectNode hello = MAPPER.createObjectNode();
    hello.put("protocol", PROTOCOL_VERSION);
    hello.put("nonce", nonce);
    conn.send(hello);
    ObjectNode answer = null;
    String problem;
    try {
      answer = conn.readFrame(AUTH_FRAME, deadline);
      problem = answer == null ? "the client closed the connection" : null;
    } catch (BadFrame e) {
      if (conn.dropped) {
        return false;
      }
      badRequests.incrementAndGet();
      throttle.warn("bad_request", Messages.PREFIX + "bad handshake from {}: {}", conn.peer,
          e.getMessage());
      conn.sendQuietly(error(ERROR_BAD_REQUEST, e.getMessage()));
      conn.lingerClose();
      return false;
    } catch (SocketTimeoutException e) {
      problem = "no answer within " + settings.handshakeMillis + " ms";
    } catch (IOException e) {
      problem = e.toString();
    }
    if (conn.dropped) {
      LOG.debug(Messages.PREFIX + "peer connection from {} dropped in the handshake", conn.peer);
      return false;
    }
    if (problem == null) {
      String key = secret();
      if (key == null) {
        problem = "this host's peer key is not ready";
      } else if (!proofMatches(key, nonce, answer.get("auth"))) {
        problem = "the client does not hold this application's secret";
      }
    }
    if (problem != null) {
      authFailures.incrementAndGet();
      throttle.warn("auth", Messages.PREFIX + "peer connection from {} failed authentication: {}",
          conn.peer, problem);
      conn.sendQuietly(error(ERROR_AUTH, "authentication failed: " + problem));
      conn.lingerClose();
      return false;
    }
    boolean busy;
    synchronized (lock) {
      if (conn.dropped || !pending.contains(conn)) {
        return false;
      }
      leavePending(conn);
      busy = authenticated >= settings.maxConnections;
      if (!busy) {
        authenticated++;
      }
    }
    if (busy) {
      refusedBusy.incrementAndGet();
      throttle.warn("busy", Messages.PREFIX + "peer server refused {}: {} authenticated "
          + "connections open", conn.peer, settings.maxConnections);
      conn.sendQuietly(error(ERROR_BUSY, "the peer server has " + settings.maxConnections
          + " connections open; retry later"));
      conn.lingerClose();
      return false;
    }
    ObjectNode ok = MAPPER.createObjectNode();
    ok.put("ok", true);
    try {
      conn.send(ok);
    } catch (Lost e) {
      // The slot is released by serve(): the caller counts it only when this returns true.
      synchronized (lock) {
        authenticated--;
      }
      throw e;
    }
    return true;
  }

  /** Answers one request; false when the connection must end. */
  private boolean serveOne(Conn conn) throws Lost {
    ObjectNode request;
    try {
      request = conn.readFrame(REQUEST_FRAME,
          System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.idleMillis));
      if (request == null) {
        return false;
      }
    } catch (BadFrame e) {
      badRequest(conn, e.getMessage());
      conn.sendQuietly(error(ERROR_BAD_REQUEST, e.getMessage()));
      conn.lingerClose();
      return false;
    } catch (IOException e) {
      LOG.debug(Messages.PREFIX + "peer connection from {} ended: {}", conn.peer, e.toString());
      return false;
    }
    try {
      return dispatch(conn, request);
    } catch (BadRequest e) {
      badRequest(conn, e.getMessage());
      conn.send(error(ERROR_BAD_REQUEST, e.getMessage()));
    } catch (NotFound e) {
      conn.send(error(ERROR_NOT_FOUND, e.getMessage()));
    } catch (IOException | RuntimeException e) {
      LOG.warn(Messages.PREFIX + "peer request {} from {} failed unexpectedly",
          show(request.get("op")), conn.peer, e);
      conn.send(error(ERROR_INTERNAL, e.getClass().getName()));
    }
    return true;
  }

  private void badRequest(Conn conn, String message) {
    badRequests.incrementAndGet();
    throttle.warn("bad_request", Messages.PREFIX + "bad peer request from {}: {}", conn.peer,
        message);
  }

  private boolean dispatch(Conn conn, ObjectNode request)
      throws BadRequest, NotFound, IOException, Lost {
    JsonNode op = request.get("op");
    if (op == null || !op.isTextual()) {
      throw new BadRequest("request needs an 'op' string, got " + show(op));
    }
    if (OP_HAVE.equals(op.textValue())) {
      have(conn, Request.parse(request, false));
      return true;
    }
    if (OP_PIECE.equals(op.textValue())) {
      return piece(conn, Request.parse(request, true));
    }
    throw new BadRequest("op " + show(op) + (" is not known: expected '" + OP_HAVE
        + "' or '" + OP_PIECE + "'"));
  }

  private void have(Conn conn, Request r) throws NotFound, IOException, Lost {
    Path dir = scopeDir(r.scope);
    if (dir != null) {
      BasicFileAttributes complete = lstat(dir.resolve(r.key));
      ObjectNode reply = MAPPER.createObjectNode();
      reply.put("ok", true);
      if (complete != null && complete.isRegularFile() && complete.size() == r.size) {
        reply.put("complete", true);
        conn.send(reply);
        return;
      }
      Have have = readHave(dir, r);
      if (have != null) {
        BasicFileAttributes temp = lstat(dir.resolve(have.tempName));
        if (temp != null && temp.isRegularFile()) {
          reply.put("complete", false);
          reply.put("have", have.flags);
          conn.send(reply);
          return;
        }
      }
    }
    throw new NotFound("blob " + r.scope + "/" + r.key + " is not on this host");
  }

  /** Sends the piece; false when the connection must end (a file shorter than announced). */
  private boolean piece(Conn conn, Request r) throws NotFound, IOException, Lost {
    Path dir = scopeDir(r.scope);
    FileChannel source = null;
    try {
      if (dir != null) {
        source = openRegular(dir.resolve(r.key), r.size, true);
        if (source == null) {
          Have have = readHave(dir, r);
          if (have != null && have.flags.charAt((int) r.index) == '1') {
            source = openRegular(dir.resolve(have.tempName), r.offset + r.length, false);
          }
        }
      }
      if (source == null) {
        throw new NotFound("piece " + r.index + " of blob " + r.scope + "/" + r.key
            + " is not on this host");
      }
      ObjectNode header = MAPPER.createObjectNode();
      header.put("ok", true);
      header.put("offset", r.offset);
      header.put("length", r.length);
      conn.send(header);
      return sendBody(conn, source, r);
    } finally {
      if (source != null) {
        closeQuietly(source);
      }
    }
  }

  /**
   * Sends {@code r}'s bytes from {@code source} in chunks (each one paid to the upload cap
   * first); false when the connection must end: the file is shorter than announced or cannot
   * be read (the peer already has part of the body, so nothing is padded or said).
   */
  private boolean sendBody(Conn conn, FileChannel source, Request r) throws Lost {
    int step = bucket == null ? CHUNK_BYTES : bucket.step;
    long sent = 0;
    int zeros = 0;
    while (sent < r.length) {
      int want = (int) Math.min(step, r.length - sent);
      if (bucket != null) {
        try {
          bucket.take(want);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new Lost("interrupted");
        }
      }
      long chunkEnd = sent + want;
      while (sent < chunkEnd) {
        long position = r.offset + sent;
        long n;
        IOException failed = null;
        try {
          n = conn.transfer(source, position, chunkEnd - sent);
        } catch (IOException e) {
          n = -1;
          failed = e;
        }
        if (n > 0) {
          sent += n;
          zeros = 0;
          continue;
        }
        // Failed or moved nothing: sendfile does not say whether the file or the socket is to
        // blame, so the file is asked.
        String problem = fileProblem(conn, source, position);
        if (problem == null) {
          if (failed != null) {
            throw new Lost(failed.toString());
          }
          if (++zeros >= MAX_ZERO_TRANSFERS) {
            throw new Lost("transferTo moved no byte " + zeros + " times in a row");
          }
        } else if (problem.isEmpty()) {
          throttle.warn("short", Messages.PREFIX + "blob {}/{} ended {} bytes into piece {} of {} "
              + "announced; closing the connection from {}", r.scope, r.key, sent, r.index,
              r.length, conn.peer);
          return false;
        } else {
          throttle.warn("read", Messages.PREFIX + "reading piece {} of blob {}/{} failed ({}); "
              + "closing the connection from {}", r.index, r.scope, r.key, problem, conn.peer);
          return false;
        }
      }
    }
    piecesServed.incrementAndGet();
    bytesServed.addAndGet(sent);
    return true;
  }

  /**
   * What is wrong with {@code source} at {@code position} after a transferTo failed or moved
   * nothing: "" when the file ends there, why it cannot be read, or null when it can (so the
   * socket is to blame) or the connection is being cut or stopped anyway.
   */
  private String fileProblem(Conn conn, FileChannel source, long position) {
    if (stopped || conn.aborted || !source.isOpen() || Thread.currentThread().isInterrupted()) {
      return null;
    }
    try {
      if (source.size() <= position) {
        return "";
      }
      return source.read(ByteBuffer.allocate(1), position) < 0 ? "" : null;
    } catch (IOException e) {
      return e.toString();
    }
  }

  // -- files -----------------------------------------------------------------------------------

  /** {@code blob-cache/<scope>} when it and blob-cache are directories (not links), else null. */
  private Path scopeDir(String scope) throws IOException {
    Path dir = blobCache.resolve(scope);
    BasicFileAttributes cache = lstat(blobCache);
    BasicFileAttributes attrs = cache == null || !cache.isDirectory() ? null : lstat(dir);
    return attrs != null && attrs.isDirectory() ? dir : null;
  }

  /** The attributes of {@code path} itself (a link is a link), or null when it is absent. */
  private static BasicFileAttributes lstat(Path path) throws IOException {
    try {
      return Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
    } catch (NoSuchFileException e) {
      return null;
    }
  }

  /**
   * {@code path} opened for reading when it is a regular file (never through a link) of exactly
   * ({@code exact}) or at least {@code size} bytes, else null.
   */
  private static FileChannel openRegular(Path path, long size, boolean exact) throws IOException {
    BasicFileAttributes attrs = lstat(path);
    if (attrs == null || !attrs.isRegularFile() || !sizeFits(attrs.size(), size, exact)) {
      return null;
    }
    FileChannel channel;
    try {
      channel = FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);
    } catch (FileSystemException e) {
      BasicFileAttributes now = lstat(path);
      if (now == null || now.isSymbolicLink() || e instanceof NoSuchFileException) {
        return null; // Swapped or removed since the check.
      }
      throw e;
    }
    if (!sizeFits(channel.size(), size, exact)) {
      channel.close();
      return null;
    }
    return channel;
  }

  private static boolean sizeFits(long actual, long size, boolean exact) {
    return exact ? actual == size : actual >= size;
  }

  /** A download in progress: the temp file's name and one '0'/'1' per piece. */
  private static final class Have {
    final String tempName;
    final String flags;

    Have(String tempName, String flags) {
      this.tempName = tempName;
      this.flags = flags;
    }
  }

  /** The valid have-file of {@code r}'s blob with exactly N flags, else null. */
  private static Have readHave(Path dir, Request r) throws IOException {
    int expected = HAVE_HEADER + 1 + (int) r.pieces;
    byte[] data = new byte[expected];
    try (FileChannel channel = openRegular(dir.resolve("." + r.key + HAVE_SUFFIX), expected,
        true)) {
      if (channel == null) {
        return null;
      }
      ByteBuffer view = ByteBuffer.wrap(data);
      while (view.hasRemaining() && channel.read(view, view.position()) > 0) {
        // Until full or the end of the file.
      }
      if (view.hasRemaining()) {
        return null;
      }
    }
    String header = new String(data, 0, HAVE_HEADER, StandardCharsets.US_ASCII);
    String prefix = "." + r.key + ".tmp-";
    if (!header.startsWith(prefix) || !HEX12.matcher(header.substring(prefix.length())).matches()
        || data[HAVE_HEADER] != '\n') {
      return null;
    }
    for (int i = HAVE_HEADER + 1; i < expected; i++) {
      if (data[i] != '0' && data[i] != '1') {
        return null;
      }
    }
    return new Have(header,
        new String(data, HAVE_HEADER + 1, (int) r.pieces, StandardCharsets.US_ASCII));
  }

  /** The peer secret, read once it is there (null until Python has written it). */
  private String secret() {
    String cached = secret;
    if (cached != null) {
      return cached;
    }
    byte[] data = new byte[256];
    int got;
    try (FileChannel channel = openRegular(keyFile, 64, false)) {
      if (channel == null || channel.size() > data.length) {
        return null;
      }
      ByteBuffer view = ByteBuffer.wrap(data);
      while (view.hasRemaining() && channel.read(view) > 0) {
        // Until full or the end of the file.
      }
      got = view.position();
    } catch (IOException e) {
      throttle.warn("key", Messages.PREFIX + "the peer key {} cannot be read: {}", keyFile,
          e.toString());
      return null;
    }
    String text = new String(data, 0, got, StandardCharsets.US_ASCII);
    int end = text.length();
    while (end > 0 && Character.isWhitespace(text.charAt(end - 1))) {
      end--;
    }
    text = text.substring(0, end);
    if (!SECRET.matcher(text).matches()) {
      return null; // Still being written, or not a key: not ready.
    }
    secret = text;
    return text;
  }

  static boolean proofMatches(String secret, String nonce, JsonNode proof) {
    if (proof == null || !proof.isTextual()) {
      return false;
    }
    byte[] expected;
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
      mac.update(AUTH_DOMAIN);
      expected = hex(mac.doFinal(nonce.getBytes(StandardCharsets.UTF_8)))
          .getBytes(StandardCharsets.US_ASCII);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HmacSHA256 is not available", e);
    }
    return MessageDigest.isEqual(expected, proof.textValue().getBytes(StandardCharsets.UTF_8));
  }

  // -- requests --------------------------------------------------------------------------------

  /** A validated have or piece request: nothing in it can name another path. */
  private static final class Request {
    String key;
    String scope;
    long size;
    long pieceSize;
    long pieces;
    long index = -1;
    long offset;
    long length;

    static Request parse(ObjectNode request, boolean piece) throws BadRequest {
      Request r = new Request();
      r.key = text(request, "key", KEY, "64 lowercase hex digits (a SHA-256)");
      r.scope = text(request, "scope", SCOPE, "'_app' or '<name>.<number>'");
      r.size = integer(request, "size", 1, MAX_SIZE);
      r.pieceSize = integer(request, "piece_size", MIN_PIECE, MAX_PIECE);
      r.pieces = (r.size + r.pieceSize - 1) / r.pieceSize;
      if (r.pieces > MAX_PIECES) {
        throw new BadRequest("size " + r.size + " with piece_size " + r.pieceSize + " makes "
            + r.pieces + " pieces: at most " + MAX_PIECES);
      }
      if (piece) {
        r.index = integer(request, "index", 0, MAX_PIECES - 1);
        if (r.index >= r.pieces) {
          throw new BadRequest("index " + r.index + " is not valid: the blob has " + r.pieces
              + " pieces");
        }
        r.offset = r.index * r.pieceSize;
        r.length = Math.min(r.pieceSize, r.size - r.offset);
      }
      return r;
    }

    private static String text(ObjectNode request, String field, Pattern valid, String expected)
        throws BadRequest {
      JsonNode node = request.get(field);
      if (node == null || !node.isTextual() || !valid.matcher(node.textValue()).matches()) {
        throw new BadRequest(field + " " + show(node) + " is not valid: expected " + expected);
      }
      return node.textValue();
    }

    private static long integer(ObjectNode request, String field, long min, long max)
        throws BadRequest {
      JsonNode node = request.get(field);
      if (node == null || !node.isIntegralNumber() || !node.canConvertToLong()
          || node.longValue() < min || node.longValue() > max) {
        throw new BadRequest(field + " " + show(node) + " is not valid: expected a whole number "
            + "from " + min + " to " + max);
      }
      return node.longValue();
    }
  }

  /** A value for a one-line message: its JSON, truncated. */
  static String show(JsonNode node) {
    if (node == null) {
      return "(missing)";
    }
    return truncate(node.toString(), 80);
  }

  private static String truncate(String text, int max) {
    String line = text.replace('\n', ' ').replace('\r', ' ');
    return line.length() <= max ? line : line.substring(0, max) + "...";
  }

  private static ObjectNode error(String code, String message) {
    ObjectNode reply = MAPPER.createObjectNode();
    reply.put("error", code);
    reply.put("message", message);
    return reply;
  }

  /** The body of a frame as a JSON object; BadFrame says why it is not one. */
  static ObjectNode decode(byte[] body) throws BadFrame {
    String text;
    try {
      text = StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(body)).toString();
    } catch (CharacterCodingException e) {
      throw new BadFrame("frame of " + body.length + " bytes is not valid UTF-8");
    }
    if (depth(text) > MAX_DEPTH) {
      throw new BadFrame("frame of " + body.length + " bytes nests JSON deeper than "
          + MAX_DEPTH);
    }
    JsonNode node;
    try {
      node = MAPPER.readTree(text);
    } catch (IOException | RuntimeException e) {
      String why = e instanceof com.fasterxml.jackson.core.JsonProcessingException
          ? ((com.fasterxml.jackson.core.JsonProcessingException) e).getOriginalMessage()
          : e.toString();
      throw new BadFrame("frame of " + body.length + " bytes is not valid JSON: "
          + truncate(String.valueOf(why), 120));
    }
    if (node == null || !node.isObject()) {
      throw new BadFrame("frame holds " + (node == null || node.isMissingNode() ? "no value"
          : "a JSON " + node.getNodeType().toString().toLowerCase(Locale.ROOT))
          + ", expected an object");
    }
    return (ObjectNode) node;
  }

  /** How deep arrays and objects nest in {@code json}, strings skipped. */
  private static int depth(String json) {
    int depth = 0;
    int deepest = 0;
    boolean inString = false;
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      if (inString) {
        if (c == '\\') {
          i++;
        } else if (c == '"') {
          inString = false;
        }
      } else if (c == '"') {
        inString = true;
      } else if (c == '[' || c == '{') {
        deepest = Math.max(deepest, ++depth);
      } else if (c == ']' || c == '}') {
        depth--;
      }
    }
    return deepest;
  }

  /** The framing is broken: answered with bad_request, then the connection closes. */
  static final class BadFrame extends Exception {
    BadFrame(String message) {
      super(message, null, false, false);
    }
  }

  /** A well-framed request that is not valid: answered with bad_request; the connection stays. */
  static final class BadRequest extends Exception {
    BadRequest(String message) {
      super(message, null, false, false);
    }
  }

  static final class NotFound extends Exception {
    NotFound(String message) {
      super(message, null, false, false);
    }
  }

  /** Writing to the socket failed: nothing more can be said to this peer. */
  static final class Lost extends Exception {
    Lost(String message) {
      super(message, null, false, false);
    }
  }

  /**
   * One accepted socket (a blocking channel): frames read by a deadline through its socket
   * adaptor, writes watched by the reaper. Only its own thread closes it once it may be in a
   * transferTo; other threads {@link #abort} it.
   */
  private static final class Conn {
    final SocketChannel channel;
    final Socket socket;
    final String peer;
    final String address;
    /** The adaptor's stream: its reads honour the socket's SO_TIMEOUT (Java 8 and later). */
    final InputStream in;
    volatile boolean dropped;
    /** Shut down by the reaper or the stop: nothing more goes either way. */
    volatile boolean aborted;
    /** System.nanoTime() when the write under way began; 0 when none is. */
    volatile long writingSince;

    Conn(SocketChannel channel) throws IOException {
      this.channel = channel;
      this.socket = channel.socket();
      this.address = socket.getInetAddress().getHostAddress();
      this.peer = address + ":" + socket.getPort();
      this.in = socket.getInputStream();
    }

    /** The next frame, or null when the peer closed before one began. */
    ObjectNode readFrame(int limit, long deadline) throws IOException, BadFrame {
      byte[] head = new byte[HEADER_SIZE];
      int got = readFully(head, deadline);
      if (got == 0) {
        return null;
      }
      if (got < head.length) {
        throw new BadFrame("truncated frame: connection closed after " + got
            + (" of " + HEADER_SIZE + " length bytes"));
      }
      long length = ((head[0] & 0xffL) << 24) | ((head[1] & 0xffL) << 16)
          | ((head[2] & 0xffL) << 8) | (head[3] & 0xffL);
      if (length == 0) {
        throw new BadFrame("empty frame: a frame must hold a JSON object");
      }
      if (length > limit) {
        throw new BadFrame("frame length " + length + " exceeds the limit of " + limit
            + " bytes");
      }
      byte[] body = new byte[(int) length];
      got = readFully(body, deadline);
      if (got < body.length) {
        throw new BadFrame("truncated frame: connection closed after " + got + " of " + length
            + " bytes");
      }
      return decode(body);
    }

    /** Fills {@code into} unless the stream ends first; the whole read must end by deadline. */
    private int readFully(byte[] into, long deadline) throws IOException {
      int got = 0;
      while (got < into.length) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          throw new SocketTimeoutException("no complete frame in time");
        }
        socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE,
            TimeUnit.NANOSECONDS.toMillis(left + 999_999))));
        int n = in.read(into, got, into.length - got);
        if (n < 0) {
          break;
        }
        got += n;
      }
      return got;
    }

    void send(JsonNode frame) throws Lost {
      byte[] body;
      try {
        body = MAPPER.writeValueAsBytes(frame);
      } catch (IOException e) {
        throw new IllegalStateException("a reply cannot be encoded", e);
      }
      byte[] bytes = new byte[HEADER_SIZE + body.length];
      bytes[0] = (byte) (body.length >>> 24);
      bytes[1] = (byte) (body.length >>> 16);
      bytes[2] = (byte) (body.length >>> 8);
      bytes[3] = (byte) body.length;
      System.arraycopy(body, 0, bytes, HEADER_SIZE, body.length);
      write(bytes, 0, bytes.length);
    }

    void sendQuietly(JsonNode frame) {
      try {
        send(frame);
      } catch (Lost e) {
        // The peer is gone: nothing to tell it.
      }
    }

    void write(byte[] bytes, int offset, int length) throws Lost {
      ByteBuffer view = ByteBuffer.wrap(bytes, offset, length);
      writingSince = System.nanoTime() | 1;
      try {
        while (view.hasRemaining()) {
          channel.write(view);
        }
      } catch (IOException e) {
        throw new Lost(e.toString());
      } finally {
        writingSince = 0;
      }
    }

    /**
     * {@code source.transferTo} this socket (sendfile): at most {@code count} bytes from
     * {@code position}, watched by the reaper as one write. IOException: the file or the socket
     * failed (sendfile does not say which).
     */
    long transfer(FileChannel source, long position, long count) throws IOException {
      writingSince = System.nanoTime() | 1;
      try {
        return source.transferTo(position, count, channel);
      } finally {
        writingSince = 0;
      }
    }

    /**
     * Half-close, then drain briefly: closing with unread input would send a RST that can
     * destroy the error reply before the client reads it.
     */
    void lingerClose() {
      try {
        socket.shutdownOutput();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(LINGER_MILLIS);
        byte[] sink = new byte[4096];
        long left;
        while ((left = deadline - System.nanoTime()) > 0) {
          socket.setSoTimeout((int) Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
          if (in.read(sink) < 0) {
            break;
          }
        }
      } catch (IOException e) {
        // The peer is gone already, or the drain timed out: nothing left to protect.
      }
    }

    /**
     * From another thread: shuts both directions down, which fails a write or sendfile blocked
     * on a full socket (EPIPE) and ends a blocked read, without closing the file descriptor
     * that thread may still use.
     */
    void abort() {
      aborted = true;
      try {
        channel.shutdownOutput();
      } catch (IOException | RuntimeException e) {
        // Closed already: nothing to stop. Nothing escapes: the reaper must not die of it.
      }
      try {
        channel.shutdownInput();
      } catch (IOException | RuntimeException e) {
        // As above.
      }
    }

    void close() {
      closeQuietly(channel);
    }
  }

  /** One upload cap shared by every connection: bytes per second, reserved in steps. */
  static final class TokenBucket {
    final long rate;
    /** Bytes a connection sends per reservation: about 1/16 s of the rate, 4 KiB to 1 MiB. */
    final int step;
    private double tokens;
    private long last = System.nanoTime();

    TokenBucket(long rate) {
      this.rate = rate;
      this.step = (int) Math.max(4096, Math.min(CHUNK_BYTES, rate / 16));
      this.tokens = step;
    }

    /** Takes {@code n} bytes' worth, waiting while the bucket is in debt. */
    void take(long n) throws InterruptedException {
      long waitNanos;
      synchronized (this) {
        long now = System.nanoTime();
        tokens = Math.min(step, tokens + (now - last) * (double) rate / 1e9);
        last = now;
        tokens -= n;
        waitNanos = tokens >= 0 ? 0 : (long) (-tokens * 1e9 / rate);
      }
      if (waitNanos > 0) {
        TimeUnit.NANOSECONDS.sleep(waitNanos);
      }
    }
  }

  /**
   * At most one warning of a kind per 10 s, with a count of the ones left out: a storm of bad
   * connections must not become a storm in the executor's log.
   */
  static final class Throttle {
    private final Map<String, Long> last = new HashMap<>();
    private final Map<String, Integer> held = new HashMap<>();

    void warn(String kind, String format, Object... args) {
      int suppressed;
      synchronized (this) {
        long now = System.nanoTime();
        Long at = last.get(kind);
        if (at != null && now - at < LOG_EVERY_NANOS) {
          held.merge(kind, 1, Integer::sum);
          return;
        }
        last.put(kind, now);
        Integer h = held.remove(kind);
        suppressed = h == null ? 0 : h;
      }
      LOG.warn(suppressed == 0 ? format
          : format + " (" + suppressed + " more like it since the last report)", args);
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

  static String hex(byte[] bytes) {
    char[] out = new char[bytes.length * 2];
    for (int i = 0; i < bytes.length; i++) {
      out[2 * i] = HEX[(bytes[i] >> 4) & 0xf];
      out[2 * i + 1] = HEX[bytes[i] & 0xf];
    }
    return new String(out);
  }

  private static void closeQuietly(java.io.Closeable closeable) {
    try {
      closeable.close();
    } catch (IOException e) {
      // Closing is all that was left to do.
    }
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
    Settings settings = new Settings(
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
