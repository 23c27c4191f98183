"""Connect sessions as owner scopes (kernel/sessions.py), the record's session report, and the
hosted runtime's lifeline (kernel/host.py): pure logic, no Spark."""

from __future__ import annotations

import io
import uuid
from dataclasses import asdict
from typing import ClassVar, Mapping

import pytest

from spark_steward.applications import SESSIONS_KEPT, SessionOwnership, SessionsReport
from spark_steward.kernel.events import JobStart, SessionClosed, SessionStarted
from spark_steward.kernel.host import wait_for_stop
from spark_steward.kernel.sessions import SessionScopes, session_of_tags

SID, OP = "0b0f6a3e-3c1b-4d5e-9f00-1a2b3c4d5e6f", "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4"


def tag(user: str, session: str = SID, op: str = OP) -> str:
    """The tag Spark Connect's ExecuteJobTag builds."""
    return f"SparkConnect_OperationTag_User_{user}_Session_{session}_Operation_{op}"


@pytest.mark.parametrize("user", ["", "alice", "a_b_c", "x_Session_y", "üser", "a,b"])
def test_a_session_is_told_from_its_tag_whatever_the_user_id(user: str) -> None:
    tags = tag(user)
    if "," in user:  # a comma splits the tag list: no Connect tag is left whole
        assert session_of_tags(tags) is None
        return
    assert session_of_tags(tags) == (SID, user)
    # With the user's own tags beside it, in any order.
    assert session_of_tags(f"mine,{tags},other") == (SID, user)


@pytest.mark.parametrize("tags", [
    None, "", "mine", tag("u", session="not-a-uuid"), tag("u", op="x"),
    "SparkConnect_OperationTag_User_u_Session_" + SID,  # cut short
    "prefix" + tag("u"), tag("u") + "suffix",
])
def test_anything_but_a_connect_tag_is_no_session(tags: str | None) -> None:
    assert session_of_tags(tags) is None


class Owner:
    name: ClassVar[str] = "owner"

    def __init__(self, owns: Mapping[str, tuple[int, int]] | None = None,
                 fail: bool = False) -> None:
        self.closed: list[str] = []
        self.owns = owns or {}
        self.fail = fail

    def session_closed(self, session_id: str) -> None:
        self.closed.append(session_id)
        if self.fail:
            raise RuntimeError("boom")

    def session_owns(self, session_id: str) -> Mapping[str, tuple[int, int]]:
        if self.fail:
            raise RuntimeError("boom")
        return self.owns


def job(job_id: int, tags: str | None, time: int = 5000) -> JobStart:
    return JobStart(job_id, time, job_id, (), None, tags)


def test_sessions_open_by_event_or_first_job_and_close_for_every_owner() -> None:
    good, bad = Owner({"checkpoints": (2, 10)}), Owner(fail=True)
    other = Owner({"checkpoints": (1, 5), "blobs": (3, 7)})
    scopes = SessionScopes(lambda: [bad, good, other])
    assert scopes.report() is None  # a classic application: no sessions at all
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    scopes.on_event(SessionStarted(1, 1000, a, "alice"))
    scopes.on_event(job(2, tag("bob", session=b), time=2000))  # opened before a restart
    scopes.on_event(job(3, "not connect"))
    assert [s.session_id for s in scopes.open_sessions()] == [a, b]
    report = scopes.report()
    assert report is not None and report.open_total == 2 and report.closed_total == 0
    assert report.open[0].owns == {"checkpoints": (3, 15), "blobs": (3, 7)}
    assert report.open[1].user_id == "bob" and report.open[1].started_at == 2.0
    # A failing owner neither stops the others' release nor the report.
    scopes.on_event(SessionClosed(4, 3000, a, "alice"))
    assert good.closed == [a] and other.closed == [a] and bad.closed == [a]
    # A late job of a closed session does not open it again.
    scopes.on_event(job(5, tag("alice", session=a)))
    assert [s.session_id for s in scopes.open_sessions()] == [b]
    report = scopes.report()
    assert report is not None and (report.open_total, report.closed_total) == (1, 1)


def test_the_report_lists_the_first_sessions_and_counts_all() -> None:
    scopes = SessionScopes(lambda: [])
    for i in range(SESSIONS_KEPT + 5):
        scopes.on_event(SessionStarted(i, i, str(uuid.UUID(int=i)), "u"))
    report = scopes.report()
    assert report is not None
    assert len(report.open) == SESSIONS_KEPT and report.open_total == SESSIONS_KEPT + 5


def test_a_record_report_reads_back_and_hostile_ones_are_dropped_not_raised() -> None:
    good = SessionsReport((SessionOwnership(SID, "u", 1.5, {"checkpoints": (1, 2)}),), 1, 4)
    # Through JSON as the record stores it (tuples become lists).
    import json
    assert SessionsReport.from_json(json.loads(json.dumps(asdict(good)))) == good
    for hostile in [None, 1, "x", [], {"open": "x"}, {"open": [{"session_id": SID}]},
                    {"open": [], "open_total": -1}, {"open": [], "closed_total": "many"},
                    {"open": [{"session_id": SID, "user_id": "u", "started_at": "t"}]},
                    {"open": [{"session_id": SID, "user_id": "u", "started_at": 1,
                               "owns": {"k": [1]}}]}]:
        assert SessionsReport.from_json(hostile) is None, hostile
    many = {"open": [asdict(good.open[0])] * (SESSIONS_KEPT * 3), "open_total": 1}
    read = SessionsReport.from_json(many)
    assert read is not None and len(read.open) == SESSIONS_KEPT
    assert read.open_total == SESSIONS_KEPT  # never fewer than it lists


@pytest.mark.parametrize("lines, stop", [
    ("stop\n", True), ("  stop  \n", True), ("noise\nstop\n", True), ("", False),
    ("stopped\n", False), ("noise\n", False)])
def test_the_lifeline_says_stop_or_closes(lines: str, stop: bool) -> None:
    assert wait_for_stop(io.StringIO(lines)) is stop


class Pipe(io.StringIO):
    """A lifeline that says nothing until told (blocks like the host's pipe)."""

    def __init__(self) -> None:
        super().__init__()
        import threading
        self.said = threading.Event()
        self.text = ""

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.said.wait(10)
        return iter(self.text.splitlines(keepends=True))


def test_the_runtime_is_held_until_stop_or_a_closed_pipe_or_a_silent_jvm() -> None:
    from spark_steward.kernel.host import EXIT_DRIVER_GONE, EXIT_GATEWAY_LOST, hold

    def answering() -> None:
        return None

    def silent() -> None:
        raise ConnectionError("gateway gone")

    assert hold(io.StringIO("stop\n"), answering, interval=0.01) is None
    assert hold(io.StringIO(""), answering, interval=0.01) == EXIT_DRIVER_GONE
    # The JVM stops answering while the pipe stays open: gone after 3 failures in a row.
    assert hold(Pipe(), silent, interval=0.01, failures=3) == EXIT_GATEWAY_LOST
    # Failures that do not follow each other are forgiven.
    flaky = iter([ConnectionError(), None, ConnectionError(), None] * 5)

    def sometimes() -> None:
        error = next(flaky, None)
        if error is not None:
            raise error

    pipe = Pipe()
    import threading
    threading.Timer(0.3, lambda: (setattr(pipe, "text", "stop\n"), pipe.said.set())).start()
    assert hold(pipe, sometimes, interval=0.01, failures=2) is None
