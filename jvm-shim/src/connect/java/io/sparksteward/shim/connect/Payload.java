package io.sparksteward.shim.connect;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

import io.sparksteward.shim.kernel.Errors;

/**
 * The body of spark-steward's Connect messages (inside a {@code protobuf.Any}): field 1 a JSON
 * text, field 2 optional bytes (a serialized Relation in a command, a cached relation's id in a
 * reply), field 3 optional data (a blob's bytes), all length-delimited in protobuf's wire
 * format, so either side reads it without generated classes ({@code
 * spark_steward.kernel.remote_wire} is the Python twin). Anything else (another field, a wire
 * type, a length past the end, a field twice) is refused: the bytes come from any client
 * holding a Connect session.
 */
final class Payload {
  /** A command's JSON is small (names, ids, settings); DataFrames travel as relations. */
  static final int MAX_TEXT = 1 << 20;

  final String text;
  final byte[] extra;
  final byte[] data;

  Payload(String text, byte[] extra, byte[] data) {
    this.text = text;
    this.extra = extra;
    this.data = data;
  }

  static Payload decode(byte[] bytes) {
    String text = null;
    byte[] extra = null;
    byte[] data = null;
    int[] pos = {0};
    while (pos[0] < bytes.length) {
      long key = varint(bytes, pos);
      int field = (int) (key >>> 3);
      if ((key & 7) != 2 || field < 1 || field > 3) {
        throw bad("unexpected field " + field + " of wire type " + (key & 7));
      }
      long length = varint(bytes, pos);
      if (length > bytes.length - pos[0]) {
        throw bad("field " + field + " claims " + length + " bytes, " + (bytes.length - pos[0])
            + " remain");
      }
      int start = pos[0];
      pos[0] += (int) length;
      if (field == 1) {
        if (text != null) {
          throw bad("field 1 twice");
        }
        if (length > MAX_TEXT) {
          throw bad("a text of " + length + " bytes (at most " + MAX_TEXT + ")");
        }
        text = utf8(bytes, start, (int) length);
      } else if (field == 2) {
        if (extra != null) {
          throw bad("field 2 twice");
        }
        extra = java.util.Arrays.copyOfRange(bytes, start, start + (int) length);
      } else {
        if (data != null) {
          throw bad("field 3 twice");
        }
        data = java.util.Arrays.copyOfRange(bytes, start, start + (int) length);
      }
    }
    if (text == null) {
      throw bad("no text field");
    }
    return new Payload(text, extra, data);
  }

  /** Strict UTF-8, as protobuf reads a string field and Python's twin decodes. */
  private static String utf8(byte[] data, int start, int length) {
    try {
      return StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(data, start, length)).toString();
    } catch (CharacterCodingException e) {
      throw bad("field 1 is not UTF-8");
    }
  }

  byte[] encode() {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    field(out, 1, text.getBytes(StandardCharsets.UTF_8));
    if (extra != null) {
      field(out, 2, extra);
    }
    if (data != null) {
      field(out, 3, data);
    }
    return out.toByteArray();
  }

  private static void field(ByteArrayOutputStream out, int number, byte[] value) {
    writeVarint(out, ((long) number << 3) | 2);
    writeVarint(out, value.length);
    out.write(value, 0, value.length);
  }

  private static void writeVarint(ByteArrayOutputStream out, long value) {
    while ((value & ~0x7FL) != 0) {
      out.write((int) ((value & 0x7F) | 0x80));
      value >>>= 7;
    }
    out.write((int) value);
  }

  /** A varint of at most 5 bytes (32 bits): longer ones name no length a message can have. */
  private static long varint(byte[] data, int[] pos) {
    long value = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (pos[0] >= data.length) {
        throw bad("truncated varint");
      }
      int b = data[pos[0]++] & 0xFF;
      value |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        return value;
      }
    }
    throw bad("varint longer than 5 bytes");
  }

  private static IllegalArgumentException bad(String why) {
    return new IllegalArgumentException(Errors.PREFIX + "a malformed command: " + why);
  }
}
