package io.sparksteward.shim.blob;

import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.SparkConf;

/**
 * What the peer server is allowed to do: how many authenticated connections it keeps, the upload
 * cap and the two timeouts, from the executor's conf ({@link #fromConf}) or {@link
 * PeerServer#main}'s arguments.
 */
final class PeerSettings {
  static final String ENABLED_KEY = "spark.steward.blob.peer.enabled";
  static final String MAX_CONNECTIONS_KEY = "spark.steward.blob.peer.max-connections";
  static final String RATE_KEY = "spark.steward.blob.peer.rate";
  static final String NETWORK_TIMEOUT_KEY = "spark.steward.blob.network-timeout";
  static final String HANDSHAKE_TIMEOUT_KEY = "spark.steward.blob.server.handshake-timeout";
  /** The defaults of those keys, as config.py documents them (used when a key is unset). */
  static final String ENABLED_DEFAULT = "true";
  static final String MAX_CONNECTIONS_DEFAULT = "16";
  static final String RATE_DEFAULT = "0";
  static final String NETWORK_TIMEOUT_DEFAULT = "60s";
  static final String HANDSHAKE_TIMEOUT_DEFAULT = "5s";

  private static final Pattern NUMBER_WITH_UNIT =
      Pattern.compile("\\s*([0-9]+(?:\\.[0-9]+)?)\\s*([a-zA-Z]*)\\s*");

  final int maxConnections;
  /** Bytes per second for all connections together; 0: no cap. */
  final long rate;
  final long handshakeMillis;
  final long idleMillis;

  PeerSettings(int maxConnections, long rate, long handshakeMillis, long idleMillis) {
    if (maxConnections < 1 || rate < 0 || handshakeMillis < 1 || idleMillis < 1) {
      throw new IllegalArgumentException("peer server settings out of range: max-connections "
          + maxConnections + ", rate " + rate + ", handshake " + handshakeMillis + " ms, idle "
          + idleMillis + " ms");
    }
    this.maxConnections = maxConnections;
    this.rate = rate;
    this.handshakeMillis = handshakeMillis;
    this.idleMillis = idleMillis;
  }

  /**
   * Parsed as Python's config parses the same keys (so a value one side takes the other
   * does); IllegalArgumentException names the key and value.
   */
  static PeerSettings fromConf(SparkConf conf) {
    long max =
        parseInt(MAX_CONNECTIONS_KEY, conf.get(MAX_CONNECTIONS_KEY, MAX_CONNECTIONS_DEFAULT));
    long rate = parseSize(RATE_KEY, conf.get(RATE_KEY, RATE_DEFAULT));
    long idle = parseMillis(NETWORK_TIMEOUT_KEY,
        conf.get(NETWORK_TIMEOUT_KEY, NETWORK_TIMEOUT_DEFAULT), 10);
    long handshake = parseMillis(HANDSHAKE_TIMEOUT_KEY,
        conf.get(HANDSHAKE_TIMEOUT_KEY, HANDSHAKE_TIMEOUT_DEFAULT), 50);
    if (max < 1) {
      throw invalid(MAX_CONNECTIONS_KEY, conf.get(MAX_CONNECTIONS_KEY, MAX_CONNECTIONS_DEFAULT),
          "must be at least 1");
    }
    return new PeerSettings((int) Math.min(max, 100_000), rate, handshake, idle);
  }

  private static IllegalArgumentException invalid(String key, String raw, String expected) {
    return new IllegalArgumentException(key + "='" + raw + "' is not valid: " + expected);
  }

  /** Python's {@code _parse_int}. */
  static long parseInt(String key, String raw) {
    try {
      return Long.parseLong(raw.trim());
    } catch (NumberFormatException e) {
      throw invalid(key, raw, "expected a whole number");
    }
  }

  /** Python's {@code _parse_size}: {@code 512k}, {@code 64m}, {@code 1g}; bare is bytes. */
  static long parseSize(String key, String raw) {
    Matcher m = NUMBER_WITH_UNIT.matcher(raw);
    long unit = -1;
    if (m.matches()) {
      switch (m.group(2).toLowerCase(Locale.ROOT)) {
        case "":
        case "b":
          unit = 1;
          break;
        case "k":
        case "kb":
          unit = 1L << 10;
          break;
        case "m":
        case "mb":
          unit = 1L << 20;
          break;
        case "g":
        case "gb":
          unit = 1L << 30;
          break;
        case "t":
        case "tb":
          unit = 1L << 40;
          break;
        default:
          break;
      }
    }
    if (unit < 0) {
      throw invalid(key, raw, "expected a size such as 512k, 64m or 1g");
    }
    return (long) (Double.parseDouble(m.group(1)) * unit);
  }

  /** Python's {@code _parse_duration} in milliseconds (rounded up); bare is seconds. */
  static long parseMillis(String key, String raw, long minimumMillis) {
    Matcher m = NUMBER_WITH_UNIT.matcher(raw);
    double unit = -1;
    if (m.matches()) {
      switch (m.group(2).toLowerCase(Locale.ROOT)) {
        case "ms":
          unit = 1;
          break;
        case "":
        case "s":
          unit = 1000;
          break;
        case "m":
        case "min":
          unit = 60_000;
          break;
        case "h":
          unit = 3_600_000;
          break;
        case "d":
          unit = 86_400_000;
          break;
        default:
          break;
      }
    }
    if (unit < 0) {
      throw invalid(key, raw, "expected a duration such as 500ms, 10s, 5min or 1h");
    }
    double millis = Math.ceil(Double.parseDouble(m.group(1)) * unit);
    if (millis < minimumMillis) {
      throw invalid(key, raw, "must be at least " + minimumMillis + " ms");
    }
    return (long) Math.min(millis, Integer.MAX_VALUE);
  }
}
