package io.sparksteward.shim.blob;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;

/**
 * How the peer server looks at a file Python wrote: never through a symbolic link, and only a
 * regular file of the size it expects, checked again once open (the file may be swapped or
 * removed in between).
 */
final class RegularFiles {
  private RegularFiles() {}

  /** The attributes of {@code path} itself (a link is a link), or null when it is absent. */
  static BasicFileAttributes lstat(Path path) throws IOException {
    try {
      return Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
    } catch (NoSuchFileException e) {
      return null;
    }
  }

  /**
   * {@code path} opened for reading when it is a regular file (never through a link) of exactly
   * ({@code exact}) or at least {@code size} bytes, else null.
   */
  static FileChannel open(Path path, long size, boolean exact) throws IOException {
    BasicFileAttributes attrs = lstat(path);
    if (attrs == null || !attrs.isRegularFile() || !sizeFits(attrs.size(), size, exact)) {
      return null;
    }
    FileChannel channel;
    try {
      channel = FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);
    } catch (FileSystemException e) {
      BasicFileAttributes now = lstat(path);
      if (now == null || now.isSymbolicLink() || e instanceof NoSuchFileException) {
        return null; // Swapped or removed since the check.
      }
      throw e;
    }
    if (!sizeFits(channel.size(), size, exact)) {
      channel.close();
      return null;
    }
    return channel;
  }

  private static boolean sizeFits(long actual, long size, boolean exact) {
    return exact ? actual == size : actual >= size;
  }
}
