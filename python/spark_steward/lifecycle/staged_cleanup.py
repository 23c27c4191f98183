"""Staged cleanup (FLIP-19): an unreferenced item is deleted the *second* time the periodic
cleanup finds it unreferenced.

Two lists: ``delete_now`` and ``delete_next``. Each :meth:`StagedCleanup.tick` returns what is
in ``delete_now`` (the caller deletes it) and promotes ``delete_next``. An item staged between
two ticks therefore stays at least one interval and at most two, and re-use in that window
(:meth:`rescue`) keeps it. Cheaper than a deadline per item and exactly as strong. Pure: no
clock, no IO; the caller ticks every ``blob.retention.interval`` and does the deleting.
"""

from __future__ import annotations

from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


class StagedCleanup(Generic[K]):
    def __init__(self) -> None:
        self._delete_now: set[K] = set()
        self._delete_next: set[K] = set()

    def stage(self, key: K) -> None:
        """``key`` became unreferenced: delete it at the tick after next unless rescued."""
        if key not in self._delete_now:
            self._delete_next.add(key)

    def rescue(self, key: K) -> bool:
        """``key`` is in use again; True if it was waiting for deletion."""
        found = key in self._delete_now or key in self._delete_next
        self._delete_now.discard(key)
        self._delete_next.discard(key)
        return found

    def tick(self) -> list[K]:
        """Returns the keys to delete now, in a stable order, and stages the next ones."""
        due = sorted(self._delete_now, key=repr)
        self._delete_now, self._delete_next = self._delete_next, set()
        return due

    def drain(self) -> list[K]:
        """Everything still waiting (shutdown deletes all of it)."""
        pending = sorted(self._delete_now | self._delete_next, key=repr)
        self._delete_now.clear()
        self._delete_next.clear()
        return pending

    def is_waiting(self, key: K) -> bool:
        """True while ``key`` waits in either stage."""
        return key in self._delete_now or key in self._delete_next

    def __len__(self) -> int:
        return len(self._delete_now) + len(self._delete_next)
