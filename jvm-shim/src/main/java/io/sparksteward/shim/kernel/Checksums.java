package io.sparksteward.shim.kernel;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Locale;
import java.util.zip.Checksum;

import org.apache.hadoop.util.PureJavaCrc32C;

/**
 * The checksums the shim computes and the way it writes them, each as Python's side computes and
 * writes the same value ({@code spark_steward.checksum}): CRC-32C of every record, block, segment
 * and pack member, SHA-256 where a name is derived from a path, lower-case hex throughout.
 *
 * <p>The shim is compiled for Java 8 (Spark 3.5 runs on Java 8, 11 and 17), so the JDK's
 * intrinsic {@code java.util.zip.CRC32C} (Java 9) is reached by reflection, with Hadoop's
 * pure-Java one (the same values, slower) on Java 8.
 */
public final class Checksums {
  private static final char[] HEX = "0123456789abcdef".toCharArray();
  private static final MethodHandle JDK_CRC32C = jdkCrc32c();

  private Checksums() {}

  private static MethodHandle jdkCrc32c() {
    try {
      return MethodHandles.publicLookup()
          .findConstructor(Class.forName("java.util.zip.CRC32C"), MethodType.methodType(void.class))
          .asType(MethodType.methodType(Checksum.class));
    } catch (ReflectiveOperationException e) {
      return null; // Java 8: Hadoop's pure-Java one (same values, slower)
    }
  }

  /** A new CRC-32C: the JDK's intrinsic one from Java 9, Hadoop's on Java 8. */
  public static Checksum crc32c() {
    if (JDK_CRC32C == null) {
      return new PureJavaCrc32C();
    }
    try {
      return (Checksum) JDK_CRC32C.invokeExact();
    } catch (Throwable t) {
      throw Errors.sneaky(t);
    }
  }

  /** The CRC-32C of {@code length} bytes of {@code data} from {@code offset}. */
  public static long crc32c(byte[] data, int offset, int length) {
    Checksum crc = crc32c();
    crc.update(data, offset, length);
    return crc.getValue();
  }

  /** A 32-bit checksum (its low 32 bits) as 8 lower-case hex digits: {@code "0a1b2c3d"}. */
  public static String hex32(long value) {
    return String.format(Locale.ROOT, "%08x", value & 0xffffffffL);
  }

  /** Lower-case hex of {@code bytes}. */
  public static String hex(byte[] bytes) {
    char[] out = new char[bytes.length * 2];
    for (int i = 0; i < bytes.length; i++) {
      out[2 * i] = HEX[(bytes[i] >> 4) & 0xf];
      out[2 * i + 1] = HEX[bytes[i] & 0xf];
    }
    return new String(out);
  }

  /** The SHA-256 of {@code text}'s UTF-8 bytes, in lower-case hex. */
  public static String sha256Hex(String text) {
    try {
      MessageDigest sha = MessageDigest.getInstance("SHA-256");
      return hex(sha.digest(text.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
