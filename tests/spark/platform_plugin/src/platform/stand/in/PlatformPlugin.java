package platform.stand.in;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Collections;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * A platform's own plugin (a stand-in for RAPIDS, Gluten or a vendor's): each side leaves a
 * file in {@code spark.platform.marker.dir}, so a test sees that it loaded next to
 * spark-steward's.
 */
public final class PlatformPlugin implements SparkPlugin {

  static void mark(String dir, String name) {
    if (dir == null) {
      return;
    }
    try {
      Files.write(new File(dir, name).toPath(), new byte[0]);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public DriverPlugin driverPlugin() {
    return new DriverPlugin() {
      @Override
      public Map<String, String> init(SparkContext sc, PluginContext ctx) {
        mark(sc.conf().get("spark.platform.marker.dir", null), "driver");
        return Collections.emptyMap();
      }
    };
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void init(PluginContext ctx, Map<String, String> extraConf) {
        mark(ctx.conf().get("spark.platform.marker.dir", null), "executor-" + ctx.executorID());
      }
    };
  }
}
