package io.sparksteward.shim.blob;

import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.sparksteward.shim.kernel.Checksums;
import io.sparksteward.shim.kernel.Errors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The handshake of one connection, the Python blob server's: the server sends a fresh nonce, the
 * client answers with an HMAC-SHA256 proof of the application's peer secret ({@code peers/key},
 * written by Python) over it, within the handshake timeout, not the network timeout; then the
 * connection takes an authenticated slot if one is free ({@link PeerAdmission}). Every refusal is
 * answered with an error code and one line.
 */
final class PeerHandshake {
  private static final Logger LOG = LoggerFactory.getLogger(PeerServer.class);
  private static final byte[] AUTH_DOMAIN =
      "spark-steward-blob-v1:".getBytes(StandardCharsets.UTF_8);
  private static final Pattern SECRET = Pattern.compile("[0-9a-f]{64}");

  private final Path keyFile;
  private final PeerSettings settings;
  private final PeerAdmission admission;
  private final PeerStats stats;
  private final LogThrottle throttle;
  private final SecureRandom random = new SecureRandom();
  private volatile String secret;

  PeerHandshake(Path keyFile, PeerSettings settings, PeerAdmission admission, PeerStats stats,
      LogThrottle throttle) {
    this.keyFile = keyFile;
    this.settings = settings;
    this.admission = admission;
    this.stats = stats;
    this.throttle = throttle;
  }

  /**
   * Challenge, proof, then a free authenticated slot; true when requests may follow (the slot is
   * then held: {@link PeerAdmission#finish} gives it back).
   */
  boolean run(PeerConnection conn) throws PeerConnection.Lost {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.handshakeMillis);
    byte[] nonceBytes = new byte[32];
    random.nextBytes(nonceBytes);
    String nonce = Checksums.hex(nonceBytes);
    conn.send(PeerProtocol.hello(nonce));
    ObjectNode answer = null;
    String problem;
    try {
      answer = conn.readFrame(PeerProtocol.AUTH_FRAME, deadline);
      problem = answer == null ? "the client closed the connection" : null;
    } catch (PeerProtocol.BadFrame e) {
      if (conn.dropped) {
        return false;
      }
      stats.badRequests.incrementAndGet();
      throttle.warn("bad_request", Errors.PREFIX + "bad handshake from {}: {}", conn.peer,
          e.getMessage());
      conn.sendQuietly(PeerProtocol.error(PeerProtocol.ERROR_BAD_REQUEST, e.getMessage()));
      conn.lingerClose();
      return false;
    } catch (SocketTimeoutException e) {
      problem = "no answer within " + settings.handshakeMillis + " ms";
    } catch (IOException e) {
      problem = e.toString();
    }
    if (conn.dropped) {
      LOG.debug(Errors.PREFIX + "peer connection from {} dropped in the handshake", conn.peer);
      return false;
    }
    if (problem == null) {
      String key = secret();
      if (key == null) {
        problem = "this host's peer key is not ready";
      } else if (!proofMatches(key, nonce, answer.get("auth"))) {
        problem = "the client does not hold this application's secret";
      }
    }
    if (problem != null) {
      stats.authFailures.incrementAndGet();
      throttle.warn("auth", Errors.PREFIX + "peer connection from {} failed authentication: {}",
          conn.peer, problem);
      conn.sendQuietly(PeerProtocol.error(PeerProtocol.ERROR_AUTH,
          "authentication failed: " + problem));
      conn.lingerClose();
      return false;
    }
    PeerAdmission.Slot slot = admission.authenticate(conn);
    if (slot == PeerAdmission.Slot.GONE) {
      return false;
    }
    if (slot == PeerAdmission.Slot.BUSY) {
      stats.refusedBusy.incrementAndGet();
      throttle.warn("busy", Errors.PREFIX + "peer server refused {}: {} authenticated "
          + "connections open", conn.peer, settings.maxConnections);
      conn.sendQuietly(PeerProtocol.error(PeerProtocol.ERROR_BUSY, "the peer server has "
          + settings.maxConnections + " connections open; retry later"));
      conn.lingerClose();
      return false;
    }
    try {
      conn.send(PeerProtocol.ok());
    } catch (PeerConnection.Lost e) {
      // The slot is released here: the caller counts it only when this returns true.
      admission.release();
      throw e;
    }
    return true;
  }

  /** The peer secret, read once it is there (null until Python has written it). */
  private String secret() {
    String cached = secret;
    if (cached != null) {
      return cached;
    }
    byte[] data = new byte[256];
    int got;
    try (FileChannel channel = RegularFiles.open(keyFile, 64, false)) {
      if (channel == null || channel.size() > data.length) {
        return null;
      }
      ByteBuffer view = ByteBuffer.wrap(data);
      while (view.hasRemaining() && channel.read(view) > 0) {
        // Until full or the end of the file.
      }
      got = view.position();
    } catch (IOException e) {
      throttle.warn("key", Errors.PREFIX + "the peer key {} cannot be read: {}", keyFile,
          e.toString());
      return null;
    }
    String text = new String(data, 0, got, StandardCharsets.US_ASCII);
    int end = text.length();
    while (end > 0 && Character.isWhitespace(text.charAt(end - 1))) {
      end--;
    }
    text = text.substring(0, end);
    if (!SECRET.matcher(text).matches()) {
      return null; // Still being written, or not a key: not ready.
    }
    secret = text;
    return text;
  }

  static boolean proofMatches(String secret, String nonce, JsonNode proof) {
    if (proof == null || !proof.isTextual()) {
      return false;
    }
    byte[] expected;
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
      mac.update(AUTH_DOMAIN);
      expected = Checksums.hex(mac.doFinal(nonce.getBytes(StandardCharsets.UTF_8)))
          .getBytes(StandardCharsets.US_ASCII);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HmacSHA256 is not available", e);
    }
    return MessageDigest.isEqual(expected, proof.textValue().getBytes(StandardCharsets.UTF_8));
  }
}
