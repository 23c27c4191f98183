package io.sparksteward.shim.connect;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import io.sparksteward.shim.kernel.ConnectCommands;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.SparkCompat;
import io.sparksteward.shim.tables.CachedTables;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.analysis.MultiInstanceRelation;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.execution.CachedData;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * Transparent cached tables for Spark Connect clients: with {@code
 * spark.steward.cache.transparent=true} (the client's session conf, or the server's), a
 * client's {@code df.cache()} / {@code df.persist()} makes a spark-steward cached table of the
 * plan, which the session's later queries read, as classic PySpark's transparent caching does.
 *
 * <p>Spark still registers the plan in its cache manager (so {@code df.storageLevel} and {@code
 * unpersist()} answer as in plain Spark), and {@link SessionCaches} hands each entry the
 * session gained to {@link #cached}: the driver runtime makes the table ({@code tables.cache},
 * the thin client's own command) and the entry's plan is mapped to the table's marker. A
 * post-hoc resolution rule ({@code spark.sql.extensions}, which {@code spark-steward conf
 * --server} sets) puts the marker where a query of that session, run for a Connect operation,
 * has a fragment with the same result, before Spark's cache manager would put in its in-memory
 * relation: Spark's cache is not used, the table is. The table's own materialization (through
 * py4j, on the querying thread) is left alone; it computes the plan through Spark's entry, whose
 * in-memory blocks are dropped as soon as the table is ready ({@link #resolved}). The table materializes on first use
 * and falls back to the original plan whenever it is unusable, so results never change.
 *
 * <p>A mapping goes when its Spark entry goes ({@code unpersist()}, {@code clearCache()}, the
 * session's end): the rule checks that the entry is still in the cache manager, and the table's
 * files are invalidated.
 */
public final class TransparentCaches extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  static final String KEY = "spark.steward.cache.transparent";
  private static final String CONNECT_TAG = "SparkConnect_OperationTag_";
  private static final Pattern TABLE_ID = Pattern.compile("\"table_id\":\"([0-9a-f]{1,64})\"");
  private static final Logger LOG = LoggerFactory.getLogger(TransparentCaches.class);

  /** The tables of each Spark session (by its session id), in the order they were cached. */
  private static final Map<String, List<Table>> BY_SESSION = new ConcurrentHashMap<>();

  /** One transparently cached plan: Spark's entry, the table's id and marker plan. */
  private static final class Table {
    final String connectSession;
    final String userId;
    final CachedData entry;
    final LogicalPlan marker;
    final String tableId;

    Table(String connectSession, String userId, CachedData entry, LogicalPlan marker,
        String tableId) {
      this.connectSession = connectSession;
      this.userId = userId;
      this.entry = entry;
      this.marker = marker;
      this.tableId = tableId;
    }
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    CachedTables.onResolved(TransparentCaches::resolved);
    extensions.injectPostHocResolutionRule(
        new AbstractFunction1<org.apache.spark.sql.SparkSession, Rule<LogicalPlan>>() {
          @Override
          public Rule<LogicalPlan> apply(org.apache.spark.sql.SparkSession session) {
            return new Substitute((SparkSession) session);
          }
        });
    return BoxedUnit.UNIT;
  }

  /** Whether transparent caching is on for {@code session} (its conf, else the server's). */
  static boolean on(SparkSession session) {
    String fallback = session.sparkContext().conf().get(KEY, "false");
    return "true".equalsIgnoreCase(session.conf().get(KEY, fallback).trim());
  }

  /**
   * Connect session {@code sessionId} persisted: each entry it gained becomes a cached table of
   * its own when transparent caching is on for it. A failure leaves the entry Spark's.
   */
  static void cached(String userId, String sessionId, List<CachedData> gained) {
    SessionHolder holder = SessionCaches.holder(userId, sessionId);
    ConnectCommands handler = ConnectCommands.Registry.current();
    if (holder == null || handler == null || !on(holder.session())) {
      return;
    }
    SparkSession session = holder.session();
    for (CachedData entry : gained) {
      try {
        Dataset<Row> df = org.apache.spark.sql.classic.Dataset.ofRows(session, entry.plan());
        Map<String, Object> out = new HashMap<>();
        String reply = handler.handle(sessionId, userId, "{\"op\":\"tables.cache\"}", session, df,
            null, out);
        Matcher id = TABLE_ID.matcher(reply);
        Object marker = out.get("dataframe");
        if (!id.find() || !(marker instanceof Dataset)) {
          LOG.warn(Errors.PREFIX + "Connect session {}'s cache() stays Spark's: {}", sessionId,
              reply.length() > 500 ? reply.substring(0, 500) : reply);
          continue;
        }
        LogicalPlan markerPlan = ((Dataset<?>) marker).queryExecution().analyzed();
        BY_SESSION.computeIfAbsent(session.sessionUUID(), k -> new CopyOnWriteArrayList<>())
            .add(new Table(sessionId, userId, entry, markerPlan, id.group(1)));
        LOG.info(Errors.PREFIX + "Connect session {}'s cache() reads cached table {}", sessionId,
            id.group(1));
      } catch (RuntimeException e) {
        LOG.warn(Errors.PREFIX + "Connect session {}'s cache() stays Spark's: {}", sessionId,
            e.toString());
      }
    }
  }

  /** Connect session {@code sessionId} ended: its mappings go (its tables go with it). */
  static void release(String sessionId) {
    for (List<Table> tables : BY_SESSION.values()) {
      tables.removeIf(t -> t.connectSession.equals(sessionId));
    }
    BY_SESSION.values().removeIf(List::isEmpty);
  }

  /** The mappings whose Spark entry is gone, dropped; their tables' files invalidated. */
  static void dropGone(Set<CachedData> present) {
    List<Table> gone = new ArrayList<>();
    for (List<Table> tables : BY_SESSION.values()) {
      for (Table t : tables) {
        if (!present.contains(t.entry) && tables.remove(t)) {
          gone.add(t);
        }
      }
    }
    ConnectCommands handler = ConnectCommands.Registry.current();
    for (Table t : gone) {
      if (handler == null) {
        break;  // the table goes with its session, or at the application's end
      }
      try {
        handler.handle(t.connectSession, t.userId, "{\"op\":\"tables.invalidate\",\"args\":"
            + "{\"table_id\":\"" + t.tableId + "\"}}", SessionCaches.rootSession(), null, null,
            new HashMap<>());
      } catch (RuntimeException e) {
        LOG.warn(Errors.PREFIX + "could not invalidate cached table {} of Connect session {}: {}",
            t.tableId, t.connectSession, e.toString());
      }
    }
  }

  /**
   * Table {@code tableId} was resolved (materialized, or found ready): the in-memory cache its
   * materialization filled through Spark's entry is dropped (the entry stays registered).
   */
  static void resolved(String tableId) {
    for (List<Table> tables : BY_SESSION.values()) {
      for (Table t : tables) {
        if (t.tableId.equals(tableId)
            && t.entry.cachedRepresentation().cacheBuilder().isCachedColumnBuffersLoaded()) {
          t.entry.cachedRepresentation().cacheBuilder().clearCache(false);
        }
      }
    }
  }

  /** Whether any table is mapped (the rule costs nothing otherwise). */
  static boolean any() {
    return !BY_SESSION.isEmpty();
  }

  /** Puts the session's tables' markers where a Connect operation's query computes their plans. */
  static final class Substitute extends Rule<LogicalPlan> {
    private final SparkSession session;

    Substitute(SparkSession session) {
      this.session = session;
    }

    @Override
    public String ruleName() {
      return "io.sparksteward.shim.connect.TransparentCaches";
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      List<Table> tables = BY_SESSION.get(session.sessionUUID());
      if (tables == null || tables.isEmpty() || !forConnectOperation()
          || CachedTables.resolving()) {
        // Not a query Connect runs (storageLevel, schema, explain: Spark's answers stand), or
        // the table's own materialization, which computes the original plan.
        return plan;
      }
      Set<CachedData> present = SessionCaches.entries();
      List<Table> live = new ArrayList<>();
      for (Table t : tables) {
        if (present.contains(t.entry)) {
          live.add(t);
        }
      }
      if (live.size() < tables.size()) {
        dropGone(present);
      }
      if (live.isEmpty()) {
        return plan;
      }
      return plan.transformDown(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
        @Override
        public boolean isDefinedAt(LogicalPlan p) {
          return match(live, p) != null;
        }

        @Override
        public LogicalPlan apply(LogicalPlan p) {
          return read(match(live, p), p);
        }
      });
    }

    /** Whether this thread runs a Connect operation (Connect tags the jobs it runs). */
    private boolean forConnectOperation() {
      String tags = session.sparkContext().getLocalProperty("spark.job.tags");
      return tags != null && tags.contains(CONNECT_TAG);
    }

    private static Table match(List<Table> tables, LogicalPlan p) {
      for (Table t : tables) {
        if (p.sameResult(t.entry.plan())) {
          return t;
        }
      }
      return null;
    }

    /** The table's marker (fresh attributes) under {@code p}'s output attributes. */
    private static LogicalPlan read(Table t, LogicalPlan p) {
      LogicalPlan marker = t.marker instanceof MultiInstanceRelation
          ? ((MultiInstanceRelation) t.marker).newInstance() : t.marker;
      List<Attribute> produced = SparkCompat.output(marker);
      List<Attribute> wanted = SparkCompat.output(p);
      List<NamedExpression> aliases = new ArrayList<>();
      for (int i = 0; i < wanted.size(); i++) {
        aliases.add(SparkCompat.alias(produced.get(i), wanted.get(i)));
      }
      return SparkCompat.project(aliases, marker);
    }
  }
}
