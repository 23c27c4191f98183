package io.sparksteward.shim.blob;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Locale;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The peer protocol's framing and words, the Python blob server's ({@code
 * spark_steward.blob.protocol}): every frame is a JSON object behind a 4-byte big-endian length,
 * the length checked against the frame's limit before the body is read, the body refused when it
 * is not UTF-8, nests deeper than {@link #MAX_DEPTH} or is not one object. Replies are built here
 * too: the hello, ok and error frames.
 */
final class PeerProtocol {
  /** {@code blob.protocol.PROTOCOL_VERSION}, sent in the server's hello. */
  static final int PROTOCOL_VERSION = 1;
  /** {@code blob.protocol.HEADER_SIZE}: a frame's big-endian length prefix. */
  static final int HEADER_SIZE = 4;
  /** The requests a peer server answers (sent by {@code blob.client}, {@code blob.pieces}). */
  static final String OP_HAVE = "have";
  static final String OP_PIECE = "piece";
  /** The error codes of a reply; {@code blob.client} maps each to its own exception. */
  static final String ERROR_BAD_REQUEST = "bad_request";
  static final String ERROR_AUTH = "auth";
  static final String ERROR_BUSY = "busy";
  static final String ERROR_NOT_FOUND = "not_found";
  static final String ERROR_INTERNAL = "internal";
  /** The auth answer is ~80 bytes: an unauthenticated peer gets no more. */
  static final int AUTH_FRAME = 1024;
  static final int REQUEST_FRAME = 65536;
  /** Deeper JSON is never a request; refused before Jackson recurses into it. */
  static final int MAX_DEPTH = 32;

  private static final ObjectMapper MAPPER =
      new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  private PeerProtocol() {}

  /** The framing is broken: answered with bad_request, then the connection closes. */
  static final class BadFrame extends Exception {
    BadFrame(String message) {
      super(message, null, false, false);
    }
  }

  /** The length a frame's header announces. */
  static long length(byte[] head) {
    return ((head[0] & 0xffL) << 24) | ((head[1] & 0xffL) << 16)
        | ((head[2] & 0xffL) << 8) | (head[3] & 0xffL);
  }

  /** {@code frame} as the bytes on the wire: its length, then its JSON. */
  static byte[] encode(JsonNode frame) {
    byte[] body;
    try {
      body = MAPPER.writeValueAsBytes(frame);
    } catch (IOException e) {
      throw new IllegalStateException("a reply cannot be encoded", e);
    }
    byte[] bytes = new byte[HEADER_SIZE + body.length];
    bytes[0] = (byte) (body.length >>> 24);
    bytes[1] = (byte) (body.length >>> 16);
    bytes[2] = (byte) (body.length >>> 8);
    bytes[3] = (byte) body.length;
    System.arraycopy(body, 0, bytes, HEADER_SIZE, body.length);
    return bytes;
  }

  /** The body of a frame as a JSON object; BadFrame says why it is not one. */
  static ObjectNode decode(byte[] body) throws BadFrame {
    String text;
    try {
      text = StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(body)).toString();
    } catch (CharacterCodingException e) {
      throw new BadFrame("frame of " + body.length + " bytes is not valid UTF-8");
    }
    if (depth(text) > MAX_DEPTH) {
      throw new BadFrame("frame of " + body.length + " bytes nests JSON deeper than "
          + MAX_DEPTH);
    }
    JsonNode node;
    try {
      node = MAPPER.readTree(text);
    } catch (IOException | RuntimeException e) {
      String why = e instanceof com.fasterxml.jackson.core.JsonProcessingException
          ? ((com.fasterxml.jackson.core.JsonProcessingException) e).getOriginalMessage()
          : e.toString();
      throw new BadFrame("frame of " + body.length + " bytes is not valid JSON: "
          + truncate(String.valueOf(why), 120));
    }
    if (node == null || !node.isObject()) {
      throw new BadFrame("frame holds " + (node == null || node.isMissingNode() ? "no value"
          : "a JSON " + node.getNodeType().toString().toLowerCase(Locale.ROOT))
          + ", expected an object");
    }
    return (ObjectNode) node;
  }

  /** How deep arrays and objects nest in {@code json}, strings skipped. */
  private static int depth(String json) {
    int depth = 0;
    int deepest = 0;
    boolean inString = false;
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      if (inString) {
        if (c == '\\') {
          i++;
        } else if (c == '"') {
          inString = false;
        }
      } else if (c == '"') {
        inString = true;
      } else if (c == '[' || c == '{') {
        deepest = Math.max(deepest, ++depth);
      } else if (c == ']' || c == '}') {
        depth--;
      }
    }
    return deepest;
  }

  /** The server's first frame: the protocol version and the nonce to prove the secret over. */
  static ObjectNode hello(String nonce) {
    ObjectNode hello = MAPPER.createObjectNode();
    hello.put("protocol", PROTOCOL_VERSION);
    hello.put("nonce", nonce);
    return hello;
  }

  /** {@code {"ok": true}}, to which a reply adds its fields. */
  static ObjectNode ok() {
    ObjectNode reply = MAPPER.createObjectNode();
    reply.put("ok", true);
    return reply;
  }

  /** An error reply: a code of {@code ERROR_*} and one line. */
  static ObjectNode error(String code, String message) {
    ObjectNode reply = MAPPER.createObjectNode();
    reply.put("error", code);
    reply.put("message", message);
    return reply;
  }

  /** A new empty JSON object (the endpoint file's). */
  static ObjectNode object() {
    return MAPPER.createObjectNode();
  }

  /** {@code node}'s JSON bytes, no length in front (the endpoint file's). */
  static byte[] json(JsonNode node) throws IOException {
    return MAPPER.writeValueAsBytes(node);
  }

  /** A value for a one-line message: its JSON, truncated. */
  static String show(JsonNode node) {
    if (node == null) {
      return "(missing)";
    }
    return truncate(node.toString(), 80);
  }

  private static String truncate(String text, int max) {
    String line = text.replace('\n', ' ').replace('\r', ' ');
    return line.length() <= max ? line : line.substring(0, max) + "...";
  }
}
