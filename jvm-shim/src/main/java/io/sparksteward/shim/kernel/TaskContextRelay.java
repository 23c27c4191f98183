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
 * for it at a task start until it has it (at most every {@link #ASK_EVERY_MILLIS}), then writes
 * it, owner-only, as {@link #FILE} in its first block-manager dir, which Spark hands its Python
 * workers as {@code SPARK_LOCAL_DIRS}. A Python worker reads it only for a task of a Connect
 * operation ({@code spark_steward.kernel.executor}).
 */
public final class TaskContextRelay {
  /** The key of the executors' extra conf (the plugin's own map, not a Spark conf). */
  public static final String ENABLED_KEY = "task-context-relay";
  public static final String FILE = "spark-steward-task-context.json";
  static final String ASK = "task-context?";
  static final long ASK_EVERY_MILLIS = 2000;
  private static final Logger LOG = LoggerFactory.getLogger(TaskContextRelay.class);
  private static volatile String published;

  private final PluginContext ctx;
  private volatile boolean written;
  private long lastAsk;

  private TaskContextRelay(PluginContext ctx) {
    this.ctx = ctx;
  }

  // -- the driver ----------------------------------------------------------------------------

  /** The runtime's context for tasks (Python calls this through the facade at attach). */
  public static void publish(String json) {
    published = json;
  }

  /** The driver plugin's answer to {@code message}, or null when it is not the relay's. */
  public static Object answer(Object message) {
    if (!ASK.equals(message)) {
      return null;
    }
    String current = published;
    return current == null ? "" : current;
  }

  // -- an executor ---------------------------------------------------------------------------

  /** The relay of an executor whose driver enabled it, else null. */
  public static TaskContextRelay forExecutor(PluginContext ctx,
      java.util.Map<String, String> conf) {
    return "true".equals(conf.get(ENABLED_KEY)) ? new TaskContextRelay(ctx) : null;
  }

  /** At a task's start: fetches and writes the context once it is published. */
  public void onTaskStart() {
    if (written) {
      return;
    }
    synchronized (this) {
      long now = System.currentTimeMillis();
      if (written || now - lastAsk < ASK_EVERY_MILLIS) {
        return;
      }
      lastAsk = now;
      try {
        Object answer = ctx.ask(ASK);
        if (answer instanceof String && !((String) answer).isEmpty()) {
          write((String) answer);
          written = true;
        }
      } catch (Exception e) {
        LOG.debug(Errors.PREFIX + "no task context from the driver yet", e);
      }
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
