package io.sparksteward.shim.blob;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.RejectedExecutionException;

/**
 * Which connections the peer server holds, so that nobody without the secret can lock good
 * clients out: connections still in the handshake are bounded apart from authenticated ones
 * (globally and per peer address; the oldest is dropped to admit a new one), authenticated ones
 * by {@code max-connections}; and whether the server admits any more at all. Thread-safe: every
 * change happens under one lock.
 */
final class PeerAdmission {
  static final int MAX_PENDING = 64;
  static final int MAX_PENDING_PER_PEER = 8;

  private final int maxAuthenticated;
  private final Object lock = new Object();
  private final Set<PeerConnection> live = new HashSet<>();
  /** In the handshake, oldest first. */
  private final LinkedHashSet<PeerConnection> pending = new LinkedHashSet<>();
  private final Map<String, Integer> pendingPerPeer = new HashMap<>();
  private int authenticated;
  private volatile boolean stopped;

  PeerAdmission(int maxAuthenticated) {
    this.maxAuthenticated = maxAuthenticated;
  }

  /** What admitting one connection did. */
  static final class Admitted {
    /** Connections in the handshake dropped to make room (to be closed by the caller). */
    final List<PeerConnection> dropped;
    /** No handler thread was free: the connection is not held (to be closed by the caller). */
    final boolean refused;

    Admitted(List<PeerConnection> dropped, boolean refused) {
      this.dropped = dropped;
      this.refused = refused;
    }
  }

  /** Whether {@link #stop} was called. */
  boolean stopped() {
    return stopped;
  }

  /**
   * Holds {@code conn} as in the handshake (dropping the oldest beyond a bound) and runs {@code
   * start}, which hands it to a handler thread or throws RejectedExecutionException. Null when the
   * server stopped (the connection is closed then).
   */
  Admitted admit(PeerConnection conn, Runnable start) {
    List<PeerConnection> dropped = new ArrayList<>(2);
    boolean refused = false;
    synchronized (lock) {
      if (stopped) {
        conn.close();
        return null;
      }
      if (pendingPerPeer.getOrDefault(conn.address, 0) >= MAX_PENDING_PER_PEER) {
        for (PeerConnection old : pending) {
          if (old.address.equals(conn.address)) {
            dropped.add(old);
            break;
          }
        }
      }
      if (pending.size() - dropped.size() >= MAX_PENDING) {
        for (PeerConnection old : pending) {
          if (!dropped.contains(old)) {
            dropped.add(old);
            break;
          }
        }
      }
      for (PeerConnection old : dropped) {
        old.dropped = true;
        leavePending(old);
      }
      pending.add(conn);
      pendingPerPeer.merge(conn.address, 1, Integer::sum);
      live.add(conn);
      try {
        start.run();
      } catch (RejectedExecutionException e) {
        unregister(conn);
        refused = true;
      }
    }
    return new Admitted(dropped, refused);
  }

  /** How the handshake of a connection ends once its client proved the secret. */
  enum Slot {
    /** Dropped meanwhile (or the server stopped): nothing more to say. */
    GONE,
    /** Every authenticated slot is taken. */
    BUSY,
    /** Authenticated: requests may follow; {@link #finish} gives the slot back. */
    TAKEN
  }

  /** Moves {@code conn} out of the handshake into an authenticated slot if one is free. */
  Slot authenticate(PeerConnection conn) {
    synchronized (lock) {
      if (conn.dropped || !pending.contains(conn)) {
        return Slot.GONE;
      }
      leavePending(conn);
      if (authenticated >= maxAuthenticated) {
        return Slot.BUSY;
      }
      authenticated++;
      return Slot.TAKEN;
    }
  }

  /** Gives back a slot {@link #authenticate} took, before the connection is finished. */
  void release() {
    synchronized (lock) {
      authenticated--;
    }
  }

  /** {@code conn} ended: it is no longer held, and its slot is free when it held one. */
  void finish(PeerConnection conn, boolean heldSlot) {
    synchronized (lock) {
      unregister(conn);
      if (heldSlot) {
        authenticated--;
      }
    }
  }

  /** The connections whose write under way began over {@code limitNanos} before {@code now}. */
  List<PeerConnection> stalled(long now, long limitNanos) {
    List<PeerConnection> stalled = new ArrayList<>();
    synchronized (lock) {
      for (PeerConnection c : live) {
        long since = c.writingSince;
        if (since != 0 && now - since > limitNanos) {
          stalled.add(c);
        }
      }
    }
    return stalled;
  }

  /** Admits no more; the connections held now, or null when it was stopped already. */
  List<PeerConnection> stop() {
    synchronized (lock) {
      if (stopped) {
        return null;
      }
      stopped = true;
      return new ArrayList<>(live);
    }
  }

  /** The caller holds the lock. */
  private void leavePending(PeerConnection conn) {
    if (pending.remove(conn)) {
      pendingPerPeer.computeIfPresent(conn.address, (k, n) -> n > 1 ? n - 1 : null);
    }
  }

  /** The caller holds the lock. */
  private void unregister(PeerConnection conn) {
    leavePending(conn);
    live.remove(conn);
  }
}
