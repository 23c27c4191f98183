package io.sparksteward.shim.kernel;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UnsupportedEncodingException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;

/**
 * The {@code spark.steward.*} values this JVM acts on, exactly as the driver's Python resolved
 * them ({@code spark_steward.kernel.handover}): Python owns every key's grammar, default and
 * bounds; the shim only decodes the one record Python wrote into the context's conf under
 * {@link #KEY}, in canonical forms ({@code true}/{@code false}, decimal integers, milliseconds,
 * bytes, resolved paths). It never reads a {@code spark.steward.*} key itself, with one
 * exception: a session's own switches ({@link #sessionSwitch}), which a user may set in the JVM
 * (SQL {@code SET}) after Python resolved the context.
 *
 * <p>A driver started without spark-steward's Python beside it (a JVM-launched driver, or {@code
 * SPARK_STEWARD_AUTOLOAD=0}) has no record: {@link #forDriver} then asks Python for it in a
 * subprocess ({@code python -m spark_steward.kernel.handover}), so the resolution still has one
 * owner. With no {@code spark.steward.*} key at all, nothing is asked and the shim stays off.
 */
public final class Handover {
  /** {@code config.RESOLVED_KEY}. */
  public static final String KEY = "spark.steward.resolved";
  /** {@code handover.VERSION}: a record of another version is refused. */
  public static final int VERSION = 1;
  /** {@code handover.EXIT_CONFIG_ERROR}: Python refused a value; its one line says which. */
  static final int EXIT_CONFIG_ERROR = 2;
  /** {@code config.PREFIX}: every key of spark-steward's starts with it. */
  static final String PREFIX = "spark.steward.";
  /** {@code config.ENABLED}: a session switch ({@link #sessionSwitch}). */
  public static final String ENABLED_KEY = "spark.steward.enabled";
  static final long RESOLVE_TIMEOUT_SECONDS = 60;
  private static final Logger LOG = LoggerFactory.getLogger(Handover.class);

  /** The kernel's handover fields ({@code handover.KERNEL_VALUES}). */
  static final String ENABLED_FIELD = "enabled";
  static final String LOCAL_DIR_FIELD = "local_dir";
  static final String EVENTS_BUFFER_CAPACITY_FIELD = "events_buffer_capacity";

  /** spark-steward off at context start: the shim does nothing. */
  public static final Handover OFF = new Handover(false, new HashMap<String, String>(), "");

  /** The kernel's own fields; a capability reads its own with {@link #flag} and {@link #number}. */
  public final boolean enabled;
  public final String localDir;
  public final int eventsBufferCapacity;
  private final Map<String, String> fields;
  private final String raw;

  private Handover(boolean enabled, Map<String, String> fields, String raw) {
    this.fields = fields;
    this.raw = raw;
    this.enabled = enabled;
    this.localDir = enabled ? text(LOCAL_DIR_FIELD) : null;
    this.eventsBufferCapacity = enabled ? (int) number(EVENTS_BUFFER_CAPACITY_FIELD) : 0;
  }

  /**
   * The record Python encoded; IllegalArgumentException when it is malformed or of another
   * version (a shim jar and a Python package of different releases).
   */
  public static Handover decode(String raw) {
    Map<String, String> fields = new HashMap<>();
    for (String part : raw.split("&")) {
      int eq = part.indexOf('=');
      if (eq < 0) {
        throw malformed(raw, "a field without '='");
      }
      fields.put(part.substring(0, eq), percentDecoded(raw, part.substring(eq + 1)));
    }
    if (!String.valueOf(VERSION).equals(fields.get("v"))) {
      throw malformed(raw, "not version " + VERSION + " (the shim jar and the spark_steward "
          + "package are of different releases)");
    }
    Handover off = new Handover(false, fields, raw);
    return off.flag(ENABLED_FIELD) ? new Handover(true, fields, raw) : OFF;
  }

  /** The text of field {@code name}; IllegalArgumentException when the record lacks it. */
  public String text(String name) {
    String value = fields.get(name);
    if (value == null) {
      throw malformed(raw, "no field " + name);
    }
    return value;
  }

  /** Boolean field {@code name}: {@code true} or {@code false}, nothing else. */
  public boolean flag(String name) {
    String value = text(name);
    if (!value.equals("true") && !value.equals("false")) {
      throw malformed(raw, name + " is not true or false");
    }
    return value.equals("true");
  }

  /** Whole-number field {@code name} (milliseconds, bytes, counts). */
  public long number(String name) {
    try {
      return Long.parseLong(text(name));
    } catch (NumberFormatException e) {
      throw malformed(raw, name + " is not a whole number");
    }
  }

  private static String percentDecoded(String raw, String value) {
    try {
      return URLDecoder.decode(value.replace("+", "%2B"), "UTF-8");
    } catch (UnsupportedEncodingException | IllegalArgumentException e) {
      throw malformed(raw, "bad percent-encoding");
    }
  }

  private static IllegalArgumentException malformed(String raw, String why) {
    return new IllegalArgumentException(Errors.PREFIX + KEY + " is not a handover record ("
        + why + "): '" + (raw.length() > 120 ? raw.substring(0, 120) + "..." : raw) + "'");
  }

  /** The record of an executor: what the driver plugin handed over, else off. */
  public static Handover forExecutor(Map<String, String> extraConf) {
    String raw = extraConf.get(KEY);
    return raw == null ? OFF : decode(raw);
  }

  /**
   * The record of the driver of {@code conf}: Python's, written as the context started, or,
   * when no Python of ours ran there, the one {@link #resolveWithPython} gets (then written into
   * {@code conf} for the sessions and executors). A value Python refuses throws
   * IllegalArgumentException with Python's one line (the context does not start, as with
   * Python's ConfigError); Python missing or failing leaves the shim off with one WARN line.
   */
  public static Handover forDriver(SparkConf conf) {
    if (conf.contains(KEY)) {
      return decode(conf.get(KEY));
    }
    List<String[]> pairs = new ArrayList<>();
    for (Tuple2<String, String> pair : conf.getAll()) {
      if (pair._1().startsWith(PREFIX)) {
        pairs.add(new String[] {pair._1(), pair._2()});
      }
    }
    if (pairs.isEmpty()) {
      return OFF;
    }
    String raw;
    try {
      raw = resolveWithPython(pythonOf(conf), pairs);
    } catch (IOException e) {
      LOG.warn(Errors.PREFIX + "{} keys are set but no spark-steward Python resolved them for "
          + "this driver ({}); the shim stays off. Start the application from PySpark with the "
          + "spark-steward package installed, or set spark.pyspark.driver.python to a Python "
          + "that has it", PREFIX + "*", e.getMessage());
      return OFF;
    }
    conf.set(KEY, raw);
    return decode(raw);
  }

  /** The Python the driver's PySpark would run: Spark's own order of keys and variables. */
  public static String pythonOf(SparkConf conf) {
    for (String key : new String[] {"spark.pyspark.driver.python", "spark.pyspark.python"}) {
      if (conf.contains(key) && !conf.get(key).trim().isEmpty()) {
        return conf.get(key).trim();
      }
    }
    for (String name : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
      String value = System.getenv(name);
      if (value != null && !value.trim().isEmpty()) {
        return value.trim();
      }
    }
    return "python3";
  }

  /**
   * Runs {@code python -m spark_steward.kernel.handover} on {@code pairs}; the encoded record.
   * IOException when that Python cannot answer; IllegalArgumentException with Python's line
   * when it refuses a value.
   */
  public static String resolveWithPython(String python, List<String[]> pairs) throws IOException {
    ProcessBuilder builder = new ProcessBuilder(python, "-m", "spark_steward.kernel.handover");
    builder.environment().put("SPARK_STEWARD_AUTOLOAD", "0");
    Process process;
    try {
      process = builder.start();
    } catch (IOException e) {
      throw new IOException(python + " cannot be started: " + e.getMessage(), e);
    }
    try (OutputStream in = process.getOutputStream()) {
      in.write(json(pairs).getBytes(StandardCharsets.UTF_8));
    }
    // Both streams are small (one line each); read them after the exit.
    try {
      if (!process.waitFor(RESOLVE_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new IOException(python + " did not answer within " + RESOLVE_TIMEOUT_SECONDS + " s");
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while " + python + " resolved the conf", e);
    }
    String out = read(process.getInputStream()).trim();
    String err = read(process.getErrorStream()).trim();
    String lastLine = err.isEmpty() ? "" : err.substring(err.lastIndexOf('\n') + 1);
    if (process.exitValue() == EXIT_CONFIG_ERROR) {
      throw new IllegalArgumentException(lastLine);
    }
    if (process.exitValue() != 0) {
      throw new IOException(python + " -m spark_steward.kernel.handover exited "
          + process.exitValue() + (lastLine.isEmpty() ? "" : ": " + lastLine));
    }
    return out;
  }

  private static String read(InputStream stream) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    byte[] chunk = new byte[8192];
    for (int n; (n = stream.read(chunk)) >= 0; ) {
      bytes.write(chunk, 0, n);
    }
    return new String(bytes.toByteArray(), StandardCharsets.UTF_8);
  }

  /** {@code [[key, value], ...]} as JSON, strings quoted as the events are. */
  static String json(List<String[]> pairs) {
    StringBuilder out = new StringBuilder("[");
    for (String[] pair : pairs) {
      out.append(out.length() == 1 ? "[" : ",[");
      EventEncoder.quote(out, pair[0]);
      out.append(',');
      EventEncoder.quote(out, pair[1]);
      out.append(']');
    }
    return out.append(']').toString();
  }

  /**
   * A session's switch ({@code spark.steward.enabled}, {@code spark.steward.streams.enabled}) as
   * that session's conf has it ({@code raw}, null when unset there: {@code resolved}, the
   * context's). The one place the shim reads a key's text: a session's conf is set in the JVM,
   * after Python resolved the context. The grammar is Python's {@code config._parse_bool}
   * ({@code true}/{@code false}, any case, blanks around ignored; the twin suite holds them
   * equal); anything else throws IllegalArgumentException naming the key and value, as Python's
   * ConfigError does for the same session.
   */
  public static boolean sessionSwitch(String key, String raw, boolean resolved) {
    if (raw == null) {
      return resolved;
    }
    String value = pythonStrip(raw);
    if (asciiEqualsIgnoreCase(value, "true")) {
      return true;
    }
    if (asciiEqualsIgnoreCase(value, "false")) {
      return false;
    }
    throw new IllegalArgumentException(
        Errors.PREFIX + key + "='" + raw + "' is not valid: expected true or false");
  }

  /** Python's {@code str.strip()}: the characters {@code str.isspace()} holds, both ends. */
  static String pythonStrip(String s) {
    int start = 0;
    int end = s.length();
    while (start < end && pythonSpace(s.charAt(start))) {
      start++;
    }
    while (end > start && pythonSpace(s.charAt(end - 1))) {
      end--;
    }
    return s.substring(start, end);
  }

  private static boolean pythonSpace(char c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0
        || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029
        || c == 0x202f || c == 0x205f || c == 0x3000;
  }

  /**
   * Python's {@code s.lower() == word} for an ASCII {@code word}: no character outside ASCII
   * lowers to one of its letters, while Java's equalsIgnoreCase takes {@code ſ} (U+017F) for
   * {@code s}.
   */
  private static boolean asciiEqualsIgnoreCase(String s, String word) {
    if (s.length() != word.length()) {
      return false;
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c > 0x7f || Character.toLowerCase(c) != word.charAt(i)) {
        return false;
      }
    }
    return true;
  }
}
