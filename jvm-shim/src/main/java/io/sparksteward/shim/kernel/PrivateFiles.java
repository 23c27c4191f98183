package io.sparksteward.shim.kernel;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

/**
 * What the shim writes in the host-local working dir is its user's only, as Python's {@code
 * private.py} keeps it: the modes given at creation, and the check that a folder may receive this
 * user's files at all. Shared by every capability that writes there from a JVM (blob's peer
 * server, tables' replicas, the working dir's manifest).
 */
public final class PrivateFiles {
  /**
   * Python's {@code private.py} modes: what spark-steward makes in the local dir is its user's
   * only (0700 folders, 0600 files), given at creation so nothing is ever briefly readable.
   */
  public static final FileAttribute<Set<PosixFilePermission>> DIR_MODE =
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));
  public static final FileAttribute<Set<PosixFilePermission>> FILE_MODE =
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));

  private PrivateFiles() {}

  /** {@code Files.createDirectories}, every folder it creates 0700. */
  public static void createDirectories(Path dir) throws IOException {
    Files.createDirectories(dir, DIR_MODE);
  }

  /**
   * Why the local dir {@code root} must not receive this user's files, or null when it may (a
   * missing one is created 0700): Python's {@code private.ensure_private_root} for a JVM that
   * writes there before any Python task of the application ran on its host. A symbolic link,
   * a directory of another user's, or one others may write is refused: its owner could read or
   * swap what is put there.
   */
  public static String notPrivate(Path root) {
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
      long me = LocalDirs.uid();
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
}
