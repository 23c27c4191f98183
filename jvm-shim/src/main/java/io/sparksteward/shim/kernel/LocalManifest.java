package io.sparksteward.shim.kernel;

import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.EnumSet;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The manifest of an application's host-local working dir, as the Python layer writes and reads
 * it ({@code spark_steward.local.working_dir}, {@code spark_steward.records}): one checksummed
 * JSON record per entry, {@code manifest/<quoted entry>.rec} when complete and {@code .writing}
 * while a writer announced it; written to a temp name, synced, renamed, directory synced. Numbers
 * are whole (the record's time in seconds), so both languages compute the same canonical JSON.
 */
public final class LocalManifest {
  private static final Logger LOG = LoggerFactory.getLogger(LocalManifest.class);
  /** {@code working_dir.MANIFEST}: the folder of the records, under the working dir. */
  public static final String FOLDER = "manifest";
  /** The suffix of a complete record. */
  public static final String COMPLETE = "rec";
  /** The suffix of a record a writer announced and has not finished. */
  public static final String WRITING = "writing";
  /** {@code records.FORMAT}: the envelope's format number. */
  public static final int FORMAT = 1;
  private static final ObjectMapper JSON =
      JsonMapper.builder().enable(JsonWriteFeature.ESCAPE_NON_ASCII).build();

  private final java.nio.file.Path workDir;
  private final String appId;
  private final String capability;
  private final String scope;

  public LocalManifest(java.nio.file.Path workDir, String appId, String capability, String scope) {
    this.workDir = workDir;
    this.appId = appId;
    this.capability = capability;
    this.scope = scope;
  }

  /** Bytes of every complete record (the working dir's use, for the byte bound). */
  public long usage() throws IOException {
    long total = 0;
    java.nio.file.Path manifest = workDir.resolve(FOLDER);
    if (!Files.isDirectory(manifest)) {
      return 0;
    }
    try (DirectoryStream<java.nio.file.Path> names =
        Files.newDirectoryStream(manifest, "*." + COMPLETE)) {
      for (java.nio.file.Path name : names) {
        try {
          total += JSON.readTree(Files.readAllBytes(name)).path("body").path("size").asLong(0);
        } catch (IOException e) {
          // unreadable records do not count; the Python layer removes them
        }
      }
    }
    return total;
  }

  public Map<String, Object> body(String entry, long size, long crc, String state) {
    Map<String, Object> body = new TreeMap<>();
    body.put("app_id", appId);
    body.put("capability", capability);
    body.put("crc32c", crc);
    body.put("entry", entry);
    body.put("file", entry);
    body.put("form", "file");
    body.put("scope", scope);
    body.put("size", size);
    body.put("state", state);
    body.put("written_at", System.currentTimeMillis() / 1000L);
    return body;
  }

  /** Python's {@code urllib.parse.quote(entry, safe='')}: the record's file name. */
  public static String quote(String entry) {
    StringBuilder out = new StringBuilder();
    for (byte b : entry.getBytes(StandardCharsets.UTF_8)) {
      int c = b & 0xff;
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
          || c == '_' || c == '.' || c == '-' || c == '~') {
        out.append((char) c);
      } else {
        out.append('%').append(String.format("%02X", c));
      }
    }
    return out.toString();
  }

  public java.nio.file.Path path(String entry, String suffix) {
    return workDir.resolve(FOLDER).resolve(quote(entry) + "." + suffix);
  }

  /**
   * Canonical JSON (sorted keys, no spaces, ASCII), as Python's records module computes it
   * ({@code json.dumps(body, sort_keys=True, separators=(",", ":"))}). Strings are escaped as
   * Python escapes them, not as Jackson does (upper-case hex digits, DEL left as it is): a record
   * naming a path with a non-ASCII letter must verify on both sides.
   */
  private static String canonical(Map<String, Object> body) throws IOException {
    StringBuilder out = new StringBuilder("{");
    boolean first = true;
    for (Map.Entry<String, Object> e : body.entrySet()) {
      if (!first) {
        out.append(',');
      }
      first = false;
      appendString(out, e.getKey());
      out.append(':');
      if (e.getValue() instanceof String) {
        appendString(out, (String) e.getValue());
      } else {
        out.append(JSON.writeValueAsString(e.getValue()));
      }
    }
    return out.append('}').toString();
  }

  /**
   * {@code text} as Python's {@code json} writes a string with {@code ensure_ascii}: the short
   * escapes, then every UTF-16 unit outside {@code ' '..'~'} as a backslash, {@code u} and four
   * lower-case hex digits.
   */
  static void appendString(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\b':
          out.append("\\b");
          break;
        case '\f':
          out.append("\\f");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\r':
          out.append("\\r");
          break;
        case '\t':
          out.append("\\t");
          break;
        default:
          if (c < ' ' || c > '~') {
            out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }

  public void write(String entry, String suffix, Map<String, Object> body)
      throws IOException {
    String canonicalBody = canonical(body);
    byte[] canonicalBytes = canonicalBody.getBytes(StandardCharsets.UTF_8);
    String envelope = "{\"body\":" + canonicalBody + ",\"crc32c\":\""
        + Checksums.hex32(Checksums.crc32c(canonicalBytes, 0, canonicalBytes.length))
        + ("\",\"format\":" + FORMAT + "}\n");
    java.nio.file.Path path = path(entry, suffix);
    PrivateFiles.createDirectories(path.getParent());
    java.nio.file.Path tmp = path.resolveSibling(
        "." + path.getFileName() + ".tmp-" + UUID.randomUUID().toString().substring(0, 12));
    try {
      try (FileChannel out = FileChannel.open(tmp,
          EnumSet.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE),
          PrivateFiles.FILE_MODE)) {
        ByteBuffer bb = ByteBuffer.wrap(envelope.getBytes(StandardCharsets.UTF_8));
        while (bb.hasRemaining()) {
          out.write(bb);
        }
        out.force(true);
      }
      Files.move(tmp, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } finally {
      Files.deleteIfExists(tmp);
    }
    fsyncDir(path.getParent());
  }

  public JsonNode read(String entry, String suffix) {
    java.nio.file.Path path = path(entry, suffix);
    try {
      JsonNode envelope = JSON.readTree(Files.readAllBytes(path));
      JsonNode body = envelope.path("body");
      JsonNode format = envelope.path("format");
      if (!body.isObject() || !format.isNumber() || format.doubleValue() != FORMAT) {
        LOG.warn(Errors.PREFIX + "manifest record {} is not a record of format {}; ignored", path,
            FORMAT);
        return null;
      }
      Map<String, Object> fields = new TreeMap<>();
      for (Map.Entry<String, JsonNode> e : body.properties()) {
        fields.put(e.getKey(), e.getValue().isNumber() ? (Object) e.getValue().numberValue()
            : (Object) e.getValue().asText());
      }
      byte[] canonicalBytes = canonical(fields).getBytes(StandardCharsets.UTF_8);
      String crc = Checksums.hex32(Checksums.crc32c(canonicalBytes, 0, canonicalBytes.length));
      if (!crc.equals(envelope.path("crc32c").asText())) {
        LOG.warn(Errors.PREFIX + "manifest record {} fails verification; ignored", path);
        return null;
      }
      return body;
    } catch (NoSuchFileException | FileNotFoundException e) {
      return null;
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "manifest record {} is unreadable ({}); ignored", path,
          e.toString());
      return null;
    }
  }

  public static void fsyncDir(java.nio.file.Path dir) throws IOException {
    try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
      ch.force(true);
    }
  }
}
