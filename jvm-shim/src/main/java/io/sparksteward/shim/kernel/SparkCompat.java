package io.sparksteward.shim.kernel;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.storage.RDDInfo;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.ExperimentalMethods;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.PythonFuncExpression;
import org.apache.spark.sql.catalyst.plans.QueryPlan;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNode;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

import scala.Option;

/**
 * Every difference between the Spark lines the shim runs on, in one place: the jar is compiled
 * once (against Spark 4.3, Scala 2.13) and loads on Spark 3.5 (Scala 2.12) and 4.0 to 4.3.
 *
 * <p>Why the reflection: a Scala member taking or returning a {@code Seq} has
 * {@code scala.collection.Seq} in its JVM descriptor under 2.12 and
 * {@code scala.collection.immutable.Seq} under 2.13, so such a call compiled against one line
 * throws NoSuchMethodError on the other; some Catalyst constructors and helpers changed their
 * parameters between lines; the concrete SparkSession and Dataset moved to
 * {@code org.apache.spark.sql.classic} in 4.0. The other classes of the shim therefore name only
 * {@code org.apache.spark.sql.SparkSession} and {@code Dataset} (4.x's API classes declare the
 * {@code sessionState}, {@code experimental} and {@code queryExecution} they use), build and read
 * Scala collections through {@link #seq} and {@link #list} (whose Scala members have the same
 * descriptors under both Scala versions), and call here for the rest. Members are looked up once,
 * by name and parameter count (unique on every line; jvm-shim/check_lines.py checks they are
 * found); one a line lacks fails its feature with an UnsupportedOperationException naming the
 * feature and the Spark version.
 *
 * <p>The shim is compiled for Java 8 (Spark 3.5 runs on Java 8, 11 and 17), so the process uid,
 * outside the API javac offers for Java 8, is read through {@link #processUid} (and the JDK's
 * CRC-32C through {@link Checksums#crc32c}).
 *
 * <p>Public: every capability of the shim reaches Spark through it.
 */
public final class SparkCompat {
  private static final String SQL = "org.apache.spark.sql.";
  private static final String CLASSIC = "org.apache.spark.sql.classic.";

  private SparkCompat() {}

  /** The version of the Spark the shim runs in, e.g. "3.5.9". */
  public static String sparkVersion() {
    return org.apache.spark.package$.MODULE$.SPARK_VERSION();
  }

  // -- Scala collections -------------------------------------------------------------------------

  /** The elements of any Scala collection, in order. */
  @SuppressWarnings("unchecked")
  public static <T> List<T> list(Object scalaIterable) {
    List<T> out = new ArrayList<>();
    scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) scalaIterable).iterator();
    while (it.hasNext()) {
      out.add((T) it.next());
    }
    return out;
  }

  /** An immutable Scala List, which is the Seq either Scala version's Spark asks for. */
  @SuppressWarnings("unchecked")
  public static <T> scala.collection.immutable.List<T> seq(List<? extends T> items) {
    scala.collection.immutable.List<T> out =
        (scala.collection.immutable.List<T>) (Object) scala.collection.immutable.Nil$.MODULE$;
    for (int i = items.size() - 1; i >= 0; i--) {
      out = out.$colon$colon(items.get(i));
    }
    return out;
  }

  // -- plans -------------------------------------------------------------------------------------

  private static final class Plans {
    static final MethodHandle OUTPUT = method(QueryPlan.class, "output", 0);
    static final MethodHandle EXPRESSIONS = method(QueryPlan.class, "expressions", 0);
    static final MethodHandle CHILDREN = method(TreeNode.class, "children", 0);
    static final MethodHandle LOCAL_DATA = method(LocalRelation.class, "data", 0);
    static final MethodHandle COMMAND = method(PythonFunction.class, "command", 0);
    static final MethodHandle ALIAS = constructor(Alias.class, 6);
    static final MethodHandle PROJECT = constructor(Project.class, 2);
    /** (relation, output, catalogTable, isStreaming) on 3.5; 4.x adds the stream. */
    static final MethodHandle LOGICAL_RELATION = firstNonNull(
        constructor(LogicalRelation.class, 5), constructor(LogicalRelation.class, 4));
    /** (schema, keep metadata as is) on 4.3; (schema) on 3.5 and 4.0. */
    static final MethodHandle V2_COLUMNS = firstNonNull(
        method(CatalogV2Util.class, "structTypeToV2Columns", 2),
        method(CatalogV2Util.class, "structTypeToV2Columns", 1));
  }

  public static List<Attribute> output(LogicalPlan plan) {
    return list(call(Plans.OUTPUT, "plan output", plan));
  }

  public static List<LogicalPlan> children(LogicalPlan plan) {
    return list(call(Plans.CHILDREN, "plan children", plan));
  }

  public static List<Expression> children(Expression expression) {
    return list(call(Plans.CHILDREN, "expression children", expression));
  }

  public static List<Expression> expressions(LogicalPlan plan) {
    return list(call(Plans.EXPRESSIONS, "plan expressions", plan));
  }

  public static List<InternalRow> localRows(LocalRelation relation) {
    return list(call(Plans.LOCAL_DATA, "local relation rows", relation));
  }

  /** The pickled bytes of a Python function expression. */
  public static List<Byte> pythonCommand(PythonFuncExpression expression) {
    return list(call(Plans.COMMAND, "Python function bytes", expression.func()));
  }

  /** {@code child AS name} keeping the expression id {@code exprId} of {@code wanted}. */
  public static NamedExpression alias(Expression child, Attribute wanted) {
    scala.collection.immutable.List<String> none = seq(new ArrayList<String>());
    return (NamedExpression) call(Plans.ALIAS, "Alias", child, wanted.name(), wanted.exprId(),
        none, Option.empty(), none);
  }

  public static LogicalPlan project(List<NamedExpression> projections, LogicalPlan child) {
    return (LogicalPlan) call(Plans.PROJECT, "Project", seq(projections), child);
  }

  /** A batch LogicalRelation of {@code template}'s relation and table with {@code output}. */
  public static LogicalPlan logicalRelation(LogicalRelation template, List<AttributeReference> output) {
    MethodHandle made = need(Plans.LOGICAL_RELATION, "LogicalRelation");
    return made.type().parameterCount() == 5
        ? (LogicalPlan) call(made, "LogicalRelation", template.relation(), seq(output),
            template.catalogTable(), false, Option.empty())
        : (LogicalPlan) call(made, "LogicalRelation", template.relation(), seq(output),
            template.catalogTable(), false);
  }

  /** A DSv2 table's columns for {@code schema}, as 4.3 makes them (metadata left in place). */
  public static Column[] v2Columns(StructType schema) {
    MethodHandle made = need(Plans.V2_COLUMNS, "DSv2 columns");
    return made.type().parameterCount() == 2
        ? (Column[]) call(made, "DSv2 columns", schema, false)
        : (Column[]) call(made, "DSv2 columns", schema);
  }

  // -- sessions and datasets ---------------------------------------------------------------------

  private static final class Sessions {
    static final Class<?> SESSION = sqlClass("SparkSession");
    static final MethodHandle INTERNAL_CREATE =
        method(SESSION, "internalCreateDataFrame", 3);
    static final MethodHandle OF_ROWS = moduleMethod(sqlClass("Dataset").getName(), "ofRows", 2);
    static final MethodHandle EXTRA_OPTIMIZATIONS =
        method(ExperimentalMethods.class, "extraOptimizations", 0);
    static final MethodHandle SET_EXTRA_OPTIMIZATIONS =
        method(ExperimentalMethods.class, "extraOptimizations_$eq", 1);
  }

  /** A DataFrame over {@code plan} (analyzed now, as {@code Dataset.ofRows} does). */
  @SuppressWarnings("unchecked")
  public static Dataset<Row> ofRows(SparkSession session, LogicalPlan plan) {
    return (Dataset<Row>) call(Sessions.OF_ROWS, "DataFrame of a plan", session, plan);
  }

  /** A DataFrame over internal rows of {@code schema} (no conversion of the rows). */
  @SuppressWarnings("unchecked")
  public static Dataset<Row> internalCreateDataFrame(SparkSession session, RDD<InternalRow> rows,
      StructType schema) {
    return (Dataset<Row>) call(Sessions.INTERNAL_CREATE, "DataFrame of internal rows", session,
        rows, schema, false);
  }

  public static List<Rule<LogicalPlan>> extraOptimizations(ExperimentalMethods experimental) {
    return list(call(Sessions.EXTRA_OPTIMIZATIONS, "extra optimizer rules", experimental));
  }

  public static void setExtraOptimizations(ExperimentalMethods experimental,
      List<Rule<LogicalPlan>> rules) {
    call(Sessions.SET_EXTRA_OPTIMIZATIONS, "extra optimizer rules", experimental, seq(rules));
  }

  // -- other Spark members -----------------------------------------------------------------------

  private static final class Others {
    static final MethodHandle STAGE_IDS = method(SparkListenerJobStart.class, "stageIds", 0);
    static final MethodHandle STAGE_INFOS = method(SparkListenerJobStart.class, "stageInfos", 0);
    static final MethodHandle RDD_INFOS = method(StageInfo.class, "rddInfos", 0);
    /** (schema, timeZone, errorOnDuplicatedFieldNames, largeVarTypes[, 4.3's third flag]). */
    static final MethodHandle ARROW_SCHEMA = firstNonNull(
        method(ArrowUtils.class, "toArrowSchema", 5), method(ArrowUtils.class, "toArrowSchema", 4));
  }

  public static List<Integer> stageIds(SparkListenerJobStart event) {
    return list(call(Others.STAGE_IDS, "job stage ids", event));
  }

  /** The ids of every RDD in the job's stages, each once, the first {@code max} of them. */
  public static List<Integer> rddIds(SparkListenerJobStart event, int max) {
    java.util.LinkedHashSet<Integer> ids = new java.util.LinkedHashSet<>();
    for (Object stage : list(call(Others.STAGE_INFOS, "job stage infos", event))) {
      for (Object rdd : list(call(Others.RDD_INFOS, "stage RDD infos", stage))) {
        if (ids.size() >= max) {
          return new ArrayList<>(ids);
        }
        ids.add(((RDDInfo) rdd).id());
      }
    }
    return new ArrayList<>(ids);
  }

  // -- an executor's own state -------------------------------------------------------------------

  /**
   * Private fields of Spark's executor, read through getters of their declared fields: listing
   * the methods of these classes loads classes an executor lacks (protobuf's).
   */
  private static final class Executors {
    static final MethodHandle ENV_BACKEND = getter(org.apache.spark.SparkEnv.class,
        "executorBackend");
    static final MethodHandle BACKEND_EXECUTOR = getter(
        org.apache.spark.executor.CoarseGrainedExecutorBackend.class, "executor");
    static final MethodHandle SESSION_CACHE = getter(org.apache.spark.executor.Executor.class,
        "isolatedSessionCache");
  }

  /**
   * This executor's cache of isolated sessions (Spark's Guava cache of {@code
   * IsolatedSessionState} by Spark session id), or null where there is none (local mode, a
   * backend of another kind).
   */
  public static Object isolatedSessions(org.apache.spark.SparkEnv env) {
    Object backend = call(need(Executors.ENV_BACKEND, "executor backend"),
        "executor backend", env);
    if (!(backend instanceof Option) || ((Option<?>) backend).isEmpty()
        || !(((Option<?>) backend).get()
            instanceof org.apache.spark.executor.CoarseGrainedExecutorBackend)) {
      return null;
    }
    Object executor = call(need(Executors.BACKEND_EXECUTOR, "executor of a backend"),
        "executor of a backend", ((Option<?>) backend).get());
    return executor == null ? null
        : call(need(Executors.SESSION_CACHE, "isolated sessions"), "isolated sessions",
            executor);
  }

  /** Spark's Arrow schema for {@code schema}: duplicate names fail, no large variable types. */
  public static Schema arrowSchema(StructType schema, String timeZone) {
    MethodHandle made = need(Others.ARROW_SCHEMA, "Arrow schema");
    return made.type().parameterCount() == 5
        ? (Schema) call(made, "Arrow schema", schema, timeZone, true, false, false)
        : (Schema) call(made, "Arrow schema", schema, timeZone, true, false);
  }

  // -- executors --------------------------------------------------------------------------------

  /**
   * This executor's host. {@code PluginContext.hostname()} reads the executor RpcEnv's server
   * address, which a client-only executor RpcEnv (Spark 4) lacks: then the block manager's host,
   * then the JVM's own name for its host.
   */
  public static String hostname(PluginContext ctx) {
    try {
      return ctx.hostname();
    } catch (RuntimeException e) {
      // Below.
    }
    try {
      return org.apache.spark.SparkEnv.get().blockManager().blockManagerId().host();
    } catch (RuntimeException e) {
      // Below.
    }
    try {
      return java.net.InetAddress.getLocalHost().getHostName();
    } catch (java.io.IOException | RuntimeException e) {
      return "an unknown host";
    }
  }

  // -- Java 8 ------------------------------------------------------------------------------------

  /**
   * The uid of this process, as Python's {@code os.getuid()}. The JDK class that knows it is
   * outside the API javac offers for Java 8, though every JDK on Unix has it.
   */
  public static long processUid() {
    try {
      Class<?> unix = Class.forName("com.sun.security.auth.module.UnixSystem");
      return (Long) unix.getMethod("getUid").invoke(unix.getConstructor().newInstance());
    } catch (ReflectiveOperationException e) {
      throw Errors.illegalState("cannot read this process's uid "
          + "(com.sun.security.auth.module.UnixSystem): " + e, e);
    }
  }

  /**
   * What this Spark lacks of the members above, as "feature (member)": empty on every supported
   * line. For jvm-shim/check_lines.py, which cannot see reflective calls in the class files.
   */
  public static List<String> missingMembers() {
    Object[] named = {
        "plan output", Plans.OUTPUT, "plan expressions", Plans.EXPRESSIONS,
        "children", Plans.CHILDREN, "local relation rows", Plans.LOCAL_DATA,
        "Python function bytes", Plans.COMMAND, "Alias", Plans.ALIAS, "Project", Plans.PROJECT,
        "LogicalRelation", Plans.LOGICAL_RELATION, "DSv2 columns", Plans.V2_COLUMNS,
        "DataFrame of internal rows", Sessions.INTERNAL_CREATE,
        "DataFrame of a plan", Sessions.OF_ROWS,
        "extra optimizer rules", Sessions.EXTRA_OPTIMIZATIONS,
        "extra optimizer rules (set)", Sessions.SET_EXTRA_OPTIMIZATIONS,
        "job stage ids", Others.STAGE_IDS, "Arrow schema", Others.ARROW_SCHEMA,
        "job stage infos", Others.STAGE_INFOS, "stage RDD infos", Others.RDD_INFOS,
        "executor backend", Executors.ENV_BACKEND,
        "executor of a backend", Executors.BACKEND_EXECUTOR,
        "isolated sessions", Executors.SESSION_CACHE,
    };
    List<String> missing = new ArrayList<>();
    for (int i = 0; i < named.length; i += 2) {
      if (named[i + 1] == null) {
        missing.add((String) named[i]);
      }
    }
    return missing;
  }

  // -- lookup ------------------------------------------------------------------------------------

  /** {@code org.apache.spark.sql.classic.<name>} on 4.x, {@code org.apache.spark.sql.<name>} on 3.5. */
  private static Class<?> sqlClass(String name) {
    ClassLoader loader = SparkCompat.class.getClassLoader();
    try {
      return Class.forName(CLASSIC + name, false, loader);
    } catch (ClassNotFoundException e) {
      try {
        return Class.forName(SQL + name, false, loader);
      } catch (ClassNotFoundException missing) {
        throw Errors.illegalState("no " + name + " class in Spark " + sparkVersion(), missing);
      }
    }
  }

  /** The public method {@code name} with {@code arity} parameters (not a bridge), or null. */
  private static MethodHandle method(Class<?> owner, String name, int arity) {
    for (Method m : owner.getMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() == arity && !m.isBridge()) {
        try {
          return MethodHandles.publicLookup().unreflect(m);
        } catch (IllegalAccessException e) {
          return null;
        }
      }
    }
    return null;
  }

  /** A getter of field {@code name} {@code owner} declares (private ones too), or null. */
  private static MethodHandle getter(Class<?> owner, String name) {
    try {
      java.lang.reflect.Field field = owner.getDeclaredField(name);
      field.setAccessible(true);
      return MethodHandles.lookup().unreflectGetter(field);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /** The public constructor of {@code owner} with {@code arity} parameters, or null. */
  private static MethodHandle constructor(Class<?> owner, int arity) {
    for (Constructor<?> c : owner.getConstructors()) {
      if (c.getParameterCount() == arity) {
        try {
          return MethodHandles.publicLookup().unreflectConstructor(c);
        } catch (IllegalAccessException e) {
          return null;
        }
      }
    }
    return null;
  }

  /** Method {@code name} of Scala object {@code className}, bound to the object, or null. */
  private static MethodHandle moduleMethod(String className, String name, int arity) {
    try {
      Class<?> module = Class.forName(className + "$", true, SparkCompat.class.getClassLoader());
      MethodHandle found = method(module, name, arity);
      return found == null ? null : found.bindTo(module.getField("MODULE$").get(null));
    } catch (ReflectiveOperationException e) {
      return null;
    }
  }

  private static MethodHandle firstNonNull(MethodHandle first, MethodHandle second) {
    return first != null ? first : second;
  }

  private static MethodHandle need(MethodHandle handle, String feature) {
    if (handle == null) {
      throw Errors.unsupported(feature
          + " is not supported on Spark " + sparkVersion() + " (the member spark-steward "
          + "calls for it is missing)");
    }
    return handle;
  }

  /** Calls {@code handle}; what it throws is thrown unchanged. */
  private static Object call(MethodHandle handle, String feature, Object... args) {
    try {
      return need(handle, feature).invokeWithArguments(args);
    } catch (Throwable t) {
      throw Errors.sneaky(t);
    }
  }
}
