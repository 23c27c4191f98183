"""The cached-table lifecycle (FLIP-36): pending → ready → marked for deletion, the failover
rules and the key scheme. Pure: records in, decisions out; no IO, no clock. LRU eviction is the
shared :mod:`spark_steward.lifecycle.lru`.

A table is recorded PENDING *before* any of its data is written, so a crashed driver leaves an
entry that names what to delete. Every materialization gets its own ``attempt`` id and data
folder, so re-materializing a key never races the still-running deletion of its previous
attempt. Shared tables are released when no live application holds a user record: the count is
derived from the records every time, never kept as a counter that can drift (FLINK-38347).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, Mapping

from spark_steward.tables.errors import InvalidTableKey, TableStateError


class TableState(enum.Enum):
    PENDING = "pending"
    READY = "ready"
    MARKED_FOR_DELETION = "marked-for-deletion"


#: Legal moves; marking an already marked table is a no-op (it keeps its first reason).
_MOVES: dict[TableState, frozenset[TableState]] = {
    TableState.PENDING: frozenset({TableState.READY, TableState.MARKED_FOR_DELETION}),
    TableState.READY: frozenset({TableState.MARKED_FOR_DELETION}),
    TableState.MARKED_FOR_DELETION: frozenset({TableState.MARKED_FOR_DELETION}),
}

_KEY = re.compile(r"^(p-[A-Za-z0-9._-]{1,80}-[A-Za-z0-9]{1,64}|s-[0-9a-f]{32})$")
_TOKEN = re.compile(r"^[A-Za-z0-9]{1,64}$")
_DIGEST = re.compile(r"^[0-9a-fA-F]{32,}$")
_ATTEMPT = re.compile(r"^[0-9a-z]{1,64}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_APP_IN_KEY = 80


@dataclass(frozen=True)
class TableEntry:
    """One cached table's durable entry.

    ``attempt`` names one materialization (its data folder); ``description`` is a short plan
    text for ``cache ls``; ``bytes`` and ``rows`` are known once READY.
    """

    key: str
    state: TableState
    shared: bool
    app_id: str
    attempt: str
    created_at: float
    description: str = ""
    bytes: int = 0
    rows: int = 0
    discard_reason: str = ""
    released_at: float | None = None  # shared: when its last live user let go (staged cleanup)

    @property
    def id(self) -> str:
        """``key/attempt``, for messages."""
        return f"{self.key}/{self.attempt}"

    def to_dict(self) -> dict[str, Any]:
        """The entry as the JSON body of its metadata record."""
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body["state"] = self.state.value
        return body

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "TableEntry":
        """Fields a newer version added are ignored, so an older reader still reads it."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in body.items() if k in known}
        values["state"] = TableState(values["state"])
        entry = cls(**values)
        validate_key(entry.key)
        validate_attempt(entry.attempt)
        return entry


def pending(key: str, *, shared: bool, app_id: str, attempt: str, now: float,
            description: str = "") -> TableEntry:
    """A new pending entry: written before any data, so a crash leaves something to clean."""
    return TableEntry(validate_key(key), TableState.PENDING, shared, app_id,
                      validate_attempt(attempt), now, description)


def transition(entry: TableEntry, to: TableState, *, reason: str = "", rows: int = 0,
               bytes_: int = 0) -> TableEntry:
    """The one way a table changes state; an illegal move raises naming the table.

    ``rows``/``bytes_`` are recorded on PENDING → READY, ``reason`` on the first mark.
    """
    if to not in _MOVES[entry.state]:
        verb = {TableState.READY: "become ready", TableState.PENDING: "become pending",
                TableState.MARKED_FOR_DELETION: "be marked"}[to]
        raise TableStateError(f"cached table {entry.id} cannot {verb}: it is "
                              f"{entry.state.value}")
    if entry.state is to:
        return entry
    if to is TableState.READY:
        return replace(entry, state=to, rows=rows, bytes=bytes_)
    return replace(entry, state=to, discard_reason=reason)


def to_clean_at_recovery(entries: Iterable[TableEntry], users: Mapping[str, set[str]],
                         is_dead: Callable[[str], bool], *, now: float = 0.0,
                         retention: float = 0.0) -> list[tuple[TableEntry, str]]:
    """``(entry, reason)`` of what failover must clean, by key.

    Marked tables; pending tables of dead applications (their write died with them); private
    tables of dead applications; shared tables none of whose users (``users[key]``, the
    applications holding a user record) is alive, once they were released ``retention``
    seconds before ``now`` (staged cleanup: a later application may still reuse them; see
    :func:`to_stamp_released`). ``is_dead`` is asked at most once per application and must
    answer False for the caller itself.
    """
    known: dict[str, bool] = {}

    def dead(app: str) -> bool:
        if app not in known:
            known[app] = is_dead(app)
        return known[app]

    found = []
    for entry in sorted(entries, key=lambda e: e.key):
        if entry.state is TableState.MARKED_FOR_DELETION:
            found.append((entry, entry.discard_reason or "marked for deletion"))
        elif entry.state is TableState.PENDING and dead(entry.app_id):
            found.append((entry, f"pending table of {entry.app_id}, which is gone"))
        elif not entry.shared and dead(entry.app_id):
            found.append((entry, f"private table of {entry.app_id}, which is gone"))
        elif entry.shared and not any(not dead(u) for u in sorted(users.get(entry.key, ()))):
            if entry.state is TableState.READY and retention > 0 and (
                    entry.released_at is None or now - entry.released_at < retention):
                continue  # first stage: kept for reuse until its retention ends
            found.append((entry, "shared table without a live user"))
    return found


def to_stamp_released(entries: Iterable[TableEntry], users: Mapping[str, set[str]],
                      is_dead: Callable[[str], bool]) -> list[TableEntry]:
    """Ready shared tables without a live user and without a release time: their users died
    without releasing them, so their retention starts now (the first stage of their cleanup)."""
    return [e for e in entries
            if e.shared and e.state is TableState.READY and e.released_at is None
            and not any(not is_dead(u) for u in sorted(users.get(e.key, ())))]


# -- keys ------------------------------------------------------------------------------------


def validate_key(key: str) -> str:
    """A key is one path segment: ``p-<app>-<token>`` (private) or ``s-<32 hex>`` (shared)."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidTableKey(f"cached table key {key!r} is not valid: expected "
                              "p-<application>-<token> or s-<32 hex digits>")
    return key


def validate_attempt(attempt: str) -> str:
    """``attempt`` when it is 1-64 lower-case letters or digits; InvalidTableKey otherwise."""
    if not isinstance(attempt, str) or not _ATTEMPT.fullmatch(attempt):
        raise InvalidTableKey(f"cached table attempt {attempt!r} is not valid: expected 1-64 "
                              "lower-case letters or digits")
    return attempt


def private_key(app_id: str, token: str) -> str:
    """Key of a table only ``app_id`` uses; shows the application so ``cache ls`` reads well.

    >>> private_key("local-1700000000000", "9f2c")
    'p-local-1700000000000-9f2c'
    """
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise InvalidTableKey(f"cached table token {token!r} is not valid: expected 1-64 letters "
                              "or digits")
    app = _UNSAFE.sub("-", str(app_id)).strip("-")[:_APP_IN_KEY] or "app"
    return validate_key(f"p-{app}-{token}")


def shared_key(digest_hex: str) -> str:
    """Key of a table any application computing the same plan over the same inputs reuses."""
    if not isinstance(digest_hex, str) or not _DIGEST.fullmatch(digest_hex):
        raise InvalidTableKey(f"cached table digest {digest_hex!r} is not valid: expected at "
                              "least 32 hex digits")
    return validate_key(f"s-{digest_hex[:32].lower()}")
