package io.sparksteward.shim.blob;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.sparksteward.shim.kernel.Errors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Serves one connection on a handler thread: the handshake, then {@code have} and {@code piece}
 * requests until the client closes, a frame is broken, the network timeout passes or the server
 * stops. A piece's body goes from the file to the socket with {@link FileChannel#transferTo}
 * (sendfile on Linux), never through the heap, in chunks paid to the upload cap first. Replies
 * carry an error code and one line, never a stack trace.
 */
final class PeerHandler {
  private static final Logger LOG = LoggerFactory.getLogger(PeerServer.class);
  /**
   * Bytes per transferTo call, the most a single write can take: a client that does not
   * take 1 MiB within the network timeout is cut.
   */
  static final int CHUNK_BYTES = 1 << 20;
  /** transferTo calls in a row that may move nothing before the connection is given up. */
  private static final int MAX_ZERO_TRANSFERS = 3;

  private final PeerSettings settings;
  private final PeerAdmission admission;
  private final PeerHandshake handshake;
  private final PieceFiles files;
  private final TokenBucket bucket;
  private final PeerStats stats;
  private final LogThrottle throttle;

  PeerHandler(PeerSettings settings, PeerAdmission admission, PeerHandshake handshake,
      PieceFiles files, PeerStats stats, LogThrottle throttle) {
    this.settings = settings;
    this.admission = admission;
    this.handshake = handshake;
    this.files = files;
    this.bucket = settings.rate > 0 ? new TokenBucket(settings.rate, CHUNK_BYTES) : null;
    this.stats = stats;
    this.throttle = throttle;
  }

  /** The blob or piece asked for is not on this host: answered with not_found. */
  private static final class NotFound extends Exception {
    NotFound(String message) {
      super(message, null, false, false);
    }
  }

  /** Serves {@code conn} until it ends, then closes it. */
  void serve(PeerConnection conn) {
    boolean counted = false;
    try {
      if (conn.dropped || admission.stopped()) {
        return;
      }
      if (handshake.run(conn)) {
        counted = true;
        while (!admission.stopped() && serveOne(conn)) {
          // Next request.
        }
      }
    } catch (PeerConnection.Lost e) {
      LOG.debug(Errors.PREFIX + "peer connection from {} lost: {}", conn.peer, e.getMessage());
    } catch (RuntimeException e) {
      LOG.warn(Errors.PREFIX + "peer connection from {} failed unexpectedly", conn.peer, e);
    } finally {
      admission.finish(conn, counted);
      conn.close();
    }
  }

  /** Answers one request; false when the connection must end. */
  private boolean serveOne(PeerConnection conn) throws PeerConnection.Lost {
    ObjectNode request;
    try {
      request = conn.readFrame(PeerProtocol.REQUEST_FRAME,
          System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.idleMillis));
      if (request == null) {
        return false;
      }
    } catch (PeerProtocol.BadFrame e) {
      badRequest(conn, e.getMessage());
      conn.sendQuietly(PeerProtocol.error(PeerProtocol.ERROR_BAD_REQUEST, e.getMessage()));
      conn.lingerClose();
      return false;
    } catch (IOException e) {
      LOG.debug(Errors.PREFIX + "peer connection from {} ended: {}", conn.peer, e.toString());
      return false;
    }
    try {
      return dispatch(conn, request);
    } catch (PeerRequest.BadRequest e) {
      badRequest(conn, e.getMessage());
      conn.send(PeerProtocol.error(PeerProtocol.ERROR_BAD_REQUEST, e.getMessage()));
    } catch (NotFound e) {
      conn.send(PeerProtocol.error(PeerProtocol.ERROR_NOT_FOUND, e.getMessage()));
    } catch (IOException | RuntimeException e) {
      LOG.warn(Errors.PREFIX + "peer request {} from {} failed unexpectedly",
          PeerProtocol.show(request.get("op")), conn.peer, e);
      conn.send(PeerProtocol.error(PeerProtocol.ERROR_INTERNAL, e.getClass().getName()));
    }
    return true;
  }

  private void badRequest(PeerConnection conn, String message) {
    stats.badRequests.incrementAndGet();
    throttle.warn("bad_request", Errors.PREFIX + "bad peer request from {}: {}", conn.peer,
        message);
  }

  private boolean dispatch(PeerConnection conn, ObjectNode request)
      throws PeerRequest.BadRequest, NotFound, IOException, PeerConnection.Lost {
    JsonNode op = request.get("op");
    if (op == null || !op.isTextual()) {
      throw new PeerRequest.BadRequest("request needs an 'op' string, got "
          + PeerProtocol.show(op));
    }
    if (PeerProtocol.OP_HAVE.equals(op.textValue())) {
      have(conn, PeerRequest.parse(request, false));
      return true;
    }
    if (PeerProtocol.OP_PIECE.equals(op.textValue())) {
      return piece(conn, PeerRequest.parse(request, true));
    }
    throw new PeerRequest.BadRequest("op " + PeerProtocol.show(op) + (" is not known: expected '"
        + PeerProtocol.OP_HAVE + "' or '" + PeerProtocol.OP_PIECE + "'"));
  }

  private void have(PeerConnection conn, PeerRequest r)
      throws NotFound, IOException, PeerConnection.Lost {
    PieceFiles.Held held = files.held(r);
    if (held == null) {
      throw new NotFound("blob " + r.scope + "/" + r.key + " is not on this host");
    }
    ObjectNode reply = PeerProtocol.ok();
    reply.put("complete", held.complete);
    if (!held.complete) {
      reply.put("have", held.flags);
    }
    conn.send(reply);
  }

  /** Sends the piece; false when the connection must end (a file shorter than announced). */
  private boolean piece(PeerConnection conn, PeerRequest r)
      throws NotFound, IOException, PeerConnection.Lost {
    FileChannel source = null;
    try {
      source = files.openPiece(r);
      if (source == null) {
        throw new NotFound("piece " + r.index + " of blob " + r.scope + "/" + r.key
            + " is not on this host");
      }
      ObjectNode header = PeerProtocol.ok();
      header.put("offset", r.offset);
      header.put("length", r.length);
      conn.send(header);
      return sendBody(conn, source, r);
    } finally {
      if (source != null) {
        PeerConnection.closeQuietly(source);
      }
    }
  }

  /**
   * Sends {@code r}'s bytes from {@code source} in chunks (each one paid to the upload cap
   * first); false when the connection must end: the file is shorter than announced or cannot
   * be read (the peer already has part of the body, so nothing is padded or said).
   */
  private boolean sendBody(PeerConnection conn, FileChannel source, PeerRequest r)
      throws PeerConnection.Lost {
    int step = bucket == null ? CHUNK_BYTES : bucket.step;
    long sent = 0;
    int zeros = 0;
    while (sent < r.length) {
      int want = (int) Math.min(step, r.length - sent);
      if (bucket != null) {
        try {
          bucket.take(want);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new PeerConnection.Lost("interrupted");
        }
      }
      long chunkEnd = sent + want;
      while (sent < chunkEnd) {
        long position = r.offset + sent;
        long n;
        IOException failed = null;
        try {
          n = conn.transfer(source, position, chunkEnd - sent);
        } catch (IOException e) {
          n = -1;
          failed = e;
        }
        if (n > 0) {
          sent += n;
          zeros = 0;
          continue;
        }
        // Failed or moved nothing: sendfile does not say whether the file or the socket is to
        // blame, so the file is asked.
        String problem = fileProblem(conn, source, position);
        if (problem == null) {
          if (failed != null) {
            throw new PeerConnection.Lost(failed.toString());
          }
          if (++zeros >= MAX_ZERO_TRANSFERS) {
            throw new PeerConnection.Lost("transferTo moved no byte " + zeros + " times in a row");
          }
        } else if (problem.isEmpty()) {
          throttle.warn("short", Errors.PREFIX + "blob {}/{} ended {} bytes into piece {} of {} "
              + "announced; closing the connection from {}", r.scope, r.key, sent, r.index,
              r.length, conn.peer);
          return false;
        } else {
          throttle.warn("read", Errors.PREFIX + "reading piece {} of blob {}/{} failed ({}); "
              + "closing the connection from {}", r.index, r.scope, r.key, problem, conn.peer);
          return false;
        }
      }
    }
    stats.piecesServed.incrementAndGet();
    stats.bytesServed.addAndGet(sent);
    return true;
  }

  /**
   * What is wrong with {@code source} at {@code position} after a transferTo failed or moved
   * nothing: "" when the file ends there, why it cannot be read, or null when it can (so the
   * socket is to blame) or the connection is being cut or stopped anyway.
   */
  private String fileProblem(PeerConnection conn, FileChannel source, long position) {
    if (admission.stopped() || conn.aborted || !source.isOpen()
        || Thread.currentThread().isInterrupted()) {
      return null;
    }
    try {
      if (source.size() <= position) {
        return "";
      }
      return source.read(ByteBuffer.allocate(1), position) < 0 ? "" : null;
    } catch (IOException e) {
      return e.toString();
    }
  }
}
