package io.sparksteward.shim.kernel;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

import org.apache.spark.SparkEnv;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hands the driver runtime's executor context (the JSON of Python's {@code ExecutorContext}) to
 * tasks whose commands no Python of ours pickled: a Spark Connect client's UDFs, which carry no
 * spark-steward context of their own. Only on a Connect server with spark-steward's extensions
 * (the driver says so in the executors' extra conf, {@link #ENABLED_KEY}).
 *
 * <p>The runtime publishes the context into the driver JVM; each executor asks the driver plugin
 * for it at a task start (at most every {@link #ASK_EVERY_MILLIS} until it has one, then every
 * {@link #REFRESH_EVERY_MILLIS} naming the one it has, answered with nothing while that stays
 * current: a restarted runtime serves blobs on a new port with a new token) and writes it, owner-only, as {@link #FILE} in its first block-manager dir, which
 * Spark hands its Python workers as {@code SPARK_LOCAL_DIRS}. A Python worker reads it only for
 * a task of a Connect operation ({@code spark_steward.kernel.executor}).
 */
public final class TaskContextRelay {
  /** The key of the executors' extra conf (the plugin's own map, not a Spark conf). */
  public static final String ENABLED_KEY = "task-context-relay";
  public static final String FILE = "spark-steward-task-context.json";
  static final String ASK = "task-context?";
  static final long ASK_EVERY_MILLIS = 2000;
  static final long REFRESH_EVERY_MILLIS = 5000;
  private static final Logger LOG = LoggerFactory.getLogger(TaskContextRelay.class);
  private static volatile String published;

  private final PluginContext ctx;
  private String written;
  private long lastAsk;

  private TaskContextRelay(PluginContext ctx) {
    this.ctx = ctx;
  }

  // -- the driver ----------------------------------------------------------------------------

  /** The runtime's context for tasks (Python calls this through the facade at attach). */
  public static void publish(String json) {
    published = json;
  }

  /**
   * The driver plugin's answer to {@code message}, or null when it is not the relay's: the
   * context, or "" when none is published or the executor's (its hash after the ask) is it.
   */
  public static Object answer(Object message) {
    if (!(message instanceof String) || !((String) message).startsWith(ASK)) {
      return null;
    }
    String current = published;
    if (current == null || ((String) message).substring(ASK.length()).equals(hash(current))) {
      return "";
    }
    return current;
  }

  static String hash(String text) {
    try {
      byte[] digest = java.security.MessageDigest.getInstance("SHA-256")
          .digest(text.getBytes(StandardCharsets.UTF_8));
      StringBuilder out = new StringBuilder();
      for (int i = 0; i < 8; i++) {
        out.append(String.format("%02x", digest[i]));
      }
      return out.toString();
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);  // every JVM has SHA-256
    }
  }

  // -- an executor ---------------------------------------------------------------------------

  /** The relay of an executor whose driver enabled it, else null. */
  public static TaskContextRelay forExecutor(PluginContext ctx,
      java.util.Map<String, String> conf) {
    return "true".equals(conf.get(ENABLED_KEY)) ? new TaskContextRelay(ctx) : null;
  }

  /** At a task's start: fetches the context, and writes it when it is new or changed. */
  public synchronized void onTaskStart() {
    long now = System.currentTimeMillis();
    if (now - lastAsk < (written == null ? ASK_EVERY_MILLIS : REFRESH_EVERY_MILLIS)) {
      return;
    }
    lastAsk = now;
    try {
      Object answer = ctx.ask(written == null ? ASK : ASK + hash(written));
      if (answer instanceof String && !((String) answer).isEmpty()
          && !answer.equals(written)) {
        write((String) answer);
        written = (String) answer;
      }
    } catch (Exception e) {
      LOG.debug(Errors.PREFIX + "no task context from the driver yet", e);
    }
  }

  private static void write(String json) throws IOException {
    File dir = SparkEnv.get().blockManager().diskBlockManager().localDirs()[0];
    Path target = dir.toPath().resolve(FILE);
    Path tmp = Files.createTempFile(dir.toPath(), FILE, ".tmp", PrivateFiles.FILE_MODE);
    try {
      Files.write(tmp, json.getBytes(StandardCharsets.UTF_8));
      Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } finally {
      Files.deleteIfExists(tmp);
    }
  }
}
