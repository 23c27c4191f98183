"""The driver runtime's answer to spark-steward's Spark Connect commands (kernel/remote_server.py)
with a fake runtime and the JVM calls faked: routing by each service's ``remote_ops``, what goes
back for a value, a DataFrame, spark-steward's errors and anything else, and that ``handle`` never
raises (py4j would hand the shim a bare callback failure instead of a reply)."""

from __future__ import annotations

import gc
import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import pytest

from spark_steward.checkpoint.errors import CheckpointNotFound
from spark_steward.errors import MalformedCommand, NotAttached, StewardError
from spark_steward.kernel import jvm
from spark_steward.kernel.remote_server import (CommandHandler, RemoteCall, RemoteResult,
                                                operations)
from spark_steward.kernel.remote_wire import parse_reply, request_text

VERSION = "9.8.7"


@dataclass(frozen=True)
class FakeSession:
    handle: Any
    sc: Any


@dataclass(frozen=True)
class FakeFrame:
    handle: Any
    session: Any


class FakeService:
    def __init__(self, name: str, remote_ops: Mapping[str, str]) -> None:
        self.name = name
        self.remote_ops = remote_ops


class FakeRuntime:
    def __init__(self, *services: FakeService, stopped: bool = False) -> None:
        self.services = list(services)
        self.sc: Any = object()  # only passed on, to the faked session_over
        self.stopped = stopped
        self.steward_version = VERSION


class Out:
    """The shim's ``Map<String, Object>`` the handler puts a returned DataFrame in."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, Any]] = []

    def put(self, key: str, value: Any) -> None:
        self.puts.append((key, value))


# -- the ops, loaded by name from this module ----------------------------------------------------

CALLS: list[tuple[Any, RemoteCall]] = []
RESULT_FRAME: Any = FakeFrame("result", None)  # a DataFrame, as far as the handler goes
#: No SparkSession: RemoteCall only carries it.
NO_SESSION: Any = None


def op_echo(service: Any, call: RemoteCall) -> Any:
    CALLS.append((service, call))
    return {"echo": dict(call.args), "by": service.name}


def op_frame(service: Any, call: RemoteCall) -> RemoteResult:
    CALLS.append((service, call))
    return RemoteResult(value=[1, "two"], dataframe=RESULT_FRAME)


def op_result_without_frame(service: Any, call: RemoteCall) -> RemoteResult:
    return RemoteResult(value={"n": 3})


def op_frame_without_value(service: Any, call: RemoteCall) -> RemoteResult:
    return RemoteResult(dataframe=RESULT_FRAME)


def op_none(service: Any, call: RemoteCall) -> None:
    return None


def op_not_found(service: Any, call: RemoteCall) -> None:
    raise CheckpointNotFound("series 's' has no completed checkpoint 7")


def op_steward_error(service: Any, call: RemoteCall) -> None:
    raise StewardError("spark-steward: the plain kind")


def op_crash(service: Any, call: RemoteCall) -> None:
    raise KeyError("secret-internal-key")


def op_crash_multiline(service: Any, call: RemoteCall) -> None:
    raise ValueError("first line\nsecond line")


def op_needs_arg(service: Any, call: RemoteCall) -> int:
    return int(call.arg("n", int))


def op_needs_input(service: Any, call: RemoteCall) -> str:
    return str(call.require_input().handle)


def op_not_json(service: Any, call: RemoteCall) -> Any:
    return object()


def op_not_json_with_frame(service: Any, call: RemoteCall) -> RemoteResult:
    return RemoteResult(value={1, 2}, dataframe=RESULT_FRAME)


def ops(prefix: str, *names: str) -> dict[str, str]:
    return {f"{prefix}.{name}": f"{__name__}:op_{name}" for name in names}


CHECKPOINTS = FakeService("checkpoints", ops("t", "echo", "frame", "result_without_frame",
                                             "frame_without_value", "none", "not_found",
                                             "steward_error"))
OTHER = FakeService("other", {**ops("o", "crash", "crash_multiline", "needs_arg", "needs_input",
                                    "not_json", "not_json_with_frame"),
                              "o.echo": f"{__name__}:op_echo",
                              "o.missing_function": f"{__name__}:op_does_not_exist",
                              "o.missing_module": "tests.unit.no_such_module:op"})


@pytest.fixture(autouse=True)
def fake_jvm(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """session_over, to_dataframe and dataframe_handle without a JVM; their calls, in order."""
    calls: list[tuple[str, Any]] = []

    def session_over(handle: Any, sc: Any) -> FakeSession:
        calls.append(("session_over", handle))
        return FakeSession(handle, sc)

    def to_dataframe(handle: Any, spark: Any) -> FakeFrame:
        calls.append(("to_dataframe", handle))
        return FakeFrame(handle, spark)

    def dataframe_handle(df: Any) -> Any:
        calls.append(("dataframe_handle", df))
        return ("jdf", df.handle)

    monkeypatch.setattr(jvm, "session_over", session_over)
    monkeypatch.setattr(jvm, "to_dataframe", to_dataframe)
    monkeypatch.setattr(jvm, "dataframe_handle", dataframe_handle)
    CALLS.clear()
    yield calls
    CALLS.clear()


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime(CHECKPOINTS, OTHER)


def ask(handler: CommandHandler, request: Any, jinput: Any = None,
        out: Out | None = None) -> tuple[Any, tuple[str, str] | None]:
    reply = handler.handle("sid-1", "alice", request, "jsession", jinput, None,
                           out or Out())
    assert isinstance(reply, str)
    return parse_reply(reply)


def error_of(handler: CommandHandler, request: Any, **kwargs: Any) -> tuple[str, str]:
    value, error = ask(handler, request, **kwargs)
    assert error is not None, value
    return error


# -- routing and values --------------------------------------------------------------------------


def test_a_command_reaches_its_function_with_the_call(runtime: FakeRuntime,
                                                      fake_jvm: list[tuple[str, Any]]) -> None:
    handler = CommandHandler(runtime)
    out = Out()
    args = {"series": "s", "n": 1, "nested": {"a": [None]}}
    reply = handler.handle("sid-1", "alice", request_text("t.echo", args), "jsession", "jinput",
                           None, out)
    assert parse_reply(reply) == ({"echo": args, "by": "checkpoints"}, None)
    [(service, call)] = CALLS
    assert service is CHECKPOINTS
    assert (call.op, dict(call.args), call.session_id, call.user_id) == \
        ("t.echo", args, "sid-1", "alice")
    assert call.session == FakeSession("jsession", runtime.sc)
    assert call.input == FakeFrame("jinput", call.session)
    assert fake_jvm == [("session_over", "jsession"), ("to_dataframe", "jinput")]
    assert out.puts == []


def test_the_same_function_is_called_with_the_service_that_declares_the_op(
        runtime: FakeRuntime) -> None:
    handler = CommandHandler(runtime)
    assert ask(handler, request_text("o.echo", {})) == ({"echo": {}, "by": "other"}, None)
    assert CALLS[0][0] is OTHER


def test_without_an_input_no_dataframe_is_made(runtime: FakeRuntime,
                                               fake_jvm: list[tuple[str, Any]]) -> None:
    ask(CommandHandler(runtime), '{"op": "t.echo"}')  # args left out: {}
    [(_, call)] = CALLS
    assert call.input is None and dict(call.args) == {}
    assert fake_jvm == [("session_over", "jsession")]


def test_session_and_user_ids_reach_the_call_as_strings(runtime: FakeRuntime) -> None:
    session_id: Any = 42
    user_id: Any = 7
    CommandHandler(runtime).handle(session_id, user_id, request_text("t.echo", {}), "js", None,
                                   None, Out())
    assert (CALLS[0][1].session_id, CALLS[0][1].user_id) == ("42", "7")


@pytest.mark.parametrize("op, value", [
    ("t.result_without_frame", {"n": 3}), ("t.none", None), ("t.frame_without_value", None),
], ids=["result", "none", "frame-only"])
def test_values_go_back_as_value_replies(runtime: FakeRuntime, op: str, value: Any) -> None:
    assert ask(CommandHandler(runtime), request_text(op, {})) == (value, None)


def test_a_returned_dataframe_is_handed_to_the_shim(runtime: FakeRuntime,
                                                    fake_jvm: list[tuple[str, Any]]) -> None:
    out = Out()
    assert ask(CommandHandler(runtime), request_text("t.frame", {}), out=out) == \
        ([1, "two"], None)
    assert out.puts == [("dataframe", ("jdf", "result"))]
    assert ("dataframe_handle", RESULT_FRAME) in fake_jvm


@pytest.mark.parametrize("op", ["t.echo", "t.result_without_frame", "t.none", "t.not_found",
                                "o.crash"])
def test_no_dataframe_no_put(runtime: FakeRuntime, op: str) -> None:
    out = Out()
    ask(CommandHandler(runtime), request_text(op, {}), out=out)
    assert out.puts == []


def test_the_input_reaches_an_op_that_needs_it(runtime: FakeRuntime) -> None:
    handler = CommandHandler(runtime)
    assert ask(handler, request_text("o.needs_input", {}), jinput="jin") == ("jin", None)
    kind, message = error_of(handler, request_text("o.needs_input", {}))
    assert kind == "StewardError"
    assert "malformed" in message and "o.needs_input needs a DataFrame" in message


# -- errors ----------------------------------------------------------------------------------------


def test_spark_stewards_own_errors_go_back_by_class_name(runtime: FakeRuntime) -> None:
    handler = CommandHandler(runtime)
    assert error_of(handler, request_text("t.not_found", {})) == \
        ("CheckpointNotFound", "series 's' has no completed checkpoint 7")
    assert error_of(handler, request_text("t.steward_error", {})) == \
        ("StewardError", "spark-steward: the plain kind")


def test_a_bad_argument_goes_back_as_a_malformed_command(runtime: FakeRuntime) -> None:
    handler = CommandHandler(runtime)
    assert ask(handler, request_text("o.needs_arg", {"n": 5})) == (5, None)
    kind, message = error_of(handler, request_text("o.needs_arg", {"n": "5"}))
    assert kind == "StewardError" and "malformed" in message and "'n'" in message
    kind, message = error_of(handler, request_text("o.needs_arg", {}))
    assert kind == "StewardError" and "the argument 'n' is missing" in message


@pytest.mark.parametrize("op, exception", [
    ("o.crash", "KeyError"), ("o.crash_multiline", "ValueError"), ("o.not_json", "TypeError"),
    ("o.missing_function", "AttributeError"), ("o.missing_module", "ModuleNotFoundError"),
], ids=["raises", "multiline", "not-json-able", "no-function", "no-module"])
def test_any_other_failure_is_one_line_naming_the_op_with_the_trace_in_the_log(
        runtime: FakeRuntime, caplog: pytest.LogCaptureFixture, op: str, exception: str) -> None:
    caplog.set_level(logging.ERROR, logger="spark_steward.kernel.remote_server")
    reply = CommandHandler(runtime).handle("sid-1", "alice", request_text(op, {}), "js", None, None,
                                           Out())
    _, error = parse_reply(reply)
    assert error is not None
    kind, message = error
    assert kind == "StewardError"
    assert f"spark-steward's {op} failed on the Connect server: {exception}" in message
    assert message.endswith("(the server's log has the trace)")
    assert "\n" not in message and "second line" not in message
    assert "Traceback" not in reply and "File \"" not in reply
    # The trace is in the server's log, with the op and the session.
    [record] = [r for r in caplog.records if r.name == "spark_steward.kernel.remote_server"]
    assert record.exc_info is not None and op in record.getMessage()
    assert "sid-1" in record.getMessage()


def test_a_failing_jvm_call_is_answered_too(runtime: FakeRuntime,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def dead(handle: Any, sc: Any) -> None:
        raise ConnectionError("the gateway is gone")

    monkeypatch.setattr(jvm, "session_over", dead)
    kind, message = error_of(CommandHandler(runtime), request_text("t.echo", {}))
    assert kind == "StewardError"
    assert "t.echo failed" in message and "ConnectionError: the gateway is gone" in message
    assert CALLS == []


@pytest.mark.parametrize("request_", [
    "", "not json", '{"op": 1}', '{"op": "t.echo", "args": []}', "[]", None, 12, b"{}",
], ids=["empty", "not-json", "op-int", "args-list", "list", "none", "int", "bytes"])
def test_a_malformed_request_is_answered_as_malformed(runtime: FakeRuntime,
                                                      request_: Any) -> None:
    kind, message = error_of(CommandHandler(runtime), request_)
    assert kind == "StewardError"
    assert message.startswith("spark-steward: a malformed command: the request is ")
    assert CALLS == []


@pytest.mark.parametrize("op", ["t.nope", "", "checkpoints.save\n"],
                         ids=["unknown", "empty", "newline"])
def test_an_unknown_op_names_itself_and_the_servers_version(runtime: FakeRuntime,
                                                            op: str) -> None:
    kind, message = error_of(CommandHandler(runtime), request_text(op, {}))
    assert kind == "StewardError"
    assert f"has no command {op!r}" in message and f"spark-steward {VERSION}" in message
    assert "upgrade spark-steward on the server" in message


def test_a_stopped_runtime_refuses_every_command(
        runtime: FakeRuntime, fake_jvm: list[tuple[str, Any]]) -> None:
    handler = CommandHandler(runtime)
    runtime.stopped = True
    for op in ("t.echo", "t.frame", "t.nope"):
        out = Out()
        kind, message = error_of(handler, request_text(op, {}), out=out)
        assert kind == NotAttached.__name__ and "stopped" in message
        assert out.puts == []
    assert CALLS == [] and fake_jvm == []


def test_a_collected_runtime_refuses_too() -> None:
    runtime = FakeRuntime(CHECKPOINTS)
    handler = CommandHandler(runtime)
    del runtime
    gc.collect()
    assert error_of(handler, request_text("t.echo", {}))[0] == "NotAttached"
    assert CALLS == []


def test_a_failed_reply_hands_over_no_dataframe(runtime: FakeRuntime) -> None:
    out = Out()
    kind, message = error_of(CommandHandler(runtime), request_text("o.not_json_with_frame", {}),
                             out=out)
    assert kind == "StewardError" and "TypeError" in message
    assert out.puts == []


def test_handle_never_raises_whatever_the_request(runtime: FakeRuntime,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="spark_steward.kernel.remote_server")
    handler = CommandHandler(runtime)
    rng = random.Random(35)
    known = sorted(operations(runtime.services))
    pieces = ['{', '}', '[', ']', '"op"', '"args"', ':', ',', '"t.echo"', 'null', '1', '"',
              '\\', 'true', '{"n": 1}', '"\\ud800"', 'NaN', ' ', 'é']
    requests: list[Any] = ["[" * 50_000, '{"op": "t.echo", "args": ' + "[" * 50_000]
    for case in range(1500):
        shape = case % 3
        if shape == 0:
            requests.append("".join(rng.choice(pieces) for _ in range(rng.randrange(12))))
        elif shape == 1:
            requests.append(rng.randbytes(rng.randrange(16)).decode("latin-1"))
        else:
            args = {rng.choice("nabc"): rng.choice([1, "5", None, True, [1], {"x": 1.5}])
                    for _ in range(rng.randrange(3))}
            requests.append(request_text(rng.choice(known), args))
    for request in requests:
        jinput = rng.choice([None, "jin"])
        reply = handler.handle("sid", "u", request, "js", jinput, None, Out())
        value, error = parse_reply(reply)  # always a well-formed reply
        assert error is None or all(isinstance(part, str) for part in error)
        json.loads(reply)


# -- RemoteCall.arg ------------------------------------------------------------------------------


def call_with(**args: Any) -> RemoteCall:
    return RemoteCall("t.op", args, "sid", "user", session=NO_SESSION)


def test_a_missing_argument_is_named() -> None:
    with pytest.raises(MalformedCommand, match=r"^t\.op: the argument 'series' is missing$"):
        call_with(other=1).arg("series", str)


@pytest.mark.parametrize("value, kind", [
    ("3", int), (3.0, int), (True, int), (False, int), (None, int), (3, str), (1, float),
    ("x", list), ([], dict), (0, bool), ("true", bool),
], ids=["str-int", "float-int", "true-int", "false-int", "none-int", "int-str", "int-float",
        "str-list", "list-dict", "int-bool", "str-bool"])
def test_a_wrong_type_is_refused_naming_argument_value_and_type(value: Any, kind: type) -> None:
    with pytest.raises(MalformedCommand) as raised:
        call_with(a=value).arg("a", kind)
    message = str(raised.value)
    assert message.startswith(f"t.op: the argument 'a' is {value!r}, ")
    assert message.endswith(f" {kind.__name__}")


@pytest.mark.parametrize("default", [None, 0, 5], ids=["default-none", "default-0", "default-5"])
def test_a_bool_is_not_an_int_even_with_a_default(default: Any) -> None:
    for flag in (True, False):
        with pytest.raises(MalformedCommand, match=f"the argument 'n' is {flag}, .* int$"):
            call_with(n=flag).arg("n", int, default)


@pytest.mark.parametrize("value, kind", [
    (3, int), (-1, int), (2 ** 70, int), (1.5, float), ("s", str), ("", str), (True, bool),
    (False, bool), ([1], list), ({"k": 1}, dict),
], ids=["int", "negative", "big-int", "float", "str", "empty-str", "true", "false", "list",
        "dict"])
def test_a_right_type_is_returned(value: Any, kind: type) -> None:
    assert call_with(a=value).arg("a", kind) == value
    assert call_with(a=value).arg("a", kind, None) == value


def test_the_default_when_absent_and_none_only_when_the_default_is_none() -> None:
    assert call_with().arg("n", int, 5) == 5
    assert call_with().arg("n", int, None) is None
    assert call_with(n=None).arg("n", int, None) is None
    with pytest.raises(MalformedCommand, match="the argument 'n' is None, .* int$"):
        call_with(n=None).arg("n", int, 5)
    assert call_with(n=7).arg("n", int, 5) == 7


def test_require_input() -> None:
    with pytest.raises(MalformedCommand, match=r"^t\.op needs a DataFrame$"):
        call_with().require_input()
    frame: Any = FakeFrame("j", None)
    assert RemoteCall("t.op", {}, "s", "u", NO_SESSION, frame).require_input() is frame


# -- operations ------------------------------------------------------------------------------


def test_operations_maps_each_op_to_its_service_and_target() -> None:
    found = operations([CHECKPOINTS, OTHER])
    assert found["t.echo"] == (CHECKPOINTS, f"{__name__}:op_echo")
    assert found["o.echo"] == (OTHER, f"{__name__}:op_echo")
    assert set(found) == set(CHECKPOINTS.remote_ops) | set(OTHER.remote_ops)
    assert operations([]) == {}


def test_an_op_claimed_by_two_services_is_refused_naming_both() -> None:
    twin = FakeService("tables", {"t.echo": f"{__name__}:op_none"})
    with pytest.raises(StewardError) as raised:
        operations([CHECKPOINTS, twin])
    message = str(raised.value)
    assert "'t.echo'" in message and "'checkpoints'" in message and "'tables'" in message
    with pytest.raises(StewardError, match="'t.echo' is claimed by both"):
        CommandHandler(FakeRuntime(CHECKPOINTS, OTHER, twin))
