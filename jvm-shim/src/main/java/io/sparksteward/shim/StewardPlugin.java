package io.sparksteward.shim;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;

import io.sparksteward.shim.blob.ConnectArtifacts;
import io.sparksteward.shim.blob.PeerServer;
import io.sparksteward.shim.kernel.Errors;
import io.sparksteward.shim.kernel.EventBridge;
import io.sparksteward.shim.kernel.Handover;
import io.sparksteward.shim.kernel.RuntimeHost;
import io.sparksteward.shim.kernel.StewardMetrics;
import io.sparksteward.shim.kernel.TaskContextRelay;
import io.sparksteward.shim.local.AppEndDriver;
import io.sparksteward.shim.local.AppEndExecutor;
import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;
import org.slf4j.LoggerFactory;

/**
 * Entry point named in {@code spark.plugins} (users write this class's name in their conf, so it
 * stays at the root of the shim): with {@link PythonFacade}, the assembly layer that wires the
 * capabilities' JVM halves to Spark. Its driver side installs the {@link EventBridge}
 * while the SparkContext is still starting, so events that happen before the Python runtime
 * attaches are buffered (bounded) and delivered on attach. Both sides together remove the
 * application's host-local folder on every executor host when the application ends ({@link
 * AppEndDriver}, {@link AppEndExecutor}), and every executor serves the verified blob pieces its
 * host holds to the other hosts ({@link PeerServer}). With {@code spark.steward.enabled} not true
 * at context start, neither side does anything.
 */
public final class StewardPlugin implements SparkPlugin {
  /** Where a Connect server names spark-steward's command extension (kernel/jvm.py's twin). */
  static final String CONNECT_COMMANDS_KEY = "spark.connect.extensions.command.classes";
  static final String CONNECT_COMMANDS = "io.sparksteward.shim.connect.StewardCommands";
  /** Where a Connect server names spark-steward's interceptor (kernel/jvm.py's twin). */
  static final String CONNECT_INTERCEPTORS_KEY = "spark.connect.grpc.interceptor.classes";
  static final String CONNECT_INTERCEPTOR = "io.sparksteward.shim.connect.SessionCaches";

  @Override
  public DriverPlugin driverPlugin() {
    return new Driver();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new Executor();
  }

  /**
   * Acts on the values Python resolved ({@link Handover}): installs the bridge only when
   * spark-steward is on at context start; costs nothing otherwise.
   */
  static final class Driver implements DriverPlugin {
    private EventBridge bridge;
    private AppEndDriver appEnd;
    private StewardMetrics metrics;
    private RuntimeHost host;

    @Override
    public Map<String, String> init(SparkContext sc, PluginContext pluginContext) {
      // Our Python writes the record as it builds the context. Without it, a PySpark driver
      // (its autoload off) may still attach explicitly; only a driver no Python builds is
      // hosted.
      boolean driverPython = sc.conf().contains(Handover.KEY) || RuntimeHost.builtByPython();
      Handover handover = Handover.forDriver(sc.conf());
      if (!handover.enabled) {
        return Collections.emptyMap();
      }
      bridge = EventBridge.install(sc, handover.eventsBufferCapacity);
      appEnd = AppEndDriver.start(sc, handover.localDir);
      if (!driverPython) {
        host = RuntimeHost.start(sc, Handover.pythonOf(sc.conf()));
      }
      // Reaches the executors' init as their extra conf: the executor side acts only on it.
      Map<String, String> extra = new HashMap<>();
      extra.put(AppEndExecutor.ENABLED_KEY, "true");
      extra.put(Handover.KEY, sc.conf().get(Handover.KEY));
      if (sc.conf().get(CONNECT_COMMANDS_KEY, "").contains(CONNECT_COMMANDS)) {
        extra.put(TaskContextRelay.ENABLED_KEY, "true");  // Connect clients' UDFs
      }
      if (sc.conf().get(CONNECT_INTERCEPTORS_KEY, "").contains(CONNECT_INTERCEPTOR)) {
        extra.put(ConnectArtifacts.ENABLED_KEY, "true");  // ended sessions' artifact copies
      }
      return extra;
    }

    /** Spark calls this after {@code init} and registers the registry as the plugin's source. */
    @Override
    public void registerMetrics(String appId, PluginContext pluginContext) {
      if (bridge != null) {
        metrics = StewardMetrics.register(pluginContext.metricRegistry());
      }
    }

    @Override
    public Object receive(Object message) {
      Object relayed = TaskContextRelay.answer(message);
      if (relayed != null) {
        return relayed;
      }
      Object ended = ConnectArtifacts.answer(message);
      if (ended != null) {
        return ended;
      }
      return appEnd == null ? null : appEnd.receive(message);
    }

    @Override
    public void shutdown() {
      // First, while the bridge still holds the last events for the runtime to deliver.
      if (host != null) {
        host.stop(RuntimeHost.STOP_TIMEOUT_MILLIS);
      }
      // SparkContext.stop() has stopped the scheduler (and so told the executors to stop) by now.
      if (appEnd != null) {
        appEnd.shutdown();
      }
      if (bridge != null) {
        bridge.markStopped();
      }
      if (metrics != null) {
        StewardMetrics.unregister(metrics);
      }
    }
  }

  /** Active only when the driver side said so (spark-steward on); not in local mode's driver. */
  static final class Executor implements ExecutorPlugin {
    private AppEndExecutor appEnd;
    private PeerServer peers;
    private TaskContextRelay relay;
    private java.util.concurrent.ScheduledExecutorService artifacts;

    @Override
    public void init(PluginContext ctx, Map<String, String> extraConf) {
      // In local mode the executor is the driver, whose folder the Python side removes.
      if ("true".equals(extraConf.get(AppEndExecutor.ENABLED_KEY))
          && !"driver".equals(ctx.executorID())) {
        appEnd = AppEndExecutor.start(ctx);
        relay = TaskContextRelay.forExecutor(ctx, extraConf);
        artifacts = ConnectArtifacts.forExecutor(ctx, extraConf);
        try {
          peers = PeerServer.startFor(ctx, Handover.forExecutor(extraConf));
        } catch (RuntimeException | LinkageError e) {
          // startFor logs its own failures; this is a class missing from the executor's jars
          // or a handover record of another release.
          LoggerFactory.getLogger(PeerServer.class).warn(Errors.PREFIX + "executor {} does not "
              + "serve blob pieces to other hosts: {}", ctx.executorID(), e.toString());
        }
      }
    }

    @Override
    public void onTaskStart() {
      if (relay != null) {
        relay.onTaskStart();
      }
    }

    @Override
    public void shutdown() {
      // Before the app-end removal: that may remove the folder the server reads from.
      if (peers != null) {
        peers.stop();
      }
      if (artifacts != null) {
        artifacts.shutdownNow();
      }
      if (appEnd != null) {
        appEnd.shutdown();
      }
    }
  }
}
