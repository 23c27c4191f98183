package io.sparksteward.shim.local;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.attribute.BasicFileAttributeView;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;

import io.sparksteward.shim.kernel.LocalDirs;

/**
 * Removing one application's folder {@code <local dir>/<app id>} on this host, as the executor
 * half of the application-end cleanup does ({@link AppEndExecutor}); Python's {@code
 * spark-steward gc --local-dir} ({@code spark_steward.local.gc}) removes what is left over.
 */
final class AppFolders {
  private AppFolders() {}

  /**
   * Removes {@code <localDir>/<appId>} and everything below it, never following a symbolic
   * link: a link inside is removed as a link, and a folder that is itself a link is refused. Only
   * that one folder is touched: never {@code localDir} itself or another application's folder.
   * Another process removing the same tree at the same time is fine.
   *
   * @return {@code removed}, {@code absent} (nothing there), {@code refused: why} or {@code
   *     failed: why}
   */
  static String remove(String localDir, String appId) {
    if (!LocalDirs.isSafeAppId(appId)) {
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
