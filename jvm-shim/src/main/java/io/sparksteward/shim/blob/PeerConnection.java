package io.sparksteward.shim.blob;

import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * One accepted socket (a blocking channel): frames read by a deadline through its socket
 * adaptor, writes watched by the reaper. Only its own thread closes it once it may be in a
 * transferTo; other threads {@link #abort} it.
 *
 * <p>Frames are read through the channel's socket adaptor, whose reads honour SO_TIMEOUT on every
 * Java the shim runs on (8: a non-blocking read and poll; 11 and later: a timed poll). On Java 8 to
 * 21 a thread in transferTo is not known to the socket channel (25 registers it), so closing the
 * channel from another thread neither wakes it nor keeps its file descriptor from being reused
 * under it: other threads only shut an authenticated connection down (which fails the blocked
 * sendfile with EPIPE and ends reads); the thread serving it closes it.
 */
final class PeerConnection {
  private static final long LINGER_MILLIS = 200;

  final SocketChannel channel;
  final Socket socket;
  final String peer;
  final String address;
  /** The adaptor's stream: its reads honour the socket's SO_TIMEOUT (Java 8 and later). */
  final InputStream in;
  volatile boolean dropped;
  /** Shut down by the reaper or the stop: nothing more goes either way. */
  volatile boolean aborted;
  /** System.nanoTime() when the write under way began; 0 when none is. */
  volatile long writingSince;

  PeerConnection(SocketChannel channel) throws IOException {
    this.channel = channel;
    this.socket = channel.socket();
    this.address = socket.getInetAddress().getHostAddress();
    this.peer = address + ":" + socket.getPort();
    this.in = socket.getInputStream();
  }

  /** Writing to the socket failed: nothing more can be said to this peer. */
  static final class Lost extends Exception {
    Lost(String message) {
      super(message, null, false, false);
    }
  }

  /** The next frame, or null when the peer closed before one began. */
  ObjectNode readFrame(int limit, long deadline) throws IOException, PeerProtocol.BadFrame {
    byte[] head = new byte[PeerProtocol.HEADER_SIZE];
    int got = readFully(head, deadline);
    if (got == 0) {
      return null;
    }
    if (got < head.length) {
      throw new PeerProtocol.BadFrame("truncated frame: connection closed after " + got
          + (" of " + PeerProtocol.HEADER_SIZE + " length bytes"));
    }
    long length = PeerProtocol.length(head);
    if (length == 0) {
      throw new PeerProtocol.BadFrame("empty frame: a frame must hold a JSON object");
    }
    if (length > limit) {
      throw new PeerProtocol.BadFrame("frame length " + length + " exceeds the limit of " + limit
          + " bytes");
    }
    byte[] body = new byte[(int) length];
    got = readFully(body, deadline);
    if (got < body.length) {
      throw new PeerProtocol.BadFrame("truncated frame: connection closed after " + got + " of "
          + length + " bytes");
    }
    return PeerProtocol.decode(body);
  }

  /** Fills {@code into} unless the stream ends first; the whole read must end by deadline. */
  private int readFully(byte[] into, long deadline) throws IOException {
    int got = 0;
    while (got < into.length) {
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        throw new SocketTimeoutException("no complete frame in time");
      }
      socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE,
          TimeUnit.NANOSECONDS.toMillis(left + 999_999))));
      int n = in.read(into, got, into.length - got);
      if (n < 0) {
        break;
      }
      got += n;
    }
    return got;
  }

  void send(JsonNode frame) throws Lost {
    byte[] bytes = PeerProtocol.encode(frame);
    write(bytes, 0, bytes.length);
  }

  void sendQuietly(JsonNode frame) {
    try {
      send(frame);
    } catch (Lost e) {
      // The peer is gone: nothing to tell it.
    }
  }

  void write(byte[] bytes, int offset, int length) throws Lost {
    ByteBuffer view = ByteBuffer.wrap(bytes, offset, length);
    writingSince = System.nanoTime() | 1;
    try {
      while (view.hasRemaining()) {
        channel.write(view);
      }
    } catch (IOException e) {
      throw new Lost(e.toString());
    } finally {
      writingSince = 0;
    }
  }

  /**
   * {@code source.transferTo} this socket (sendfile): at most {@code count} bytes from
   * {@code position}, watched by the reaper as one write. IOException: the file or the socket
   * failed (sendfile does not say which).
   */
  long transfer(FileChannel source, long position, long count) throws IOException {
    writingSince = System.nanoTime() | 1;
    try {
      return source.transferTo(position, count, channel);
    } finally {
      writingSince = 0;
    }
  }

  /**
   * Half-close, then drain briefly: closing with unread input would send a RST that can
   * destroy the error reply before the client reads it.
   */
  void lingerClose() {
    try {
      socket.shutdownOutput();
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(LINGER_MILLIS);
      byte[] sink = new byte[4096];
      long left;
      while ((left = deadline - System.nanoTime()) > 0) {
        socket.setSoTimeout((int) Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
        if (in.read(sink) < 0) {
          break;
        }
      }
    } catch (IOException e) {
      // The peer is gone already, or the drain timed out: nothing left to protect.
    }
  }

  /**
   * From another thread: shuts both directions down, which fails a write or sendfile blocked
   * on a full socket (EPIPE) and ends a blocked read, without closing the file descriptor
   * that thread may still use.
   */
  void abort() {
    aborted = true;
    try {
      channel.shutdownOutput();
    } catch (IOException | RuntimeException e) {
      // Closed already: nothing to stop. Nothing escapes: the reaper must not die of it.
    }
    try {
      channel.shutdownInput();
    } catch (IOException | RuntimeException e) {
      // As above.
    }
  }

  void close() {
    closeQuietly(channel);
  }

  static void closeQuietly(java.io.Closeable closeable) {
    try {
      closeable.close();
    } catch (IOException e) {
      // Closing is all that was left to do.
    }
  }
}
