"""lifecycle/liveness.py classify(): finished, live and crashed from a record's facts alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward.lifecycle.liveness import (
    IDENTITY_FORMAT,
    DriverIdentity,
    Liveness,
    Place,
    classify,
)

HERE = "host-a"
THERE = "host-b"
BOOT = "0e9c58a1-7d1c-4c8e-9d0b-2f2d3a4b5c6d"
PIDNS = "pid:[4026531836]"
PLACE = Place(HERE, BOOT, PIDNS)
TIMEOUT = 120.0
NOW = 1_000_000.0


class FakeProbe:
    """Answers "is this process alive?" from a fixed answer and records what it was asked."""

    def __init__(self, alive: bool) -> None:
        self.alive = alive
        self.asked: list[tuple[int, int | None]] = []

    def __call__(self, pid: int, pid_start: int | None) -> bool:
        self.asked.append((pid, pid_start))
        return self.alive


def _classify(*, host: str = HERE, alive: bool = True, finished: bool = False,
              age: float = 0.0, probe: FakeProbe | None = None, boot_id: str = BOOT,
              pid_ns: str = PIDNS, here: Place = PLACE, **kw: Any) -> Liveness:
    return classify(finished=finished, heartbeat_at=NOW - age,
                    driver=DriverIdentity(host, 4242, 777, boot_id, pid_ns), now=NOW,
                    heartbeat_timeout=TIMEOUT, here=here,
                    process_alive=probe or FakeProbe(alive), **kw)


@pytest.mark.parametrize("host", [HERE, THERE])
@pytest.mark.parametrize("alive", [True, False])
@pytest.mark.parametrize("age", [0.0, TIMEOUT * 10])
def test_finished_wins(host: str, alive: bool, age: float) -> None:
    assert _classify(host=host, alive=alive, age=age, finished=True) is Liveness.FINISHED


def test_same_host_dead_process_is_crashed_despite_fresh_heartbeat() -> None:
    probe = FakeProbe(alive=False)
    assert _classify(host=HERE, age=0.0, probe=probe) is Liveness.CRASHED
    assert probe.asked == [(4242, 777)]


def test_same_host_live_process_fresh_heartbeat_is_live() -> None:
    probe = FakeProbe(alive=True)
    assert _classify(host=HERE, age=1.0, probe=probe) is Liveness.LIVE
    assert probe.asked == [(4242, 777)]


def test_same_host_live_process_with_stale_heartbeat_is_live() -> None:
    # The probe decides where it can: a running driver whose heartbeat stalled (a storage
    # outage, a paused JVM) is not dead, and its files are not collected.
    assert _classify(host=HERE, alive=True, age=TIMEOUT * 100) is Liveness.LIVE


@pytest.mark.parametrize("where", [
    {"here": Place(HERE, BOOT, "pid:[4026532999]")},        # another PID namespace, same name
    {"here": Place(HERE, "1111-other-boot", PIDNS)},        # same host after a reboot
    {"here": Place(HERE, "", PIDNS)},                       # boot id unknown here
    {"here": Place(HERE, BOOT, "")},                        # /proc is not ours here
    {"boot_id": ""},                                        # the record does not say
    {"pid_ns": ""},
], ids=["other-pid-namespace", "other-boot", "boot-unknown-here", "pidns-unknown-here",
        "record-without-boot", "record-without-pidns"])
def test_probe_decides_only_when_host_boot_and_pid_namespace_all_match(where: dict[str, Any]
                                                                       ) -> None:
    probe = FakeProbe(alive=False)  # what a prober in another namespace would see
    assert _classify(age=5.0, probe=probe, **where) is Liveness.LIVE
    assert _classify(age=TIMEOUT + 1, probe=probe, **where) is Liveness.CRASHED
    assert probe.asked == []


def test_records_from_before_identities_are_judged_by_heartbeat_alone() -> None:
    probe = FakeProbe(alive=False)
    assert _classify(probe=probe, identity_format=0, age=1.0) is Liveness.LIVE
    assert _classify(probe=probe, identity_format=0, age=TIMEOUT + 1) is Liveness.CRASHED
    assert probe.asked == []


@pytest.mark.parametrize("fmt", [2, 99, -1])
@pytest.mark.parametrize("finished", [True, False])
def test_unknown_identity_format_is_unknown_and_never_dead(fmt: int, finished: bool) -> None:
    probe = FakeProbe(alive=False)
    state = _classify(probe=probe, identity_format=fmt, age=TIMEOUT * 100, finished=finished)
    assert state is Liveness.UNKNOWN and not state.dead
    assert probe.asked == []


def test_other_host_fresh_heartbeat_is_live_without_probing() -> None:
    probe = FakeProbe(alive=False)  # a local pid with that number says nothing about host-b
    assert _classify(host=THERE, age=5.0, probe=probe) is Liveness.LIVE
    assert probe.asked == []


def test_other_host_stale_heartbeat_is_crashed() -> None:
    assert _classify(host=THERE, age=TIMEOUT + 0.5, alive=True) is Liveness.CRASHED


def test_boundary_exactly_at_timeout_is_still_live() -> None:
    assert _classify(host=THERE, age=TIMEOUT) is Liveness.LIVE
    assert _classify(host=THERE, age=TIMEOUT + 0.001) is Liveness.CRASHED
    assert _classify(host=THERE, age=TIMEOUT - 0.001) is Liveness.LIVE


def test_heartbeat_from_the_future_is_live() -> None:
    # Clock skew between hosts: a heartbeat a little ahead of our clock is not staleness.
    assert _classify(host=THERE, age=-30.0) is Liveness.LIVE


def test_values_are_the_strings_the_cli_prints() -> None:
    assert [s.value for s in Liveness] == ["live", "finished", "crashed", "unknown"]
    assert [s for s in Liveness if s.dead] == [Liveness.FINISHED, Liveness.CRASHED]


@given(age=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
       same_host=st.booleans(), same_boot=st.booleans(), same_ns=st.booleans(),
       alive=st.booleans(), finished=st.booleans(), fmt=st.sampled_from([0, IDENTITY_FORMAT, 7]))
def test_property_matches_the_rules(age: float, same_host: bool, same_boot: bool,
                                    same_ns: bool, alive: bool, finished: bool, fmt: int
                                    ) -> None:
    probe = FakeProbe(alive)
    got = _classify(host=HERE if same_host else THERE, boot_id=BOOT if same_boot else "b2",
                    pid_ns=PIDNS if same_ns else "pid:[1]", alive=alive, age=age,
                    finished=finished, probe=probe, identity_format=fmt)
    probed = fmt == IDENTITY_FORMAT and same_host and same_boot and same_ns and not finished
    if fmt not in (0, IDENTITY_FORMAT):
        expected = Liveness.UNKNOWN
    elif finished:
        expected = Liveness.FINISHED
    elif probed:
        expected = Liveness.LIVE if alive else Liveness.CRASHED
    elif NOW - (NOW - age) > TIMEOUT:
        expected = Liveness.CRASHED
    else:
        expected = Liveness.LIVE
    assert got is expected
    assert probe.asked == ([(4242, 777)] if probed else [])
