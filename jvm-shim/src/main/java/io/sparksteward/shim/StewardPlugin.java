package io.sparksteward.shim;

import java.util.Collections;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * Entry point named in {@code spark.plugins}. Its driver side installs the {@link EventBridge}
 * while the SparkContext is still starting, so events that happen before the Python runtime
 * attaches are buffered (bounded) and delivered on attach. Nothing runs on executors.
 */
public final class StewardPlugin implements SparkPlugin {

  @Override
  public DriverPlugin driverPlugin() {
    return new Driver();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return null;
  }

  /** Installs the bridge only when {@code spark.steward.enabled=true}; costs nothing otherwise. */
  static final class Driver implements DriverPlugin {
    private EventBridge bridge;

    @Override
    public Map<String, String> init(SparkContext sc, PluginContext pluginContext) {
      if (sc.conf().getBoolean("spark.steward.enabled", false)) {
        bridge = EventBridge.install(sc);
      }
      return Collections.emptyMap();
    }

    @Override
    public void shutdown() {
      if (bridge != null) {
        bridge.markStopped();
      }
    }
  }
}
