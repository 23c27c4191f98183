package io.sparksteward.testing;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * Test and benchmark stand-in for a flaky, observable checkpoint store (Spark 4.1+): wraps
 * Spark's default manager, counts every operation, logs every delete asked for, and fails
 * deletes while {@code <faults dir>/fail-deletes} holds a probability ("0.3"); with
 * {@code mode=false} in {@code <faults dir>/fail-mode} a failed delete returns normally and
 * leaves the file (a file system answering false), otherwise it throws IOException. The faults
 * dir is {@code spark.faulty-checkpoint-files.dir} of the Hadoop conf. Counts are written per JVM
 * to {@code ops-<pid>.txt} there once a second and at each delete.
 */
public final class FaultyCheckpointFiles implements CheckpointFileManager {
  static final String DIR_KEY = "spark.faulty-checkpoint-files.dir";
  static final AtomicLong CREATES = new AtomicLong();
  static final AtomicLong OPENS = new AtomicLong();
  static final AtomicLong LISTS = new AtomicLong();
  static final AtomicLong EXISTS = new AtomicLong();
  static final AtomicLong DELETES = new AtomicLong();
  static final AtomicLong MKDIRS = new AtomicLong();
  private static volatile Thread dumper;

  private final CheckpointFileManager delegate;
  private final String dir;

  public FaultyCheckpointFiles(Path path, Configuration conf) {
    Configuration plain = new Configuration(conf);
    plain.unset("spark.sql.streaming.checkpointFileManagerClass");
    this.delegate = CheckpointFileManager.create(path, plain);
    this.dir = conf.get(DIR_KEY, "");
    startDumper(dir);
  }

  private static synchronized void startDumper(String dir) {
    if (dumper != null || dir.isEmpty()) {
      return;
    }
    dumper = new Thread(() -> {
      while (true) {
        dump(dir);
        try {
          Thread.sleep(1000);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "faulty-checkpoint-files");
    dumper.setDaemon(true);
    dumper.start();
  }

  private static void dump(String dir) {
    String pid = java.lang.management.ManagementFactory.getRuntimeMXBean().getName().split("@")[0];
    String body = "creates " + CREATES.get() + "\nopens " + OPENS.get() + "\nlists " + LISTS.get()
        + "\nexists " + EXISTS.get() + "\ndeletes " + DELETES.get() + "\nmkdirs " + MKDIRS.get()
        + "\nsteward " + stewardOperations() + "\n";
    try {
      java.nio.file.Path tmp = Paths.get(dir, ".ops-" + pid + ".tmp");
      Files.write(tmp, body.getBytes(StandardCharsets.UTF_8));
      Files.move(tmp, Paths.get(dir, "ops-" + pid + ".txt"),
          java.nio.file.StandardCopyOption.REPLACE_EXISTING,
          java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    } catch (IOException | RuntimeException ignored) {
      // a missing faults dir: nothing to report to
    }
  }

  /** spark-steward's own file-system calls in this JVM (StreamFiles.OWN_OPERATIONS), 0 without it. */
  private static long stewardOperations() {
    try {
      java.lang.reflect.Field field = Class.forName("io.sparksteward.shim.streams.StreamFiles")
          .getDeclaredField("OWN_OPERATIONS");
      field.setAccessible(true);
      return ((AtomicLong) field.get(null)).get();
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      return 0;
    }
  }

  private String control(String name) {
    if (dir.isEmpty()) {
      return null;
    }
    try {
      return new String(Files.readAllBytes(Paths.get(dir, name)), StandardCharsets.UTF_8).trim();
    } catch (IOException e) {
      return null;
    }
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    CREATES.incrementAndGet();
    return delegate.createAtomic(path, overwriteIfPossible);
  }

  @Override
  public FSDataInputStream open(Path path) {
    OPENS.incrementAndGet();
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    LISTS.incrementAndGet();
    return delegate.list(path, filter);
  }

  @Override
  public FileStatus[] list(Path path) {
    LISTS.incrementAndGet();
    return delegate.list(path);
  }

  @Override
  public void mkdirs(Path path) {
    MKDIRS.incrementAndGet();
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    EXISTS.incrementAndGet();
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    DELETES.incrementAndGet();
    if (!dir.isEmpty()) {
      try (FileOutputStream log = new FileOutputStream(Paths.get(dir, "deletes.log").toFile(), true)) {
        log.write((path.toUri().getPath() + "\n").getBytes(StandardCharsets.UTF_8));
      } catch (IOException ignored) {
        // the test sees a missing line as a lost delete
      }
    }
    String rate = control("fail-deletes");
    if (rate != null && !rate.isEmpty()
        && ThreadLocalRandom.current().nextDouble() < Double.parseDouble(rate)) {
      if ("false".equals(control("fail-mode"))) {
        return;  // the file system said false: the file stays
      }
      throw sneaky(new IOException("injected delete failure of " + path));
    }
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  @Override
  public void close() {
    delegate.close();
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> RuntimeException sneaky(Throwable t) throws T {
    throw (T) t;
  }
}
