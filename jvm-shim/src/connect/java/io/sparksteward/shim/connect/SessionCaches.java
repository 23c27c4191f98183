package io.sparksteward.shim.connect;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import io.sparksteward.shim.blob.ConnectArtifacts;
import io.sparksteward.shim.kernel.ConnectHoldings;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkContext$;
import org.apache.spark.connect.proto.AddArtifactsRequest;
import org.apache.spark.connect.proto.AnalyzePlanRequest;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SessionKey;
import org.apache.spark.sql.connect.service.SparkConnectService$;
import org.apache.spark.sql.connect.service.SparkListenerConnectSessionClosed;
import org.apache.spark.sql.execution.CacheManager;
import org.apache.spark.sql.execution.CachedData;
import org.sparkproject.connect.grpc.ForwardingServerCall;
import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a Connect session caches in memory goes when the session ends (SPARK-54653: today it
 * outlives the session that made it, until someone unpersists it or the server stops).
 *
 * <p>Spark's CacheManager is shared by every session of a server and records no owner, so the
 * owner is taken where the cache is made: this gRPC interceptor ({@code
 * spark.connect.grpc.interceptor.classes}, which {@code spark-steward conf --server} sets) sees
 * each {@code AnalyzePlan} request with a {@code persist} ({@code df.cache()}, {@code
 * df.persist()}), and the entries the cache manager gained while Spark served it belong to the
 * request's session. Persists are served one at a time for that (they only register a plan:
 * the data is computed by the next job). A plan another session cached first stays that
 * session's. Data {@code df.localCheckpoint()} kept (persisted RDDs marked for local
 * checkpointing) belongs to the session whose jobs computed them, known from the jobs' Connect
 * operation tags.
 *
 * <p>When the session closes or expires ({@code SparkListenerConnectSessionClosed}), its
 * entries still cached are uncached (not blocking, no cascade) and its locally checkpointed
 * RDDs unpersisted. Results never change: a query over a released plan computes it again.
 *
 * <p>The same requests tell what a session's {@code spark.addArtifacts} leaves ({@link
 * SessionArtifacts}): its {@code AddArtifacts} calls, and the session clones its persists make.
 */
public final class SessionCaches implements ServerInterceptor {
  private static final Logger LOG = LoggerFactory.getLogger(SessionCaches.class);
  /** The session id inside a Connect operation tag (kernel/sessions.py has the same grammar). */
  private static final Pattern SESSION_TAG = Pattern.compile(
      "SparkConnect_OperationTag_User_.*_Session_([0-9a-fA-F-]{36})_Operation_.*");
  private static final int MAX_RDDS_PER_JOB = 2048;

  private static final Object PERSISTS = new Object();
  private static final Map<String, List<CachedData>> CACHED = new ConcurrentHashMap<>();
  private static final Map<String, Set<Integer>> JOB_RDDS = new ConcurrentHashMap<>();
  private static final Object INSTALL = new Object();
  private static volatile SparkContext listening;

  public SessionCaches() {
    listen();
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
      ServerCallHandler<Q, R> next) {
    if (listening == null) {
      listen();  // the server may build its interceptors before its SparkContext
    }
    String method = call.getMethodDescriptor().getFullMethodName();
    if (method.endsWith("/AddArtifacts")) {
      return artifacts(next.startCall(call, headers));
    }
    if (!method.endsWith("/AnalyzePlan")) {
      return next.startCall(call, headers);
    }
    // What follows a persist runs before the call closes: the client's next request (a query
    // that should read the cached table) comes after it.
    BeforeClose hook = new BeforeClose();
    ServerCall<Q, R> watched = new ForwardingServerCall.SimpleForwardingServerCall<Q, R>(call) {
      @Override
      public void close(Status status, Metadata trailers) {
        hook.run();
        super.close(status, trailers);
      }
    };
    ServerCall.Listener<Q> served = next.startCall(watched, headers);
    return new ForwardingServerCallListener.SimpleForwardingServerCallListener<Q>(served) {
      private String persistingSession;
      private String userId;
      private boolean unpersist;

      @Override
      public void onMessage(Q message) {
        if (message instanceof AnalyzePlanRequest) {
          AnalyzePlanRequest request = (AnalyzePlanRequest) message;
          if (request.hasPersist() || request.hasUnpersist()) {
            persistingSession = request.getSessionId();
            userId = request.getUserContext().getUserId();
            unpersist = request.hasUnpersist();
          }
        }
        super.onMessage(message);
      }

      @Override
      public void onHalfClose() {
        if (persistingSession == null) {
          super.onHalfClose();
          return;
        }
        // A unary call is served inside onHalfClose: what the cache gained meanwhile is this
        // session's.
        synchronized (PERSISTS) {
          Set<CachedData> before = entries();
          Set<String> sparkSessions = listening == null ? Collections.emptySet()
              : SessionArtifacts.sparkSessions(listening);
          hook.set(() -> served(persistingSession, userId, unpersist, before, sparkSessions));
          try {
            super.onHalfClose();
          } finally {
            hook.run();  // when the call did not close here
          }
        }
      }
    };
  }

  /** A task run once, by the first of the call's close and the end of its serving. */
  private static final class BeforeClose {
    private Runnable task;

    synchronized void set(Runnable task) {
      this.task = task;
    }

    void run() {
      Runnable once;
      synchronized (this) {
        once = task;
        task = null;
      }
      if (once != null) {
        try {
          once.run();
        } catch (RuntimeException | LinkageError e) {
          LOG.warn(Errors.PREFIX + "could not take what a persist or unpersist changed: {}",
              e.toString());
        }
      }
    }
  }

  /** After a persist or unpersist of session {@code sessionId} was served. */
  private static void served(String sessionId, String userId, boolean unpersist,
      Set<CachedData> before, Set<String> sparkSessions) {
    if (unpersist) {
      TransparentCaches.dropGone(entries());
      return;
    }
    List<CachedData> gained = claim(sessionId, before);
    if (listening != null) {
      SessionArtifacts.cloned(sessionId, sparkSessions, listening);
    }
    if (!gained.isEmpty()) {
      TransparentCaches.cached(userId, sessionId, gained);
    }
  }

  /** An {@code AddArtifacts} call: once served, what the session added is told on. */
  private static <Q> ServerCall.Listener<Q> artifacts(ServerCall.Listener<Q> served) {
    return new ForwardingServerCallListener.SimpleForwardingServerCallListener<Q>(served) {
      private String sessionId;
      private String userId;

      @Override
      public void onMessage(Q message) {
        if (sessionId == null && message instanceof AddArtifactsRequest) {
          AddArtifactsRequest request = (AddArtifactsRequest) message;
          sessionId = request.getSessionId();
          userId = request.getUserContext().getUserId();
        }
        super.onMessage(message);
      }

      @Override
      public void onHalfClose() {
        super.onHalfClose();  // the client-streamed call is served here
        if (sessionId != null) {
          try {
            SessionArtifacts.added(userId, sessionId);
          } catch (RuntimeException | LinkageError e) {
            LOG.warn(Errors.PREFIX + "could not take the artifacts of Connect session {}: {}",
                sessionId, e.toString());
          }
        }
      }
    };
  }

  /** The entries the cache gained since {@code before}, now session {@code sessionId}'s. */
  private static List<CachedData> claim(String sessionId, Set<CachedData> before) {
    Set<CachedData> after = entries();
    after.removeAll(before);
    if (!after.isEmpty()) {
      CACHED.computeIfAbsent(sessionId, k -> Collections.synchronizedList(new ArrayList<>()))
          .addAll(after);
    }
    return new ArrayList<>(after);
  }

  /**
   * {blocks, bytes} session {@code sessionId} holds now in Spark's block managers: the cached
   * blocks of its cache entries (once computed) and of its locally checkpointed RDDs.
   */
  static long[] holdings(String sessionId) {
    SparkContext sc = listening;
    if (sc == null) {
      return new long[] {0, 0};
    }
    Set<Integer> rdds = new java.util.HashSet<>();
    List<CachedData> mine = CACHED.get(sessionId);
    if (mine != null) {
      Set<CachedData> present = entries();
      synchronized (mine) {
        for (CachedData data : mine) {
          if (present.contains(data)
              && data.cachedRepresentation().cacheBuilder().isCachedColumnBuffersLoaded()) {
            rdds.add(data.cachedRepresentation().cacheBuilder().cachedColumnBuffers().id());
          }
        }
      }
    }
    Set<Integer> jobs = JOB_RDDS.get(sessionId);
    if (jobs != null) {
      scala.collection.Map<Object, RDD<?>> persistent = sc.getPersistentRDDs();
      for (Integer id : jobs) {
        scala.Option<RDD<?>> rdd = persistent.get(id);
        if (rdd.isDefined() && rdd.get().isLocallyCheckpointed()) {
          rdds.add(id);
        }
      }
    }
    long blocks = 0;
    long bytes = 0;
    for (org.apache.spark.storage.RDDInfo info : sc.getRDDStorageInfo()) {
      if (rdds.contains(info.id())) {
        blocks += info.numCachedPartitions();
        bytes += info.memSize() + info.diskSize();
      }
    }
    return new long[] {blocks, bytes};
  }

  /** The number of cache entries session {@code sessionId} owns now (for tests and status). */
  public static int owned(String sessionId) {
    List<CachedData> mine = CACHED.get(sessionId);
    return mine == null ? 0 : mine.size();
  }

  // -- the session's end ---------------------------------------------------------------------

  /** Listens on the running SparkContext, once; never makes one (getOrCreate would). */
  private static void listen() {
    synchronized (INSTALL) {
      scala.Option<SparkContext> active = SparkContext$.MODULE$.getActive();
      if (active.isEmpty() || listening == active.get()) {
        return;
      }
      SparkContext sc = active.get();
      listening = sc;
      ConnectHoldings.set(SessionCaches::holdings);
      sc.addSparkListener(new SparkListener() {
        @Override
        public void onJobStart(SparkListenerJobStart jobStart) {
          String session = sessionOf(jobStart.properties() == null ? null
              : jobStart.properties().getProperty("spark.job.tags"));
          if (session != null) {
            JOB_RDDS.computeIfAbsent(session, k -> ConcurrentHashMap.newKeySet())
                .addAll(SparkCompat.rddIds(jobStart, MAX_RDDS_PER_JOB));
          }
        }

        @Override
        public void onOtherEvent(SparkListenerEvent event) {
          if (event instanceof SparkListenerConnectSessionClosed) {
            release(((SparkListenerConnectSessionClosed) event).sessionId());
          }
        }
      });
    }
  }

  static String sessionOf(String tags) {
    if (tags == null) {
      return null;
    }
    for (String tag : tags.split(",")) {
      Matcher m = SESSION_TAG.matcher(tag.trim());
      if (m.matches()) {
        return m.group(1);
      }
    }
    return null;
  }

  private static void release(String sessionId) {
    TransparentCaches.release(sessionId);
    ConnectArtifacts.sessionEnded(sessionId);  // executors remove its local state
    try {
      SessionArtifacts.release(sessionId, listening);
    } catch (RuntimeException | LinkageError e) {
      LOG.warn(Errors.PREFIX + "could not release the artifacts of Connect session {}: {}",
          sessionId, e.toString());
    }
    List<CachedData> mine = CACHED.remove(sessionId);
    Set<Integer> rdds = JOB_RDDS.remove(sessionId);
    int uncached = 0;
    int unpersisted = 0;
    try {
      if (mine != null) {
        SparkSession session = rootSession();
        Set<CachedData> present = entries();
        synchronized (mine) {
          for (CachedData data : mine) {
            if (present.contains(data)) {  // not unpersisted meanwhile
              session.sharedState().cacheManager().uncacheQuery(session, data.plan(), false,
                  false);
              uncached++;
            }
          }
        }
      }
      if (rdds != null) {
        scala.collection.Map<Object, RDD<?>> persistent = listening.getPersistentRDDs();
        for (Integer id : rdds) {
          scala.Option<RDD<?>> rdd = persistent.get(id);
          if (rdd.isDefined() && rdd.get().isLocallyCheckpointed()) {
            rdd.get().unpersist(false);
            unpersisted++;
          }
        }
      }
    } catch (RuntimeException e) {
      LOG.warn(Errors.PREFIX + "could not release what Connect session {} cached: {}", sessionId,
          e.toString());
      return;
    }
    if (uncached + unpersisted > 0) {
      LOG.info(Errors.PREFIX + "released {} cached DataFrame(s) and {} locally checkpointed "
          + "RDD(s) of Connect session {}", uncached, unpersisted, sessionId);
    }
  }

  // -- Spark's cache manager -----------------------------------------------------------------

  /** The holder of Connect session {@code sessionId} of {@code userId}, or null once closed. */
  static SessionHolder holder(String userId, String sessionId) {
    scala.Option<SessionHolder> found = SparkConnectService$.MODULE$.sessionManager()
        .getIsolatedSessionIfPresent(SessionKey.apply(userId, sessionId));
    return found.isEmpty() ? null : found.get();
  }

  static SparkSession rootSession() {
    scala.Option<SparkSession> session = SparkSession.getDefaultSession();
    if (session.isEmpty()) {
      throw new IllegalStateException("no default SparkSession on this server");
    }
    return session.get();
  }

  /** The cache manager's entries now, by identity (its list is private: read by reflection). */
  static Set<CachedData> entries() {
    Set<CachedData> found = Collections.newSetFromMap(new IdentityHashMap<>());
    try {
      CacheManager manager = rootSession().sharedState().cacheManager();
      Field field = CacheManager.class.getDeclaredField("cachedData");
      field.setAccessible(true);
      scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) field.get(manager))
          .iterator();
      while (it.hasNext()) {
        found.add((CachedData) it.next());
      }
    } catch (ReflectiveOperationException | RuntimeException e) {
      LOG.debug(Errors.PREFIX + "the cache manager's entries are not readable", e);
    }
    return found;
  }
}
