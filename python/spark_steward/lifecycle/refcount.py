"""Reference counts that cannot go negative silently.

Pure bookkeeping: who holds how many references to what. Callers act on the transitions the
methods return (``became_unreferenced``), so the deletion policy stays outside.
"""

from __future__ import annotations

import logging
from typing import Generic, Hashable, Iterator, TypeVar

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


class RefCounts(Generic[K]):
    """Counts per key. A key is *tracked* from :meth:`track` (count 0) until :meth:`forget`."""

    def __init__(self) -> None:
        self._counts: dict[K, int] = {}
        self.underflows = 0

    def track(self, key: K, initial: int = 0) -> None:
        """Starts counting ``key`` (idempotent: an existing count is kept)."""
        if initial < 0:
            raise ValueError(f"initial reference count of {key!r} must be >= 0, got {initial}")
        self._counts.setdefault(key, initial)

    def acquire(self, key: K, n: int = 1) -> bool:
        """Adds ``n`` references; True when ``key`` was unreferenced before (a rescue)."""
        if n <= 0:
            raise ValueError(f"acquire of {key!r} needs n >= 1, got {n}")
        before = self._counts.get(key, 0)
        self._counts[key] = before + n
        return before == 0

    def release(self, key: K, n: int = 1) -> bool:
        """Drops ``n`` references; True when this made ``key`` unreferenced.

        Releasing more than is held (a duplicated task-end, say) clamps at zero and is counted
        in ``underflows`` and logged, never turned into a negative count.
        """
        if n <= 0:
            raise ValueError(f"release of {key!r} needs n >= 1, got {n}")
        before = self._counts.get(key)
        if before is None:
            self.underflows += 1
            log.warning("release of untracked %r ignored", key)
            return False
        if n > before:
            self.underflows += 1
            log.warning("release of %r by %d exceeds its %d references; clamped", key, n, before)
        after = max(0, before - n)
        self._counts[key] = after
        return before > 0 and after == 0

    def reset(self, key: K) -> bool:
        """Sets the count to zero; True when it was referenced before."""
        before = self._counts.get(key, 0)
        if key in self._counts:
            self._counts[key] = 0
        return before > 0

    def forget(self, key: K) -> None:
        """Stops tracking ``key``."""
        self._counts.pop(key, None)

    def count(self, key: K) -> int:
        """``key``'s reference count (0 when untracked)."""
        return self._counts.get(key, 0)

    def is_tracked(self, key: K) -> bool:
        """True while ``key`` is tracked."""
        return key in self._counts

    def unreferenced(self) -> Iterator[K]:
        """The tracked keys with no reference."""
        return (k for k, c in self._counts.items() if c == 0)

    def __len__(self) -> int:
        return len(self._counts)
