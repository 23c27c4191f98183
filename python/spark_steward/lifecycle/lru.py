"""The least-recently-used choice under a byte bound, shared by the cached tables
(:mod:`spark_steward.tables.service`) and the host-local working dir
(:mod:`spark_steward.local.working_dir`). Pure: usages in, keys out; no IO, no clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class CacheUsage:
    """What eviction needs to know of one cached item: a materialized table, or a host-local
    file of the working dir."""

    key: str
    bytes: int
    last_used: float
    in_use: bool


def choose_evictions(candidates: Iterable[CacheUsage], used_bytes: int, incoming_bytes: int,
                     max_bytes: int) -> list[str] | None:
    """Keys to evict, least recently used first, so ``incoming_bytes`` fit under ``max_bytes``.

    ``[]`` when it already fits (or ``max_bytes <= 0``: unbounded); None when even evicting
    every item not in use cannot make room: the caller then uses the new table uncached (or
    fails the host-local put).

    >>> choose_evictions([CacheUsage("a", 5, 1.0, False), CacheUsage("b", 5, 2.0, False)],
    ...                  used_bytes=10, incoming_bytes=4, max_bytes=10)
    ['a']
    """
    if max_bytes <= 0:
        return []
    excess = used_bytes + incoming_bytes - max_bytes
    if excess <= 0:
        return []
    chosen, freed = [], 0
    for usage in sorted((c for c in candidates if not c.in_use),
                        key=lambda c: (c.last_used, c.key)):
        chosen.append(usage.key)
        freed += usage.bytes
        if freed >= excess:
            return chosen
    return None
