package io.sparksteward.shim.blob;

import java.util.concurrent.atomic.AtomicLong;

/** What one peer server did, for the line it logs when it stops. */
final class PeerStats {
  final AtomicLong piecesServed = new AtomicLong();
  final AtomicLong bytesServed = new AtomicLong();
  final AtomicLong authFailures = new AtomicLong();
  final AtomicLong badRequests = new AtomicLong();
  final AtomicLong refusedBusy = new AtomicLong();
  final AtomicLong droppedHandshakes = new AtomicLong();
}
