"""The pure cached-table rules: state transitions, what failover cleans, LRU eviction and keys."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward.errors import InvalidTableKey, TableStateError
from spark_steward.lifecycle.lru import CacheUsage, choose_evictions
from spark_steward.tables.lifecycle import (TableEntry, TableState, pending, private_key,
                                            shared_key, to_clean_at_recovery, transition,
                                            validate_key)
from tests.unit.conftest import Liveness

PENDING, READY, MARKED = TableState.PENDING, TableState.READY, TableState.MARKED_FOR_DELETION
KEY = "p-app-me-0001"
SHARED = "s-" + "ab" * 16


def entry(key: str = KEY, state: TableState = PENDING, *, shared: bool = False,
          app: str = "app-me", attempt: str = "a1", reason: str = "") -> TableEntry:
    made = pending(key, shared=shared, app_id=app, attempt=attempt, now=10.0, description="plan")
    return replace(made, state=state, discard_reason=reason)


# -- transitions -------------------------------------------------------------------------------

LEGAL = {(PENDING, READY), (PENDING, MARKED), (READY, MARKED), (MARKED, MARKED)}


@pytest.mark.parametrize("start,to", list(itertools.product(TableState, TableState)))
def test_only_the_legal_moves_are_allowed(start: TableState, to: TableState) -> None:
    before = entry(state=start)
    if (start, to) in LEGAL:
        assert transition(before, to).state is to
    else:
        with pytest.raises(TableStateError, match=rf"{KEY}/a1 cannot .*: it is {start.value}"):
            transition(before, to)


def test_ready_records_rows_and_bytes() -> None:
    ready = transition(entry(), READY, rows=7, bytes_=4096)
    assert (ready.state, ready.rows, ready.bytes, ready.created_at) == (READY, 7, 4096, 10.0)


def test_marking_twice_keeps_the_first_reason() -> None:
    marked = transition(entry(state=READY), MARKED, reason="invalidated")
    assert transition(marked, MARKED, reason="stopped") is marked
    assert marked.discard_reason == "invalidated"


def test_completing_a_marked_table_names_it() -> None:
    with pytest.raises(TableStateError, match="p-app-me-0001/a1 cannot become ready: it is "
                                              "marked-for-deletion"):
        transition(entry(state=MARKED), READY)


def test_entry_round_trips_and_ignores_fields_it_does_not_know() -> None:
    ready = transition(entry(shared=True, key=SHARED), READY, rows=3, bytes_=9)
    body = ready.to_dict()
    assert body["state"] == "ready" and body["shared"] is True
    assert TableEntry.from_dict(dict(body, added_by_a_newer_version=1)) == ready


@pytest.mark.parametrize("field,value", [("key", "../etc"), ("attempt", "A/B"),
                                         ("state", "gone")])
def test_an_entry_with_a_bad_field_is_refused(field: str, value: str) -> None:
    with pytest.raises(ValueError, match="etc|A/B|gone"):
        TableEntry.from_dict(dict(entry().to_dict(), **{field: value}))


# -- recovery ----------------------------------------------------------------------------------


def decisions(entries: list[TableEntry], users: dict[str, set[str]],
              *dead: str) -> dict[str, str]:
    return {e.key: reason for e, reason in to_clean_at_recovery(entries, users, Liveness(*dead))}


def test_marked_tables_are_cleaned_whoever_owns_them() -> None:
    marked = entry(state=MARKED, reason="invalidated")
    assert decisions([marked], {}) == {KEY: "invalidated"}
    assert decisions([replace(marked, discard_reason="")], {}) == {KEY: "marked for deletion"}


@pytest.mark.parametrize("state", [PENDING, READY])
def test_private_tables_go_with_their_application(state: TableState) -> None:
    table = entry(state=state, app="app-old")
    assert decisions([table], {}) == {}
    reason = decisions([table], {}, "app-old")[KEY]
    assert "app-old" in reason and ("pending" if state is PENDING else "private") in reason


def test_pending_shared_table_of_a_dead_application_goes_even_with_live_users() -> None:
    table = entry(SHARED, PENDING, shared=True, app="app-old")
    assert decisions([table], {SHARED: {"app-old", "app-live"}}, "app-old") == {
        SHARED: "pending table of app-old, which is gone"}


def test_shared_table_stays_while_one_live_user_remains() -> None:
    table = entry(SHARED, READY, shared=True, app="app-old")
    assert decisions([table], {SHARED: {"app-old", "app-live"}}, "app-old") == {}


@pytest.mark.parametrize("users", [set(), {"app-old"}, {"app-old", "app-gone"}])
def test_shared_table_without_a_live_user_is_released(users: set[str]) -> None:
    table = entry(SHARED, READY, shared=True, app="app-live")
    assert decisions([table], {SHARED: users}, "app-old", "app-gone") == {
        SHARED: "shared table without a live user"}


def test_shared_table_of_a_live_owner_without_records_is_released() -> None:
    # The count comes from the records alone: a live owner that dropped its record does not
    # keep the table (no counter can drift and pin it forever).
    table = entry(SHARED, READY, shared=True, app="app-live")
    assert list(decisions([table], {})) == [SHARED]


def test_liveness_is_asked_once_per_application() -> None:
    liveness = Liveness("app-old")
    tables = [entry(f"p-app-old-{i}", READY, app="app-old", attempt=f"a{i}") for i in range(5)]
    tables.append(entry(SHARED, READY, shared=True, app="app-old"))
    found = to_clean_at_recovery(tables, {SHARED: {"app-old", "app-x"}}, liveness)
    assert [e.key for e, _ in found] == sorted(e.key for e in tables[:5])
    assert sorted(liveness.asked) == ["app-old", "app-x"]


# -- eviction ----------------------------------------------------------------------------------


def use(key: str, size: int, last_used: float, in_use: bool = False) -> CacheUsage:
    return CacheUsage(key, size, last_used, in_use)


TABLES = [use("a", 40, 3.0), use("b", 30, 1.0), use("c", 20, 2.0, in_use=True), use("d", 10, 4.0)]


def test_nothing_is_evicted_when_the_new_table_fits() -> None:
    assert choose_evictions(TABLES, 100, 20, 120) == []
    assert choose_evictions([], 0, 120, 120) == []


@pytest.mark.parametrize("limit", [0, -1])
def test_no_limit_never_evicts(limit: int) -> None:
    assert choose_evictions(TABLES, 100, 10 ** 12, limit) == []


def test_least_recently_used_unreferenced_tables_go_first() -> None:
    assert choose_evictions(TABLES, 100, 1, 100) == ["b"]
    assert choose_evictions(TABLES, 100, 31, 100) == ["b", "a"]
    assert choose_evictions(TABLES, 100, 80, 100) == ["b", "a", "d"]   # c is in use


def test_none_when_even_evicting_every_unused_table_cannot_make_room() -> None:
    assert choose_evictions(TABLES, 100, 81, 100) is None
    assert choose_evictions([], 0, 101, 100) is None


def test_ties_in_last_use_are_broken_by_key() -> None:
    assert choose_evictions([use("y", 5, 1.0), use("x", 5, 1.0)], 10, 5, 10) == ["x"]


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20), st.booleans()), max_size=8),
       st.integers(0, 150), st.integers(1, 400))
def test_eviction_makes_exactly_enough_room_or_says_it_cannot(
        specs: list[tuple[int, int, bool]], incoming: int, limit: int) -> None:
    tables = [use(f"k{i}", size, float(t), busy) for i, (size, t, busy) in enumerate(specs)]
    used = sum(t.bytes for t in tables)
    chosen = choose_evictions(tables, used, incoming, limit)
    free = sum(t.bytes for t in tables if not t.in_use)
    if chosen is None:
        assert used - free + incoming > limit
        return
    by_key = {t.key: t for t in tables}
    evicted = sum(by_key[k].bytes for k in chosen)
    assert used - evicted + incoming <= limit
    assert not any(by_key[k].in_use for k in chosen)
    order = sorted((t for t in tables if not t.in_use), key=lambda t: (t.last_used, t.key))
    assert chosen == [t.key for t in order[:len(chosen)]]          # an LRU prefix ...
    if chosen:                                                     # ... and the shortest one
        assert used - (evicted - by_key[chosen[-1]].bytes) + incoming > limit


# -- keys --------------------------------------------------------------------------------------


def test_private_key_shows_the_application() -> None:
    assert private_key("local-1700000000000", "9f2c") == "p-local-1700000000000-9f2c"
    assert private_key("app 20240101/x:y", "t1") == "p-app-20240101-x-y-t1"
    assert private_key("///", "t1") == "p-app-t1"
    assert len(private_key("a" * 500, "t" * 64)) == 2 + 80 + 1 + 64


@pytest.mark.parametrize("token", ["", "a-b", "../x", "t" * 65, "a b"])
def test_private_key_rejects_a_bad_token_naming_it(token: str) -> None:
    with pytest.raises(InvalidTableKey, match=f"token {token!r}".replace("(", r"\(")):
        private_key("app", token)


def test_shared_key_is_the_first_32_hex_digits_in_lower_case() -> None:
    digest = "ABCDEF0123456789" * 4
    assert shared_key(digest) == "s-" + digest[:32].lower()


@pytest.mark.parametrize("digest", ["", "abc", "g" * 32, "ab" * 15 + "a", "../" + "a" * 32])
def test_shared_key_rejects_a_bad_digest(digest: str) -> None:
    with pytest.raises(InvalidTableKey, match="digest"):
        shared_key(digest)


@pytest.mark.parametrize("key", ["", "x", "p-", "p-app", "p-a/b-c", "s-" + "a" * 31,
                                 "s-" + "A" * 32, "../p-a-b", "p-a-b/..", "q-app-t"])
def test_validate_key_rejects_anything_that_is_not_one_safe_segment(key: str) -> None:
    with pytest.raises(InvalidTableKey, match="cached table key"):
        validate_key(key)


# -- staged retention of shared tables -----------------------------------------------------------


def test_a_shared_table_without_live_users_waits_out_its_retention() -> None:
    from spark_steward.tables.lifecycle import to_stamp_released

    ready = entry(SHARED, READY, shared=True, app="app-gone")
    users = {SHARED: {"app-gone", "app-also-gone"}}
    dead = {"app-gone", "app-also-gone"}.__contains__
    # first stage: never released (its users died), so its retention starts now
    assert to_clean_at_recovery([ready], users, dead, now=100.0, retention=60.0) == []
    assert to_stamp_released([ready], users, dead) == [ready]
    released = replace(ready, released_at=100.0)
    assert to_stamp_released([released], users, dead) == [], "a stamp is never renewed"
    assert to_clean_at_recovery([released], users, dead, now=159.0, retention=60.0) == []
    assert to_clean_at_recovery([released], users, dead, now=160.0, retention=60.0) == \
        [(released, "shared table without a live user")]
    # without retention it goes at once; with a live user it is never a candidate
    assert to_clean_at_recovery([ready], users, dead, now=100.0, retention=0.0) == \
        [(ready, "shared table without a live user")]
    alive = {SHARED: {"app-gone", "app-live"}}
    assert to_clean_at_recovery([released], alive, dead, now=10_000.0, retention=60.0) == []
    assert to_stamp_released([ready], alive, dead) == []
    # a pending shared table of a dead writer is cleaned whatever the retention
    stuck = entry(SHARED, PENDING, shared=True, app="app-gone")
    assert [e for e, _ in to_clean_at_recovery([stuck], users, dead, now=0.0,
                                               retention=60.0)] == [stuck]
