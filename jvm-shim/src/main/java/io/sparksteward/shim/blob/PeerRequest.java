package io.sparksteward.shim.blob;

import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * A validated {@code have} or {@code piece} request: the key, the scope and every number are
 * checked against the blob layer's limits ({@code blob.pieces}) before any path is touched, so
 * nothing in it can name another path.
 */
final class PeerRequest {
  static final long MAX_SIZE = 1L << 50;
  static final long MIN_PIECE = 65536;
  static final long MAX_PIECE = 1L << 30;
  static final long MAX_PIECES = 65536;

  private static final Pattern KEY = Pattern.compile("[0-9a-f]{64}");
  private static final Pattern SCOPE =
      Pattern.compile("_app|[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\\.[0-9]{1,9}");

  String key;
  String scope;
  long size;
  long pieceSize;
  long pieces;
  long index = -1;
  long offset;
  long length;

  private PeerRequest() {}

  /** A well-framed request that is not valid: answered with bad_request; the connection stays. */
  static final class BadRequest extends Exception {
    BadRequest(String message) {
      super(message, null, false, false);
    }
  }

  static PeerRequest parse(ObjectNode request, boolean piece) throws BadRequest {
    PeerRequest r = new PeerRequest();
    r.key = text(request, "key", KEY, "64 lowercase hex digits (a SHA-256)");
    r.scope = text(request, "scope", SCOPE, "'_app' or '<name>.<number>'");
    r.size = integer(request, "size", 1, MAX_SIZE);
    r.pieceSize = integer(request, "piece_size", MIN_PIECE, MAX_PIECE);
    r.pieces = (r.size + r.pieceSize - 1) / r.pieceSize;
    if (r.pieces > MAX_PIECES) {
      throw new BadRequest("size " + r.size + " with piece_size " + r.pieceSize + " makes "
          + r.pieces + " pieces: at most " + MAX_PIECES);
    }
    if (piece) {
      r.index = integer(request, "index", 0, MAX_PIECES - 1);
      if (r.index >= r.pieces) {
        throw new BadRequest("index " + r.index + " is not valid: the blob has " + r.pieces
            + " pieces");
      }
      r.offset = r.index * r.pieceSize;
      r.length = Math.min(r.pieceSize, r.size - r.offset);
    }
    return r;
  }

  private static String text(ObjectNode request, String field, Pattern valid, String expected)
      throws BadRequest {
    JsonNode node = request.get(field);
    if (node == null || !node.isTextual() || !valid.matcher(node.textValue()).matches()) {
      throw new BadRequest(field + " " + PeerProtocol.show(node) + " is not valid: expected "
          + expected);
    }
    return node.textValue();
  }

  private static long integer(ObjectNode request, String field, long min, long max)
      throws BadRequest {
    JsonNode node = request.get(field);
    if (node == null || !node.isIntegralNumber() || !node.canConvertToLong()
        || node.longValue() < min || node.longValue() > max) {
      throw new BadRequest(field + " " + PeerProtocol.show(node) + " is not valid: expected a "
          + "whole number from " + min + " to " + max);
    }
    return node.longValue();
  }
}
