package io.sparksteward.shim.kernel;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SeekableByteChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.LinkOption;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The host-local working dir on the JVM side: where it is, and which application ids may name a
 * folder in it. The one place the shim decides either; every capability that touches the dir
 * from a JVM asks here (and {@link PrivateFiles} for how it writes there).
 *
 * <p>{@link #resolve} is Python's {@code StewardConf.local_dir()}: {@code spark.steward.local.dir}
 * (stripped), else {@code <tempfile.gettempdir()>/spark-steward-<uid>/local} with Python's rule
 * for the temp dir (the first of {@code TMPDIR}, {@code TEMP}, {@code TMP}, {@code /tmp}, {@code
 * /var/tmp}, {@code /usr/tmp}, the working dir where a file can be created and written). Python
 * resolves it once, on the driver, and hands that string to every executor in the executor
 * context; the driver plugin resolves it here in the same process environment and hands it to
 * the executor plugins the same way.
 */
public final class LocalDirs {
  public static final String LOCAL_DIR_KEY = "spark.steward.local.dir";

  /** {@code applications._APP_ID}: application ids become path segments. */
  private static final Pattern APP_ID = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]{0,200}");
  private static final String[] TEMP_ENV = {"TMPDIR", "TEMP", "TMP"};
  private static final String[] TEMP_DIRS = {"/tmp", "/var/tmp", "/usr/tmp"};
  private static final char[] NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_".toCharArray();
  private static final SecureRandom RANDOM = new SecureRandom();

  private LocalDirs() {}

  /** The working dir for {@code configured} (the conf value, or null) in this process. */
  public static String resolve(String configured) {
    return resolve(configured, System.getenv(), System.getProperty("user.dir"), uid());
  }

  /** Python's {@code os.getuid()}: the default dir is per user, as {@code spark-steward-<uid>}. */
  public static long uid() {
    return SparkCompat.processUid();
  }

  /**
   * {@link #resolve(String)} for an explicit environment, working dir and uid; null if none
   * usable.
   */
  static String resolve(String configured, Map<String, String> env, String cwd, long uid) {
    String value = configured == null ? "" : configured.trim();
    if (!value.isEmpty()) {
      return value;
    }
    String temp = pythonTempDir(env, cwd);
    if (temp == null) {
      return null;
    }
    // str(Path(temp) / f"spark-steward-{uid}" / "local"); temp is normalized already.
    String below = "spark-steward-" + uid + "/local";
    if (temp.equals(".")) {
      return below;
    }
    return (temp.endsWith("/") ? temp : temp + "/") + below;
  }

  /** Python's {@code tempfile._get_default_tempdir()}; null where Python raises. */
  static String pythonTempDir(Map<String, String> env, String cwd) {
    List<String> candidates = new ArrayList<>();
    for (String name : TEMP_ENV) {
      String value = env.get(name);
      if (value != null && !value.isEmpty()) {
        candidates.add(value);
      }
    }
    for (String dir : TEMP_DIRS) {
      candidates.add(dir);
    }
    candidates.add(cwd != null ? cwd : ".");
    for (String candidate : candidates) {
      String dir = candidate.equals(".") ? candidate : abspath(candidate, cwd);
      if (canWriteIn(dir)) {
        return dir;
      }
    }
    return null;
  }

  /** Python's {@code posixpath.abspath}: join with {@code cwd} when relative, then normpath. */
  static String abspath(String path, String cwd) {
    if (!path.startsWith("/") && cwd != null) {
      path = cwd.endsWith("/") ? cwd + path : cwd + "/" + path;
    }
    return normpath(path);
  }

  /**
   * Python's {@code posixpath.normpath} (lexical; two leading slashes are kept, as there).
   * Public for tests/unit/test_app_end_cleanup_logic.py, which checks it against Python's.
   */
  public static String normpath(String path) {
    if (path.isEmpty()) {
      return ".";
    }
    int leading = path.startsWith("/") ? (path.startsWith("//") && !path.startsWith("///") ? 2 : 1)
        : 0;
    Deque<String> parts = new ArrayDeque<>();
    for (String part : path.split("/")) {
      if (part.isEmpty() || part.equals(".")) {
        continue;
      }
      if (!part.equals("..") || (leading == 0 && parts.isEmpty())
          || (!parts.isEmpty() && parts.peekLast().equals(".."))) {
        parts.addLast(part);
      } else if (!parts.isEmpty()) {
        parts.removeLast();
      }
    }
    StringBuilder joined = new StringBuilder();
    for (int i = 0; i < leading; i++) {
      joined.append('/');
    }
    joined.append(String.join("/", parts));
    return joined.length() == 0 ? "." : joined.toString();
  }

  /** Python's probe: a new file with a random name can be created, written and removed. */
  private static boolean canWriteIn(String dir) {
    for (int attempt = 0; attempt < 100; attempt++) {
      Path probe;
      try {
        probe = Paths.get(dir, randomName());
      } catch (InvalidPathException e) {
        return false;
      }
      try {
        try (SeekableByteChannel channel = Files.newByteChannel(probe,
            new HashSet<OpenOption>(Arrays.asList(StandardOpenOption.CREATE_NEW,
                StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)),
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")))) {
          channel.write(ByteBuffer.wrap(new byte[] {'b', 'l', 'a', 't'}));
        } finally {
          Files.deleteIfExists(probe);
        }
        return true;
      } catch (FileAlreadyExistsException e) {
        continue;
      } catch (IOException | UnsupportedOperationException | SecurityException e) {
        return false;
      }
    }
    return false;
  }

  private static String randomName() {
    char[] name = new char[8];
    for (int i = 0; i < name.length; i++) {
      name[i] = NAME_CHARS[RANDOM.nextInt(NAME_CHARS.length)];
    }
    return new String(name);
  }

  /** {@code applications.validate_app_id}'s rule. */
  public static boolean isSafeAppId(String appId) {
    return appId != null && APP_ID.matcher(appId).matches();
  }
}
