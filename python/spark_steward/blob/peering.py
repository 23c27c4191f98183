"""The driver's side of peer fetch: each blob's piece plan, and which hosts hold or fill it.

A fetcher's ``swarm`` request names the peer endpoints of its own host (the executor JVMs that
serve its blob cache) and the peers it had to drop; it is recorded as a holder from then on,
since it serves verified pieces while it fills, and gets the plan and some other holders. The
list is advice: a holder that left, died or lies costs a fetcher a connection or a piece, never
wrong bytes (every piece is checked against the plan). Holders are forgotten with the blob.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from typing import BinaryIO, Callable

from spark_steward.blob.keys import BlobKey
from spark_steward.blob.pieces import PiecePlan, parse_endpoint, piece_size_for
from spark_steward.checksum import crc32c_of
from spark_steward.blob.errors import BlobProtocolError

Entry = tuple[str, BlobKey]

#: Holders remembered per blob (the newest); more only shift which ones are handed out.
MAX_HOLDERS = 4096
#: Most endpoints one request may name or ask for.
MAX_LISTED = 64
#: Seconds before the origin sends a piece it already sent again (see PeerDirectory.pick).
REPEAT_AFTER = 2.0


class PeerDirectory:
    """Thread-safe; bounded per blob."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[Entry, OrderedDict[str, None]] = {}
        self._plans: dict[Entry, PiecePlan] = {}
        self._planning: dict[Entry, threading.Lock] = {}
        self._served: dict[Entry, dict[int, tuple[int, float]]] = {}  # sends, last send

    def plan(self, entry: Entry, size: int, open_blob: Callable[[], BinaryIO]) -> PiecePlan:
        """The blob's plan, computed once from its verified copy (``open_blob``)."""
        with self._lock:
            known = self._plans.get(entry)
            if known is not None:
                return known
            lock = self._planning.setdefault(entry, threading.Lock())
        with lock:
            with self._lock:
                known = self._plans.get(entry)
            if known is not None:
                return known
            piece_size = piece_size_for(size)
            crcs = []
            with open_blob() as f:
                buffer = memoryview(bytearray(piece_size))
                for offset in range(0, size, piece_size):
                    n = f.readinto(buffer[:min(piece_size, size - offset)])  # type: ignore[attr-defined]
                    crcs.append(crc32c_of(buffer[:n]))
            plan = PiecePlan(size, piece_size, tuple(crcs))
            with self._lock:
                self._plans[entry] = plan
                self._planning.pop(entry, None)
            return plan

    def join(self, entry: Entry, serve: object, drop: object, want: object) -> list[str]:
        """Records the requester's endpoints as holders, forgets the ones it dropped, and
        returns up to ``want`` other holders, newest first, at random among them."""
        own = _endpoints(serve, "serve")
        dropped = _endpoints(drop, "drop")
        if type(want) is not int or not 0 <= want <= MAX_LISTED:
            raise BlobProtocolError(f"'want' must be an integer 0..{MAX_LISTED}, got "
                                    f"{want!r:.20}")
        with self._lock:
            holders = self._holders.setdefault(entry, OrderedDict())
            for endpoint in dropped:
                holders.pop(endpoint, None)
            others = [e for e in reversed(holders) if e not in own]
            for endpoint in own:
                holders[endpoint] = None
                holders.move_to_end(endpoint)
            while len(holders) > MAX_HOLDERS:
                holders.popitem(last=False)
        recent = others[:4 * max(want, 1)]
        return random.sample(recent, min(want, len(recent)))

    def pick(self, entry: Entry, need: frozenset[int], now: float | None = None
             ) -> int | None:
        """The needed piece the origin has served least (ties at random), counted as served,
        or None: wait. Hosts that start together get different pieces first and pass them on,
        so the origin sends about one copy instead of one per host. A piece already out is
        sent again only ``REPEAT_AFTER`` seconds after its last send: by then the host that
        got it has passed it on, or it died with it."""
        now = time.monotonic() if now is None else now
        with self._lock:
            served = self._served.setdefault(entry, {})
            least = min(served.get(i, (0, 0.0))[0] for i in need)
            candidates = [i for i in need if served.get(i, (0, 0.0))[0] == least]
            if least:
                candidates = [i for i in candidates if now - served[i][1] >= REPEAT_AFTER]
                if not candidates:
                    return None
            index = random.choice(candidates)
            served[index] = (least + 1, now)
            return index

    def forget(self, scope: str, key: BlobKey | None = None) -> None:
        """The blob (or the whole scope) is gone: no plan, no holders."""
        with self._lock:
            for entry in [e for e in (*self._plans, *self._holders, *self._served)
                          if e[0] == scope and (key is None or e[1] == key)]:
                self._plans.pop(entry, None)
                self._holders.pop(entry, None)
                self._served.pop(entry, None)

    def holders(self, entry: Entry) -> list[str]:
        """The peer endpoints that announced holding ``entry``."""
        with self._lock:
            return list(self._holders.get(entry, ()))


def _endpoints(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_LISTED:
        raise BlobProtocolError(f"{field!r} must be a list of at most {MAX_LISTED} endpoints")
    return [parse_endpoint(v) for v in value]
