package io.sparksteward.shim.kernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Encodes listener events as positional JSON arrays, {@code [seq, "type", time, fields...]}, with
 * the field order per type fixed here and in Python's {@code spark_steward.kernel.events}. Events
 * cross py4j as plain strings, never as live JVM objects, so Python holds no references into the
 * JVM and one call carries a whole batch; positions instead of names halve the bytes.
 */
public final class EventEncoder {
  private EventEncoder() {}

  public static Builder event(String type, long timeMillis) {
    return new Builder().str(type).num(timeMillis);
  }

  /** Joins encoded events into {@code {"dropped":N,"accepted":N,"events":[...]}}. */
  static String batch(List<String> events, long dropped, long accepted, boolean stopped) {
    StringBuilder sb = new StringBuilder(64 + events.size() * 160);
    sb.append("{\"dropped\":").append(dropped)
        .append(",\"accepted\":").append(accepted)
        .append(",\"stopped\":").append(stopped)
        .append(",\"events\":[");
    for (int i = 0; i < events.size(); i++) {
      if (i > 0) {
        sb.append(',');
      }
      sb.append(events.get(i));
    }
    return sb.append("]}").toString();
  }

  public static void quote(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': sb.append("\\\""); break;
        case '\\': sb.append("\\\\"); break;
        case '\n': sb.append("\\n"); break;
        case '\r': sb.append("\\r"); break;
        case '\t': sb.append("\\t"); break;
        default:
          if (c < 0x20 || (c >= 0xD800 && c <= 0xDFFF)) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
      }
    }
    sb.append('"');
  }

  /** Appends fields in order; {@code seq} is assigned last, by the buffer, under its lock. */
  public static final class Builder {
    private final StringBuilder body = new StringBuilder(96);
    private long seq;

    public Builder str(String value) {
      next();
      if (value == null) {
        body.append("null");
      } else {
        quote(body, value);
      }
      return this;
    }

    public Builder num(long value) {
      next();
      body.append(value);
      return this;
    }

    public Builder nums(List<Integer> values) {
      next();
      body.append('[');
      for (int i = 0; i < values.size(); i++) {
        if (i > 0) {
          body.append(',');
        }
        body.append(values.get(i));
      }
      body.append(']');
      return this;
    }

    public Builder map(List<String[]> pairs) {
      next();
      body.append('{');
      for (int i = 0; i < pairs.size(); i++) {
        if (i > 0) {
          body.append(',');
        }
        quote(body, pairs.get(i)[0]);
        body.append(':');
        quote(body, pairs.get(i)[1]);
      }
      body.append('}');
      return this;
    }

    Builder seq(long value) {
      this.seq = value;
      return this;
    }

    String build() {
      return "[" + seq + "," + body + "]";
    }

    private void next() {
      if (body.length() > 0) {
        body.append(',');
      }
    }
  }

  static List<String[]> pairs() {
    return new ArrayList<>();
  }
}
