package io.sparksteward.shim;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SeekableByteChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributeView;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * The host-local working dir on the JVM side: where it is, and removing one application's folder
 * in it. The one place the shim decides either.
 *
 * <p>{@link #resolve} is Python's {@code StewardConf.local_dir()}: {@code spark.steward.local.dir}
 * (stripped), else {@code <tempfile.gettempdir()>/spark-steward-<uid>/local} with Python's rule
 * for the temp dir (the first of {@code TMPDIR}, {@code TEMP}, {@code TMP}, {@code /tmp}, {@code
 * /var/tmp}, {@code /usr/tmp}, the working dir where a file can be created and written). Python
 * resolves it once, on the driver, and hands that string to every executor in the executor
 * context; the driver plugin resolves it here in the same process environment and hands it to
 * the executor plugins the same way.
 */
final class LocalDirs {
  static final String LOCAL_DIR_KEY = "spark.steward.local.dir";

  /** {@code applications._APP_ID}: application ids become path segments. */
  private static final Pattern APP_ID = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]{0,200}");
  private static final String[] TEMP_ENV = {"TMPDIR", "TEMP", "TMP"};
  private static final String[] TEMP_DIRS = {"/tmp", "/var/tmp", "/usr/tmp"};
  private static final char[] NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_".toCharArray();
  private static final SecureRandom RANDOM = new SecureRandom();
  /**
   * Python's {@code private.py} modes: what spark-steward makes in the local dir is its user's
   * only (0700 folders, 0600 files), given at creation so nothing is ever briefly readable.
   */
  static final FileAttribute<Set<PosixFilePermission>> PRIVATE_DIR =
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));
  static final FileAttribute<Set<PosixFilePermission>> PRIVATE_FILE =
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));

  private LocalDirs() {}

  /** {@code Files.createDirectories}, every folder it creates 0700. */
  static void createPrivateDirectories(Path dir) throws IOException {
    Files.createDirectories(dir, PRIVATE_DIR);
  }

  /**
   * Why the local dir {@code root} must not receive this user's files, or null when it may (a
   * missing one is created 0700): Python's {@code private.ensure_private_root} for a JVM that
   * writes there before any Python task of the application ran on its host. A symbolic link,
   * a directory of another user's, or one others may write is refused: its owner could read or
   * swap what is put there.
   */
  static String notPrivate(Path root) {
    try {
      BasicFileAttributes basic = Files.readAttributes(root, BasicFileAttributes.class,
          LinkOption.NOFOLLOW_LINKS);
      if (basic.isSymbolicLink()) {
        return root + " is a symbolic link";
      }
      if (!basic.isDirectory()) {
        return root + " exists and is not a directory";
      }
      Set<PosixFilePermission> perms = Files.getPosixFilePermissions(root,
          LinkOption.NOFOLLOW_LINKS);
      if (perms.contains(PosixFilePermission.GROUP_WRITE)
          || perms.contains(PosixFilePermission.OTHERS_WRITE)) {
        return root + " is writable by other users";
      }
      Object owner = Files.getAttribute(root, "unix:uid", LinkOption.NOFOLLOW_LINKS);
      long me = uid();
      if (owner instanceof Integer && ((Integer) owner).longValue() != me) {
        return root + " is owned by uid " + owner + ", not this user (uid " + me + ")";
      }
      return null;
    } catch (NoSuchFileException e) {
      return null;
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
      return root + " cannot be checked: " + e;
    }
  }

  /** The working dir for {@code configured} (the conf value, or null) in this process. */
  static String resolve(String configured) {
    return resolve(configured, System.getenv(), System.getProperty("user.dir"), uid());
  }

  /** Python's {@code os.getuid()}: the default dir is per user, as {@code spark-steward-<uid>}. */
  static long uid() {
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

  /** Python's {@code posixpath.normpath} (lexical; two leading slashes are kept, as there). */
  static String normpath(String path) {
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
  static boolean isSafeAppId(String appId) {
    return appId != null && APP_ID.matcher(appId).matches();
  }

  /**
   * Removes {@code <localDir>/<appId>} and everything below it, never following a symbolic
   * link: a link inside is removed as a link, and a folder that is itself a link is refused. Only
   * that one folder is touched: never {@code localDir} itself or another application's folder.
   * Another process removing the same tree at the same time is fine.
   *
   * @return {@code removed}, {@code absent} (nothing there), {@code refused: why} or {@code
   *     failed: why}
   */
  static String removeAppFolder(String localDir, String appId) {
    if (!isSafeAppId(appId)) {
      return "refused: application id '" + appId + "' is not a safe path segment";
    }
    if (localDir == null || localDir.isEmpty()) {
      return "refused: no local dir";
    }
    Path root;
    try {
      root = Paths.get(localDir);
    } catch (InvalidPathException e) {
      return "refused: local dir '" + localDir + "' is not a path";
    }
    Path folder = root.resolve(appId);
    if (Files.isSymbolicLink(folder)) {
      return "refused: " + folder + " is a symbolic link";
    }
    if (!Files.exists(folder, LinkOption.NOFOLLOW_LINKS)) {
      return "absent";
    }
    if (!Files.isDirectory(folder, LinkOption.NOFOLLOW_LINKS)) {
      return "refused: " + folder + " is not a directory";
    }
    List<String> errors = new ArrayList<>();
    // Twice: a file written into the tree while it was being removed leaves its dir behind.
    for (int pass = 0; pass < 2 && Files.exists(folder, LinkOption.NOFOLLOW_LINKS); pass++) {
      errors.clear();
      try (DirectoryStream<Path> parent = Files.newDirectoryStream(root)) {
        if (parent instanceof SecureDirectoryStream) {
          removeBelow((SecureDirectoryStream<Path>) parent, Paths.get(appId), errors);
        } else {
          removeByPath(folder, errors);
        }
      } catch (NoSuchFileException e) {
        break;
      } catch (IOException e) {
        errors.add(root + ": " + e);
      }
    }
    if (!Files.exists(folder, LinkOption.NOFOLLOW_LINKS)) {
      return "removed";
    }
    return "failed: " + (errors.isEmpty() ? folder + " is still there"
        : String.join("; ", errors.subList(0, Math.min(3, errors.size()))));
  }

  /** Removes {@code name} below the open {@code parent}, opening directories without links. */
  private static void removeBelow(SecureDirectoryStream<Path> parent, Path name,
      List<String> errors) {
    try {
      BasicFileAttributes attrs = parent
          .getFileAttributeView(name, BasicFileAttributeView.class, LinkOption.NOFOLLOW_LINKS)
          .readAttributes();
      if (attrs.isDirectory()) {
        List<Path> entries = new ArrayList<>();
        try (SecureDirectoryStream<Path> dir =
            parent.newDirectoryStream(name, LinkOption.NOFOLLOW_LINKS)) {
          for (Path entry : dir) {
            entries.add(entry.getFileName());
          }
          for (Path entry : entries) {
            removeBelow(dir, entry, errors);
          }
        }
        parent.deleteDirectory(name);
      } else {
        parent.deleteFile(name);
      }
    } catch (NoSuchFileException e) {
      // Gone already: another executor of this application on this host removed it.
    } catch (IOException e) {
      errors.add(name + ": " + e);
    }
  }

  /** Where directories cannot be opened relative to each other: by path, without links. */
  private static void removeByPath(Path path, List<String> errors) {
    try {
      if (Files.isDirectory(path, LinkOption.NOFOLLOW_LINKS)) {
        List<Path> entries = new ArrayList<>();
        try (DirectoryStream<Path> dir = Files.newDirectoryStream(path)) {
          for (Path entry : dir) {
            entries.add(entry);
          }
        }
        for (Path entry : entries) {
          removeByPath(entry, errors);
        }
      }
      Files.deleteIfExists(path);
    } catch (NoSuchFileException e) {
      // Gone already.
    } catch (IOException e) {
      errors.add(path + ": " + e);
    }
  }
}
