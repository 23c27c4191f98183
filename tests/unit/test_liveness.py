"""lifecycle/liveness.py classify(): finished, live and crashed from a record's facts alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward.lifecycle.liveness import DriverIdentity, Liveness, classify

HERE = "host-a"
THERE = "host-b"
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
              age: float = 0.0, probe: FakeProbe | None = None, **kw: Any) -> Liveness:
    return classify(finished=finished, heartbeat_at=NOW - age,
                    driver=DriverIdentity(host, 4242, 777), now=NOW,
                    heartbeat_timeout=TIMEOUT, this_host=HERE,
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


def test_same_host_live_process_but_stale_heartbeat_is_crashed() -> None:
    assert _classify(host=HERE, alive=True, age=TIMEOUT + 1) is Liveness.CRASHED


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
    assert [s.value for s in Liveness] == ["live", "finished", "crashed"]


@given(age=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
       same_host=st.booleans(), alive=st.booleans(), finished=st.booleans())
def test_property_matches_the_rules(age: float, same_host: bool, alive: bool, finished: bool
                                    ) -> None:
    probe = FakeProbe(alive)
    got = _classify(host=HERE if same_host else THERE, alive=alive, age=age,
                    finished=finished, probe=probe)
    if finished:
        expected = Liveness.FINISHED
    elif same_host and not alive:
        expected = Liveness.CRASHED
    elif NOW - (NOW - age) > TIMEOUT:
        expected = Liveness.CRASHED
    else:
        expected = Liveness.LIVE
    assert got is expected
    if not same_host or finished:
        assert probe.asked == []
