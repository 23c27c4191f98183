"""The pure checkpoint state machine: transitions, subsumption, failover rules, series names."""

from __future__ import annotations

import pytest

from spark_steward.errors import CheckpointError
from spark_steward.checkpoint import lifecycle as machine
from spark_steward.checkpoint.lifecycle import (CheckpointEntry, CheckpointKind,
                                                 CheckpointState, validate_series)
from tests.unit.conftest import Liveness

PENDING, COMPLETED, DISCARDING = (CheckpointState.PENDING, CheckpointState.COMPLETED,
                                  CheckpointState.DISCARDING)
SERIES, RDD, CONTEXT_DIR = (CheckpointKind.SERIES, CheckpointKind.SPARK_RDD,
                            CheckpointKind.SPARK_CONTEXT_DIR)


def entry(number: int = 1, *, series: str = "orders", app: str = "app-1",
          kind: CheckpointKind = SERIES, state: CheckpointState = PENDING) -> CheckpointEntry:
    e = machine.pending(series, number, app, kind, f"checkpoints/data/{series}/{number}", 100.0)
    if state is COMPLETED:
        e = machine.complete(e, 200.0)
    elif state is DISCARDING:
        e = machine.mark_for_deletion(e, "test", 300.0)
    return e


# -- transitions -------------------------------------------------------------------------------


def test_pending_entry_records_owner_and_time() -> None:
    e = machine.pending("orders", 7, "app-1", SERIES, "checkpoints/data/orders/7", 123.0)
    assert (e.state, e.id, e.key, e.app_id, e.created_at) == \
        (PENDING, "orders/7", ("orders", 7), "app-1", 123.0)
    assert e.completed_at is None and e.marked_at is None and e.discard_reason == ""


def test_complete_moves_pending_to_completed_with_its_stats() -> None:
    done = machine.complete(entry(3), 250.0, rows=10, bytes_=2048, files=2)
    assert done.state is COMPLETED
    assert (done.completed_at, done.rows, done.bytes, done.files) == (250.0, 10, 2048, 2)
    assert done.created_at == 100.0 and done.key == ("orders", 3)


@pytest.mark.parametrize("state", [COMPLETED, DISCARDING])
def test_complete_of_a_non_pending_entry_names_the_id_and_state(state: CheckpointState) -> None:
    with pytest.raises(CheckpointError) as info:
        machine.complete(entry(4, series="daily", state=state), 999.0)
    assert "daily/4" in str(info.value)
    assert state.value in str(info.value)


@pytest.mark.parametrize("state", [PENDING, COMPLETED])
def test_mark_for_deletion_from_any_live_state(state: CheckpointState) -> None:
    marked = machine.mark_for_deletion(entry(state=state), "subsumed", 400.0)
    assert marked.state is DISCARDING
    assert (marked.discard_reason, marked.marked_at) == ("subsumed", 400.0)


def test_mark_for_deletion_is_idempotent_and_keeps_the_first_reason() -> None:
    first = machine.mark_for_deletion(entry(state=COMPLETED), "subsumed", 400.0)
    again = machine.mark_for_deletion(first, "application stopped", 500.0)
    assert again == first
    assert (again.discard_reason, again.marked_at) == ("subsumed", 400.0)


def test_entry_round_trips_through_json() -> None:
    for e in (entry(1), entry(2, state=COMPLETED), entry(3, kind=RDD, state=DISCARDING)):
        body = e.to_json()
        assert body["state"] == e.state.value and body["kind"] == e.kind.value
        assert CheckpointEntry.from_json(body) == e


def test_from_json_ignores_unknown_fields_and_rejects_unknown_states() -> None:
    body = entry(1).to_json()
    body["added_by_a_newer_version"] = True
    assert CheckpointEntry.from_json(body) == entry(1)
    body["state"] = "exploded"
    with pytest.raises(ValueError, match="exploded"):
        CheckpointEntry.from_json(body)


def test_next_number_follows_the_highest_seen() -> None:
    assert machine.next_number([]) == 1
    assert machine.next_number([1, 2, 3]) == 4
    assert machine.next_number([5, 2]) == 6       # gaps are never filled


# -- subsumption -------------------------------------------------------------------------------


def test_subsumed_with_retained_1_keeps_only_the_newest_completed() -> None:
    entries = [entry(n, state=COMPLETED) for n in (3, 1, 2)]
    assert [e.number for e in machine.subsumed(entries, 1)] == [1, 2]


def test_subsumed_with_retained_3_keeps_the_newest_three_oldest_first() -> None:
    entries = [entry(n, state=COMPLETED) for n in range(1, 7)]
    assert [e.number for e in machine.subsumed(entries, 3)] == [1, 2, 3]


def test_subsumed_ignores_pending_and_marked_entries() -> None:
    entries = [entry(1, state=COMPLETED), entry(2, state=DISCARDING), entry(3, state=COMPLETED),
               entry(4), entry(5, state=COMPLETED)]
    assert [e.number for e in machine.subsumed(entries, 1)] == [1, 3]
    assert [e.number for e in machine.subsumed(entries, 2)] == [1]
    assert machine.subsumed(entries, 3) == []


def test_subsumed_never_drops_the_last_completed_checkpoint() -> None:
    entries = [entry(1, state=COMPLETED), entry(2, state=COMPLETED)]
    assert [e.number for e in machine.subsumed(entries, 0)] == [1]
    assert machine.subsumed(entries[:1], 0) == []
    assert machine.subsumed([], 1) == []


# -- failover ----------------------------------------------------------------------------------


def ids(entries: list[CheckpointEntry]) -> list[str]:
    return [e.id for e in entries]


def test_pending_of_a_dead_application_is_discarded_of_a_live_one_kept() -> None:
    entries = [entry(1, app="dead"), entry(2, app="live")]
    assert ids(machine.to_discard_at_recovery(entries, Liveness("dead"), "me")) == ["orders/1"]


def test_completed_series_checkpoints_of_dead_applications_are_kept() -> None:
    entries = [entry(1, app="dead", state=COMPLETED), entry(2, app="live", state=COMPLETED)]
    assert machine.to_discard_at_recovery(entries, Liveness("dead"), "me") == []


def test_everything_marked_for_deletion_is_discarded_whoever_owns_it() -> None:
    entries = [entry(1, app="dead", state=DISCARDING), entry(2, app="live", state=DISCARDING),
               entry(3, app="me", state=DISCARDING)]
    assert ids(machine.to_discard_at_recovery(entries, Liveness("dead"), "me")) == \
        ["orders/1", "orders/2", "orders/3"]


@pytest.mark.parametrize("kind", [RDD, CONTEXT_DIR])
@pytest.mark.parametrize("state", [PENDING, COMPLETED])
def test_spark_checkpoints_of_dead_applications_are_discarded(kind: CheckpointKind,
                                                              state: CheckpointState) -> None:
    entries = [entry(1, series="_spark.dead", app="dead", kind=kind, state=state),
               entry(1, series="_spark.live", app="live", kind=kind, state=state)]
    assert ids(machine.to_discard_at_recovery(entries, Liveness("dead"), "me")) == \
        ["_spark.dead/1"]


def test_own_application_is_never_taken_for_dead_nor_asked_about() -> None:
    liveness = Liveness("me", "dead")       # even a liveness check that says so
    entries = [entry(1, app="me"), entry(2, app="me", kind=RDD, state=COMPLETED),
               entry(3, app="dead")]
    assert ids(machine.to_discard_at_recovery(entries, liveness, "me")) == ["orders/3"]
    assert "me" not in liveness.asked


def test_liveness_is_asked_once_per_application() -> None:
    liveness = Liveness("dead")
    entries = [entry(n, app="dead") for n in range(1, 6)] + \
        [entry(n, series="other", app="live") for n in range(1, 4)]
    found = machine.to_discard_at_recovery(entries, liveness, "me")
    assert len(found) == 5
    assert sorted(liveness.asked) == ["dead", "live"]


def test_recovery_result_is_sorted_by_series_and_number() -> None:
    entries = [entry(10, series="b", app="dead"), entry(2, series="a", app="dead"),
               entry(9, series="a", app="dead")]
    assert ids(machine.to_discard_at_recovery(entries, Liveness("dead"), "me")) == \
        ["a/2", "a/9", "b/10"]


def owned_data(entries: list[CheckpointEntry]) -> set[str]:
    """Data paths some entry still names (anything else under the data folder is an orphan)."""
    return {e.data for e in entries if e.kind.in_storage}


def test_owned_data_lists_series_data_paths_only() -> None:
    entries = [entry(1), entry(2, state=COMPLETED), entry(3, kind=RDD)]
    assert owned_data(entries) == {"checkpoints/data/orders/1",
                                   "checkpoints/data/orders/2"}


# -- series names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["orders", "a", "Daily_2024-01.v2", "0", "x" * 200])
def test_good_series_names(name: str) -> None:
    assert validate_series(name, internal_ok=False) == name
    assert validate_series(name) == name


@pytest.mark.parametrize("name", ["", ".hidden", "_private", "-dash", "a/b", "../up", "a b",
                                  "a\\b", "x" * 201, "orders\n", "caf\u00e9", "a:b"])
def test_bad_series_names_are_rejected_naming_them(name: str) -> None:
    with pytest.raises(CheckpointError) as info:
        validate_series(name, internal_ok=False)
    assert repr(name) in str(info.value)
    with pytest.raises(CheckpointError):
        validate_series(name)


def test_non_string_series_name_is_rejected() -> None:
    with pytest.raises(CheckpointError, match="42"):
        validate_series(42)  # type: ignore[arg-type]


def test_spark_series_is_allowed_internally_only() -> None:
    name = machine.spark_series("app-20240101123456-0001")
    assert name == "_spark.app-20240101123456-0001"
    assert validate_series(name) == name
    with pytest.raises(CheckpointError, match="_spark.app-20240101123456-0001"):
        validate_series(name, internal_ok=False)


@pytest.mark.parametrize("name", ["_spark.", "_spark./x", "_spark.._up", "_spark.a/b",
                                  "_spark._spark.x"])
def test_malformed_spark_series_are_rejected_even_internally(name: str) -> None:
    with pytest.raises(CheckpointError) as info:
        validate_series(name)
    assert repr(name) in str(info.value)
