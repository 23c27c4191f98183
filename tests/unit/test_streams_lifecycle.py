"""streams/lifecycle/locations.py: the pure rules of streaming checkpoint locations, with
explicit clocks."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward.streams.lifecycle.locations import (
    SPARK_TEMP,
    LocationCheck,
    StreamRecord,
    StreamState,
    drop_refusal,
    forget_refusal,
    normal_location,
    rewritten_since_asked,
    state_of,
    temp_sweepable,
    valid_query_id,
)

QID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
UUID = "123e4567-e89b-12d3-a456-426614174000"
HEX32 = "0123456789abcdef0123456789abcdef"
ABANDONED = 3600.0
GRACE = 600.0
HORIZON = 300.0


def _record(**changes: Any) -> StreamRecord:
    base = StreamRecord(query_id=QID, location="file:/ckpt/q1", name="q1", app_id="app-7",
                        run_id="run-3", started=1000.0, heartbeat=1100.0)
    return replace(base, **changes)


def _body(**changes: Any) -> dict[str, Any]:
    body = _record(stopped=1200.0, exception="boom", dropping=1300.0).to_json()
    body.update(changes)
    return body


# -- state_of ------------------------------------------------------------------------------------


def test_state_running_while_not_stopped_and_application_not_dead() -> None:
    record = _record()
    for now in (1100.0, 1100.0 + ABANDONED, 1e12):
        assert state_of(record, now=now, app_dead=False,
                        abandoned_after=ABANDONED) is StreamState.RUNNING


def test_state_stopped_when_record_says_stopped_even_with_live_application() -> None:
    record = _record(stopped=1200.0)
    assert state_of(record, now=1201.0, app_dead=False,
                    abandoned_after=ABANDONED) is StreamState.STOPPED


def test_state_stopped_when_application_dead_without_stopped_time() -> None:
    record = _record()
    assert state_of(record, now=1110.0, app_dead=True,
                    abandoned_after=ABANDONED) is StreamState.STOPPED


def test_state_abandoned_exactly_at_the_boundary_and_stopped_just_before() -> None:
    record = _record(stopped=1200.0)
    assert state_of(record, now=1200.0 + ABANDONED, app_dead=False,
                    abandoned_after=ABANDONED) is StreamState.ABANDONED
    assert state_of(record, now=1200.0 + ABANDONED - 0.001, app_dead=False,
                    abandoned_after=ABANDONED) is StreamState.STOPPED


def test_state_abandoned_of_dead_application_counts_from_last_heartbeat() -> None:
    record = _record(heartbeat=5000.0)
    assert state_of(record, now=5000.0 + ABANDONED - 1, app_dead=True,
                    abandoned_after=ABANDONED) is StreamState.STOPPED
    assert state_of(record, now=5000.0 + ABANDONED, app_dead=True,
                    abandoned_after=ABANDONED) is StreamState.ABANDONED


def test_state_idle_time_counts_from_latest_of_started_heartbeat_and_stopped() -> None:
    late_heartbeat = _record(stopped=1200.0, heartbeat=2000.0)
    assert state_of(late_heartbeat, now=1200.0 + ABANDONED, app_dead=True,
                    abandoned_after=ABANDONED) is StreamState.STOPPED
    late_start = _record(started=3000.0, heartbeat=1100.0, stopped=1200.0)
    assert state_of(late_start, now=1200.0 + ABANDONED, app_dead=True,
                    abandoned_after=ABANDONED) is StreamState.STOPPED
    assert state_of(late_start, now=3000.0 + ABANDONED, app_dead=True,
                    abandoned_after=ABANDONED) is StreamState.ABANDONED


@pytest.mark.parametrize("stopped", [None, 1200.0])
@pytest.mark.parametrize("app_dead", [False, True])
@pytest.mark.parametrize("now", [1100.0, 1e9])
def test_state_dropping_wins_over_everything(stopped: float | None, app_dead: bool,
                                             now: float) -> None:
    record = _record(stopped=stopped, dropping=1150.0)
    assert state_of(record, now=now, app_dead=app_dead,
                    abandoned_after=ABANDONED) is StreamState.DROPPING


def test_record_progressed_and_ended_move_the_idle_clock() -> None:
    record = _record()
    assert record.progressed(2000.0).heartbeat == 2000.0
    assert record.progressed(50.0).heartbeat == 1100.0  # never backwards
    ended = record.ended(2500.0, "java.lang.RuntimeException: x")
    assert (ended.stopped, ended.heartbeat, ended.exception) == (
        2500.0, 2500.0, "java.lang.RuntimeException: x")
    assert state_of(ended, now=2500.0 + ABANDONED - 1, app_dead=False,
                    abandoned_after=ABANDONED) is StreamState.STOPPED


# -- drop_refusal --------------------------------------------------------------------------------


def test_drop_refused_while_running_names_application_run_and_query() -> None:
    why = drop_refusal(_record(), now=1e9, app_dead=False, grace=GRACE, newest_file=None)
    assert why is not None
    assert "app-7" in why and "run-3" in why and "'q1'" in why and "stop it first" in why


def test_drop_refusal_of_unnamed_query_names_its_id() -> None:
    why = drop_refusal(_record(name=None), now=1e9, app_dead=False, grace=GRACE,
                       newest_file=None)
    assert why is not None and QID in why


def test_drop_refused_within_grace_after_stop_mentions_drop_grace() -> None:
    record = _record(stopped=1200.0)
    why = drop_refusal(record, now=1200.0 + GRACE - 1, app_dead=False, grace=GRACE,
                       newest_file=None)
    assert why is not None
    assert "spark.steward.streams.drop-grace" in why and "running" not in why


def test_drop_refused_within_grace_after_application_death() -> None:
    record = _record(heartbeat=1100.0)
    why = drop_refusal(record, now=1100.0 + GRACE - 1, app_dead=True, grace=GRACE,
                       newest_file=None)
    assert why is not None and "drop-grace" in why


def test_drop_allowed_exactly_at_grace_and_after() -> None:
    record = _record(stopped=1200.0)
    for now in (1200.0 + GRACE, 1200.0 + GRACE + 1, 1e9):
        assert drop_refusal(record, now=now, app_dead=False, grace=GRACE,
                            newest_file=None) is None


def test_drop_allowed_for_dead_application_after_grace() -> None:
    assert drop_refusal(_record(), now=1100.0 + GRACE, app_dead=True, grace=GRACE,
                        newest_file=None) is None


def test_drop_blocked_by_file_newer_than_record() -> None:
    record = _record(stopped=1200.0)
    now = 10_000.0
    why = drop_refusal(record, now=now, app_dead=True, grace=GRACE, newest_file=now - 30)
    assert why is not None and "drop-grace" in why and "30s" in why
    assert drop_refusal(record, now=now - 30 + GRACE, app_dead=True, grace=GRACE,
                        newest_file=now - 30) is None


def test_drop_not_blocked_by_file_older_than_record() -> None:
    record = _record(stopped=1200.0)
    assert drop_refusal(record, now=1200.0 + GRACE, app_dead=False, grace=GRACE,
                        newest_file=5.0) is None


@pytest.mark.parametrize("stopped", [None, 1200.0])
@pytest.mark.parametrize("newest_file", [None, 1299.0])
def test_drop_of_dropping_record_always_allowed(stopped: float | None,
                                                newest_file: float | None) -> None:
    record = _record(stopped=stopped, dropping=1250.0)
    assert drop_refusal(record, now=1300.0, app_dead=False, grace=GRACE,
                        newest_file=newest_file) is None


# -- temp_sweepable ------------------------------------------------------------------------------

SWEEPABLE_NAMES = [
    f".12.{UUID}.tmp",                       # offsets/commits log batch
    f".7.delta.{UUID}.tmp",                  # state store delta file
    f".metadata.{UUID.upper()}.tmp",         # upper-case hex
    f".{HEX32}.json.{UUID}.tmp",             # our own intent temp file (JVM side)
]

NOT_SWEEPABLE_NAMES = [
    "notes.tmp",
    "12",
    ".12.crc",
    f"12.{UUID}.tmp",                        # no leading dot
    f"..{UUID}.tmp",                         # nothing between the dots
    f".12.{UUID[:-1]}.tmp",                  # uuid one hex digit short
    f".12.{UUID}0.tmp",                      # uuid one hex digit long
    f".12.{UUID.replace('-', '')}.tmp",      # uuid without dashes
    f".12.{UUID[:-1]}g.tmp",                 # not hex
    f".12.{UUID}.tmp.crc",
    pytest.param(f".12.{UUID}.tmp\n"),
    f".12.{UUID}.TMP",
    f".{HEX32}.json",
]


@pytest.mark.parametrize("name", SWEEPABLE_NAMES)
def test_temp_names_match(name: str) -> None:
    assert SPARK_TEMP.match(name)


@pytest.mark.parametrize("name", SWEEPABLE_NAMES)
def test_temp_sweepable_when_no_run_is_active_whatever_its_age(name: str) -> None:
    for modified in (None, 10_000.0, 9_999_999.0):
        assert temp_sweepable(name, modified, now=10_000.0, query_active=False, horizon=HORIZON)


@pytest.mark.parametrize("name", NOT_SWEEPABLE_NAMES)
@pytest.mark.parametrize("active", [False, True])
def test_non_temp_names_never_sweepable(name: str, active: bool) -> None:
    assert not temp_sweepable(name, 0.0, now=1e9, query_active=active, horizon=HORIZON)


@pytest.mark.parametrize("name", SWEEPABLE_NAMES)
def test_temp_of_active_query_sweepable_only_from_horizon_on(name: str) -> None:
    now = 10_000.0
    assert temp_sweepable(name, now - HORIZON, now=now, query_active=True, horizon=HORIZON)
    assert temp_sweepable(name, now - HORIZON - 1, now=now, query_active=True, horizon=HORIZON)
    assert not temp_sweepable(name, now - HORIZON + 0.001, now=now, query_active=True,
                              horizon=HORIZON)
    assert not temp_sweepable(name, now, now=now, query_active=True, horizon=HORIZON)


def test_temp_without_modification_time_kept_while_active() -> None:
    assert not temp_sweepable(f".3.{UUID}.tmp", None, now=1e9, query_active=True,
                              horizon=HORIZON)


# -- valid_query_id ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [QID, QID.upper(), "00000000-0000-0000-0000-000000000000"])
def test_valid_query_ids(value: str) -> None:
    assert valid_query_id(value)


@pytest.mark.parametrize("value", [None, 5, b"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "",
                                   QID[:-1], QID + "0", QID.replace("-", ""), "{" + QID + "}",
                                   " " + QID, QID + " ", QID + "\n", "../" + QID,
                                   QID[:-1] + "z"])
def test_invalid_query_ids(value: object) -> None:
    assert not valid_query_id(value)


# -- StreamRecord JSON ---------------------------------------------------------------------------


def test_record_round_trips_through_json_with_all_fields() -> None:
    record = _record(stopped=1200.5, exception="org.apache.spark.SparkException: x",
                     dropping=1300.25)
    assert StreamRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_record_round_trips_with_optional_fields_empty() -> None:
    record = _record(name=None)
    body = record.to_json()
    assert body["format"] == 1
    assert body["stopped"] is None and body["dropping"] is None and body["name"] is None
    assert StreamRecord.from_json(json.loads(json.dumps(body))) == record


def test_record_from_json_accepts_integers_as_floats_and_missing_optionals() -> None:
    body = {"format": 1, "query_id": QID, "location": "file:/c", "app_id": "a", "run_id": "r",
            "started": 5, "heartbeat": 6}
    record = StreamRecord.from_json(body)
    assert record == StreamRecord(QID, "file:/c", None, "a", "r", 5.0, 6.0)
    assert isinstance(record.started, float)


@pytest.mark.parametrize("body", [
    [],
    "x",
    None,
    {k: v for k, v in _body().items() if k != "format"},
    _body(format=2),
    _body(format="1"),
    pytest.param(_body(format=True)),
])
def test_record_from_json_refuses_other_formats(body: Any) -> None:
    with pytest.raises(ValueError, match="format"):
        StreamRecord.from_json(body)


@pytest.mark.parametrize("field,value", [
    ("query_id", None),
    ("query_id", ""),
    ("query_id", 5),
    ("query_id", "not-a-query-id"),
    ("query_id", QID + "\n"),
    ("location", None),
    ("location", ""),
    ("location", ["file:/c"]),
    ("name", 5),
    ("name", ""),
    ("app_id", None),
    ("app_id", 7),
    ("run_id", None),
    ("run_id", ""),
    ("started", None),
    ("started", True),
    ("started", "1000"),
    ("heartbeat", False),
    ("heartbeat", None),
    ("heartbeat", [1.0]),
    ("stopped", True),
    ("stopped", "1200"),
    ("exception", 5),
    ("exception", ""),
    ("dropping", True),
    ("dropping", {"at": 1.0}),
])
def test_record_from_json_refuses_malformed_field_naming_it(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"'{field}'"):
        StreamRecord.from_json(_body(**{field: value}))


@pytest.mark.parametrize("field", ["query_id", "location", "app_id", "run_id", "started",
                                   "heartbeat"])
def test_record_from_json_refuses_missing_required_field_naming_it(field: str) -> None:
    body = _body()
    del body[field]
    with pytest.raises(ValueError, match=f"'{field}'"):
        StreamRecord.from_json(body)


# -- normal_location -------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["file:///tmp/x", "file:/tmp/x", "file://localhost/tmp/x",
                                      "/tmp/x", "/tmp/x/", "/tmp/a/../x", "/tmp/./x",
                                      "//tmp//x", "file:/tmp/x/", "FILE:///tmp/a/b/../../x"])
def test_local_spellings_of_one_location_normalise_to_hadoops_url(spelling: str) -> None:
    assert normal_location(spelling) == "file:/tmp/x"


@pytest.mark.parametrize("spelling, normal", [
    ("s3a://bucket/a/../k/", "s3a://bucket/k"),
    ("s3a://bucket/k", "s3a://bucket/k"),
    ("S3A://bucket//k", "s3a://bucket/k"),
    ("s3a://bucket", "s3a://bucket/"),
    ("s3a://bucket/", "s3a://bucket/"),
    ("hdfs://nn:8020/a/./b/", "hdfs://nn:8020/a/b"),
    ("file://server/share/x/", "file://server/share/x"),  # an authority other than localhost
])
def test_other_schemes_keep_scheme_and_authority_and_normalise_the_path(spelling: str,
                                                                       normal: str) -> None:
    assert normal_location(spelling) == normal


@pytest.mark.parametrize("a, b", [
    ("s3a://bucket/k", "s3a://other/k"),        # authority differs
    ("s3a://bucket/k", "s3://bucket/k"),        # scheme differs
    ("s3a://bucket/k", "file:/k"),
    ("/tmp/x", "/tmp/y"),
    ("/tmp/x", "/tmp/x/y"),
    ("hdfs://nn:8020/a", "hdfs://nn:9000/a"),
])
def test_different_locations_stay_different(a: str, b: str) -> None:
    assert normal_location(a) != normal_location(b)


@pytest.mark.parametrize("text", ["counts", "clicks:v2", "ckpt/q1", "file:relative/x", ""])
def test_names_and_relative_paths_are_returned_unchanged(text: str) -> None:
    assert normal_location(text) == text


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "c d"]), max_size=8),
       st.sampled_from(["", "file:", "file://", "file://localhost", "s3a://bkt", "hdfs://nn:1"]),
       st.booleans())
def test_normal_location_is_idempotent_and_ignores_a_trailing_slash(
        parts: list[str], prefix: str, slash: bool) -> None:
    location = prefix + "/" + "/".join(parts) + ("/" if slash else "")
    once = normal_location(location)
    assert normal_location(once) == once
    assert normal_location(location + "/") == once


# -- forget_refusal: the record of a location that is gone ----------------------------------------

#: Removable: the location is absent, the run stopped in an application that ended, and the
#: drop grace passed since the record's last change. Each test below varies one input.
GONE = {"record": _record(stopped=1200.0), "now": 1200.0 + GRACE + 1, "app_dead": True,
        "grace": GRACE, "location": LocationCheck.ABSENT}


def _forget(**changes: Any) -> str | None:
    return forget_refusal(**{**GONE, **changes})


def test_record_of_absent_location_is_removed_after_grace_once_no_run_is_active() -> None:
    assert _forget() is None


def test_record_of_present_location_stays() -> None:
    why = _forget(location=LocationCheck.PRESENT)
    assert why is not None and "file:/ckpt/q1 exists" in why


def test_record_stays_when_the_storage_could_not_say_whether_the_location_exists() -> None:
    why = _forget(location=LocationCheck.UNKNOWN)
    assert why is not None and "unknown" in why


def test_record_of_absent_location_stays_while_its_run_may_be_active() -> None:
    # not stopped, application not proven dead (its lease may be fresh), heartbeat long ago
    why = _forget(record=_record(), app_dead=False)
    assert why is not None and "still runs in application app-7" in why


def test_record_of_absent_location_stays_within_grace_of_the_last_heartbeat() -> None:
    # the application crashed (no stop time): its last heartbeat counts
    record = _record(heartbeat=5000.0)
    assert _forget(record=record, now=5000.0 + GRACE - 1) is not None
    assert _forget(record=record, now=5000.0 + GRACE) is None


def test_record_of_absent_location_stays_within_grace_of_its_stop() -> None:
    why = _forget(now=1200.0 + GRACE - 1)
    assert why is not None and "spark.steward.streams.drop-grace" in why
    assert _forget(now=1200.0 + GRACE) is None


def test_stopped_run_of_a_live_application_is_not_active() -> None:
    assert _forget(app_dead=False) is None  # the record says the run stopped


def test_record_being_dropped_is_left_to_the_drop() -> None:
    why = _forget(record=_record(stopped=1200.0, dropping=1300.0))
    assert why is not None and "drop" in why


@pytest.mark.parametrize("location, active, after_grace", itertools.product(
    list(LocationCheck), [True, False], [True, False]))
def test_record_removed_only_when_absent_inactive_and_after_grace(
        location: LocationCheck, active: bool, after_grace: bool) -> None:
    record = _record() if active else _record(stopped=1200.0)
    now = 1200.0 + GRACE + (1 if after_grace else -1)
    verdict = forget_refusal(record, now=now, app_dead=False, grace=GRACE, location=location)
    removable = location is LocationCheck.ABSENT and not active and after_grace
    assert (verdict is None) is removable, verdict


# -- rewritten_since_asked: an intent never deletes a file Spark wrote again -----------------------


@pytest.mark.parametrize("modified, asked_ms, rewritten", [
    (1000.0, 1_000_001, False),   # written before the ask: the file Spark gave up
    (1000.0, 1_000_000, False),   # the same millisecond
    (1000.0015, 1_000_001, False),  # within the ask's millisecond
    (1000.002, 1_000_001, True),  # written after the ask: Spark's new file
    (2000.0, 1_000_000, True),
    (None, 1_000_000, False),     # no time from the storage
    (1000.0, None, False),        # an intent without a time
    (1000.0, "1000000", False),
    (1000.0, True, False),
])
def test_rewritten_since_asked(modified: float | None, asked_ms: object, rewritten: bool) -> None:
    assert rewritten_since_asked(modified, asked_ms) is rewritten


@pytest.mark.parametrize("written", ["file:///ckpt/q1/", "file:/ckpt/q1", "/ckpt/./q1",
                                     "file://localhost/ckpt/x/../q1"])
def test_record_from_json_normalises_a_location_written_in_another_spelling(written: str) -> None:
    assert StreamRecord.from_json(_body(location=written)).location == "file:/ckpt/q1"
