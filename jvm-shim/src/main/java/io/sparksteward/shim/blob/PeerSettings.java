package io.sparksteward.shim.blob;

import io.sparksteward.shim.kernel.Handover;

/**
 * What the peer server is allowed to do: how many authenticated connections it keeps, the upload
 * cap and the two timeouts, as Python resolved them ({@link #of}) or from {@link
 * PeerServer#main}'s arguments.
 */
final class PeerSettings {
  /** The blob capability's handover fields ({@code blob.config_keys.JVM_VALUES}). */
  static final String ENABLED_FIELD = "blob_peer_enabled";
  static final String MAX_CONNECTIONS_FIELD = "blob_peer_max_connections";
  static final String RATE_FIELD = "blob_peer_rate";
  static final String NETWORK_TIMEOUT_FIELD = "blob_network_timeout_ms";
  static final String HANDSHAKE_TIMEOUT_FIELD = "blob_handshake_timeout_ms";

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
   * The settings Python resolved from {@code spark.steward.blob.peer.max-connections}, {@code
   * .peer.rate}, {@code .server.handshake-timeout} and {@code .network-timeout}.
   */
  static PeerSettings of(Handover handover) {
    return new PeerSettings((int) Math.min(handover.number(MAX_CONNECTIONS_FIELD), 100_000),
        handover.number(RATE_FIELD), handover.number(HANDSHAKE_TIMEOUT_FIELD),
        handover.number(NETWORK_TIMEOUT_FIELD));
  }
}
