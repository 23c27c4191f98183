"""The driver runtime's side of the thin client: answers spark-steward's Spark Connect
commands, which the shim's command extension (``io.sparksteward.shim.connect.StewardCommands``)
hands over through py4j's callback server.

Each capability names the commands it answers in :attr:`RuntimeService.remote_ops` (``op`` to
``module:function``); a function takes the service and a :class:`RemoteCall` and returns a
JSON-able value or a :class:`RemoteResult` with a DataFrame for the client. The kernel knows no
capability: it only routes. spark-steward's own errors go back to the client by class name and
message (the client raises the same class); anything else is logged here with its traceback
and reaches the client as one line.
"""

from __future__ import annotations

import importlib
import json
import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from spark_steward.errors import StewardError
from spark_steward.kernel import jvm
from spark_steward.kernel.remote_wire import (WireError, error_reply, parse_request,
                                              value_reply)

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The command extension Spark loads by name, and the conf key naming it.
COMMAND_CLASSES_KEY, COMMAND_CLASS = jvm.CONNECT_EXTENSIONS[0]


class Answering(Protocol):
    """A capability's service, as far as routing goes (``RuntimeService``)."""

    name: str
    remote_ops: Mapping[str, str]


class Runtime(Protocol):
    """The driver runtime, as far as answering commands goes (``DriverRuntime``; the runtime
    imports this module, not the other way round)."""

    sc: "SparkContext"
    steward_version: str
    #: The executor context (``ExecutorContext``) the runtime broadcasts to its tasks.
    context: Any

    @property
    def services(self) -> Sequence[Any]:
        """The capabilities' services, in rank order."""

    @property
    def stopped(self) -> bool:
        """Whether the runtime has stopped (commands are refused then)."""


@dataclass(frozen=True)
class RemoteCall:
    """One command from a Connect client, as its capability sees it."""

    op: str
    args: Mapping[str, Any]
    #: The Connect session and user, from the server's own session holder.
    session_id: str
    user_id: str
    #: A classic SparkSession over that Connect session's JVM session (its conf, temp views).
    session: "SparkSession"
    #: The DataFrame the call names, planned in that session, or None.
    input: "DataFrame | None" = None
    #: The bytes the call carries (a blob's), or None.
    data: bytes | None = None

    def arg(self, name: str, kind: type, default: Any = ...) -> Any:
        """Argument ``name`` checked to be a ``kind``; WireError names a missing or bad one."""
        value = self.args.get(name, default)
        if value is ...:
            raise WireError(f"{self.op}: the argument {name!r} is missing")
        if value is default:
            return value
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise WireError(f"{self.op}: the argument {name!r} is {value!r}, expected "
                            f"{kind.__name__}")
        return value

    def require_input(self) -> "DataFrame":
        """The DataFrame of the call; MalformedCommand when the client sent none."""
        if self.input is None:
            raise WireError(f"{self.op} needs a DataFrame")
        return self.input


@dataclass(frozen=True)
class RemoteResult:
    """A command's answer: a JSON-able value and, optionally, a DataFrame for the client."""

    value: Any = None
    dataframe: "DataFrame | None" = field(default=None)


Operation = Callable[[Any, RemoteCall], Any]


def operations(services: Sequence[Answering]) -> dict[str, tuple[Answering, str]]:
    """Every op the services answer, with its service and ``module:function`` name."""
    found: dict[str, tuple[Answering, str]] = {}
    for service in services:
        for op, target in service.remote_ops.items():
            if op in found:
                raise StewardError(f"spark-steward commands: {op!r} is claimed by both "
                                   f"{found[op][0].name!r} and {service.name!r}")
            found[op] = (service, target)
    return found


def _load(target: str) -> Operation:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


class CommandHandler:
    """The Python ``ConnectCommands`` the shim calls: one per attached runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = weakref.ref(runtime)
        self._ops = operations(runtime.services)

    def handle(self, session_id: str, user_id: str, request: str, jsession: Any, jinput: Any,
               data: Any, out: Any) -> str:
        """One command (``ConnectCommands.handle``): the reply JSON; never raises."""
        op = "?"
        try:
            op, args = parse_request(str(request))
            runtime = self._runtime()
            if runtime is None or runtime.stopped:
                return error_reply("NotAttached", "spark-steward's runtime on this Connect "
                                   "server has stopped")
            entry = self._ops.get(op)
            if entry is None:
                return error_reply(
                    "StewardError", f"this Connect server's spark-steward "
                    f"{runtime.steward_version} has no command {op!r}: upgrade spark-steward "
                    "on the server to the client's version")
            service, target = entry
            session = jvm.session_over(jsession, runtime.sc)
            frame = None if jinput is None else jvm.to_dataframe(jinput, session)
            call = RemoteCall(op, args, str(session_id), str(user_id), session, frame,
                              None if data is None else bytes(data))
            result = _load(target)(service, call)
            if not isinstance(result, RemoteResult):
                result = RemoteResult(result)
            reply = value_reply(result.value)  # before the DataFrame: a failed reply keeps none
            if result.dataframe is not None:
                out.put("dataframe", jvm.dataframe_handle(result.dataframe))
            return reply
        except WireError as exc:
            return error_reply("StewardError", f"spark-steward: a malformed command: {exc}")
        except StewardError as exc:
            return error_reply(type(exc).__name__, str(exc))
        except Exception as exc:  # noqa: BLE001 - one line to the client, the trace here
            log.exception("spark-steward command %s of Connect session %s failed", op,
                          session_id)
            return error_reply("StewardError", f"spark-steward's {op} failed on the Connect "
                               f"server: {type(exc).__name__}: {jvm.java_message(exc)} (the "
                               "server's log has the trace)")

    class Java:
        implements = ["io.sparksteward.shim.kernel.ConnectCommands"]


def wanted(runtime: Runtime) -> bool:
    """Whether this driver loads spark-steward's command extension (a Connect server started
    with ``spark-steward conf --server``)."""
    classes = runtime.sc.getConf().get(COMMAND_CLASSES_KEY, "") or ""
    return COMMAND_CLASS in [c.strip() for c in classes.split(",")]


def register(runtime: Runtime) -> CommandHandler | None:
    """Hands the shim this runtime's handler when the driver serves the thin client."""
    if not wanted(runtime):
        return None
    handler = CommandHandler(runtime)
    jvm.ensure_callback_server(runtime.sc)
    shim = jvm.facade(runtime.sc)
    shim.call("setConnectCommands", handler)
    # Clients' UDFs carry no context of ours: the shim relays this one to their tasks.
    shim.call("publishTaskContext", json.dumps(runtime.context.to_broadcast()))
    log.info("spark-steward answers its Connect commands (%d kinds)", len(handler._ops))
    return handler


def unregister(runtime: Runtime) -> None:
    """Connect commands are refused from now on, and clients' tasks get no context (the
    runtime stops)."""
    shim = jvm.facade(runtime.sc)
    shim.call("clearConnectCommands")
    shim.call("publishTaskContext", None)
