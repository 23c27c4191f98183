package io.sparksteward.shim.blob;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.regex.Pattern;

/**
 * The blob pieces this host holds, as the Python side wrote them under {@code
 * <local dir>/<app id>}: complete blobs in {@code blob-cache/<scope>/<key>} (renamed into place
 * only once verified) and downloads in progress, whose {@code .<key>.tmp-have} file names the
 * temp file and flags each piece written and verified in it. Read only, never through a link
 * ({@link RegularFiles}); a request names nothing but a validated key and scope.
 */
final class PieceFiles {
  /** {@code blob.cache.BlobCache.FOLDER}: complete blobs, under the application's folder. */
  static final String BLOB_CACHE = "blob-cache";
  /** {@code blob.pieces.HAVE_SUFFIX}: the have-file of a download in progress. */
  static final String HAVE_SUFFIX = ".tmp-have";
  /** {@code .<64 hex>.tmp-<12 hex>}: the have-file's first line. */
  private static final int HAVE_HEADER = 82;
  private static final Pattern HEX12 = Pattern.compile("[0-9a-f]{12}");

  private final Path blobCache;

  PieceFiles(Path appDir) {
    this.blobCache = appDir.resolve(BLOB_CACHE);
  }

  /** What this host holds of a blob: all of it, or the pieces flagged '1' in {@link #flags}. */
  static final class Held {
    final boolean complete;
    /** One '0'/'1' per piece of a download in progress; null when complete. */
    final String flags;

    Held(boolean complete, String flags) {
      this.complete = complete;
      this.flags = flags;
    }
  }

  /** What this host holds of {@code r}'s blob, or null when it holds none of it. */
  Held held(PeerRequest r) throws IOException {
    Path dir = scopeDir(r.scope);
    if (dir == null) {
      return null;
    }
    BasicFileAttributes complete = RegularFiles.lstat(dir.resolve(r.key));
    if (complete != null && complete.isRegularFile() && complete.size() == r.size) {
      return new Held(true, null);
    }
    Have have = readHave(dir, r);
    if (have != null) {
      BasicFileAttributes temp = RegularFiles.lstat(dir.resolve(have.tempName));
      if (temp != null && temp.isRegularFile()) {
        return new Held(false, have.flags);
      }
    }
    return null;
  }

  /**
   * The file holding piece {@code r.index} of {@code r}'s blob, open for reading (the complete
   * blob, or the temp file of a download that flags the piece verified), or null.
   */
  FileChannel openPiece(PeerRequest r) throws IOException {
    Path dir = scopeDir(r.scope);
    if (dir == null) {
      return null;
    }
    FileChannel source = RegularFiles.open(dir.resolve(r.key), r.size, true);
    if (source == null) {
      Have have = readHave(dir, r);
      if (have != null && have.flags.charAt((int) r.index) == '1') {
        source = RegularFiles.open(dir.resolve(have.tempName), r.offset + r.length, false);
      }
    }
    return source;
  }

  /** {@code blob-cache/<scope>} when it and blob-cache are directories (not links), else null. */
  private Path scopeDir(String scope) throws IOException {
    Path dir = blobCache.resolve(scope);
    BasicFileAttributes cache = RegularFiles.lstat(blobCache);
    BasicFileAttributes attrs = cache == null || !cache.isDirectory() ? null
        : RegularFiles.lstat(dir);
    return attrs != null && attrs.isDirectory() ? dir : null;
  }

  /** A download in progress: the temp file's name and one '0'/'1' per piece. */
  private static final class Have {
    final String tempName;
    final String flags;

    Have(String tempName, String flags) {
      this.tempName = tempName;
      this.flags = flags;
    }
  }

  /** The valid have-file of {@code r}'s blob with exactly N flags, else null. */
  private static Have readHave(Path dir, PeerRequest r) throws IOException {
    int expected = HAVE_HEADER + 1 + (int) r.pieces;
    byte[] data = new byte[expected];
    try (FileChannel channel = RegularFiles.open(dir.resolve("." + r.key + HAVE_SUFFIX),
        expected, true)) {
      if (channel == null) {
        return null;
      }
      ByteBuffer view = ByteBuffer.wrap(data);
      while (view.hasRemaining() && channel.read(view, view.position()) > 0) {
        // Until full or the end of the file.
      }
      if (view.hasRemaining()) {
        return null;
      }
    }
    String header = new String(data, 0, HAVE_HEADER, StandardCharsets.US_ASCII);
    String prefix = "." + r.key + ".tmp-";
    if (!header.startsWith(prefix) || !HEX12.matcher(header.substring(prefix.length())).matches()
        || data[HAVE_HEADER] != '\n') {
      return null;
    }
    for (int i = HAVE_HEADER + 1; i < expected; i++) {
      if (data[i] != '0' && data[i] != '1') {
        return null;
      }
    }
    return new Have(header,
        new String(data, HAVE_HEADER + 1, (int) r.pieces, StandardCharsets.US_ASCII));
  }
}
