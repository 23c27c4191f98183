"""The thin client: spark-steward's API against a Spark Connect session, with nothing but the
package and a Connect client (``pyspark-client``) on this machine, no JVM.

Each call goes to the server as a Connect command (:mod:`spark_steward.kernel.remote_wire`),
answered by the driver runtime beside the server (:mod:`spark_steward.kernel.remote_server`),
which runs it in the caller's own session. spark-steward's errors come back as the same classes
with the server's one-line message; a DataFrame comes back as a relation the server keeps for
this session (as ``df.checkpoint()``'s result is kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from spark_steward.errors import SetupError, StewardError
from spark_steward.kernel import session as sessions
from spark_steward.kernel.remote_wire import (COMMAND_TYPE, REPLY_MAX_TEXT, REPLY_TYPE, Payload,
                                              WireError, decode, encode, parse_reply,
                                              request_text)

if TYPE_CHECKING:
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.session import SparkSession as ConnectSession

#: What a Connect server says for a command extension it does not load.
_NO_HANDLER = "No handler found for extension"


def connect_session(obj: Any = None) -> Any:
    """The Spark Connect session behind ``obj`` (a SparkSession or DataFrame; None: the active
    session), or None when it is a classic one. SetupError on a pyspark whose Connect server
    spark-steward cannot extend (3.x), naming what to do instead."""
    if obj is None:
        obj = _active_connect_session()
        if obj is None:
            return None
    spark = getattr(obj, "sparkSession", obj)  # a DataFrame's session, or the session itself
    if not sessions.is_connect_session(spark):
        return None
    import pyspark

    version = str(pyspark.__version__)
    if version.split(".")[0] in ("2", "3"):
        raise SetupError(sessions.connect_refusal(version))
    return spark


def _active_connect_session() -> Any:
    """The active Connect session on this thread, when the active session is one."""
    try:
        active = sessions.active_session()
    except Exception:  # noqa: BLE001 - a client without a classic pyspark answers below
        active = None
    if active is not None:
        return active if sessions.is_connect_session(active) else None
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:
        return None
    return ConnectSession.getActiveSession()


def _error_class(name: str) -> type[StewardError]:
    """spark-steward's error class ``name`` (the kernel's or a capability's), else
    StewardError: a newer server may name one this client does not have."""
    from spark_steward import errors

    found = getattr(errors, name, None) if name.isidentifier() else None
    return found if isinstance(found, type) and issubclass(found, StewardError) \
        else StewardError


def call(spark: "ConnectSession", op: str, args: Mapping[str, Any], df: Any = None,
         data: bytes | None = None) -> tuple[Any, "DataFrame | None"]:
    """Runs command ``op`` in ``spark`` (a Connect session) with ``args`` and, for calls that
    take them, ``df`` and ``data``; returns the value and the DataFrame the server returned (or
    None)."""
    from pyspark.sql.connect import proto

    extra = None if df is None else df._plan.plan(spark.client).SerializeToString()
    command = proto.Command()
    command.extension.type_url = COMMAND_TYPE
    command.extension.value = encode(Payload(request_text(op, args), extra, data))
    try:
        _, properties, _ = spark.client.execute_command(command)
    except Exception as exc:
        raise _server_error(op, exc) from None
    relation = properties.get("sql_command_result")
    if relation is None or not relation.HasField("extension") \
            or relation.extension.type_url != REPLY_TYPE:
        raise SetupError(f"spark_steward {op}: the Connect server did not answer with "
                         "spark-steward's reply; is its command extension the one of "
                         "`spark-steward conf --server`?")
    try:
        reply = decode(relation.extension.value, REPLY_MAX_TEXT)
        value, error = parse_reply(reply.text)
    except WireError as exc:
        raise StewardError(f"spark_steward {op}: the server's reply is malformed: {exc}") from None
    if error is not None:
        raise _error_class(error[0])(error[1])
    frame = None
    if reply.extra is not None:
        frame = cached_relation(spark, reply.extra.decode("utf-8"))
    return value, frame


def cached_relation(spark: "ConnectSession", relation_id: str) -> "DataFrame":
    """A DataFrame over the relation the server keeps under ``relation_id`` for this session;
    released there when the DataFrame is collected or the session closes."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import CachedRemoteRelation

    return ConnectDataFrame(CachedRemoteRelation(relation_id, spark), spark)


def _server_error(op: str, exc: Exception) -> StewardError:
    """The one-line error for a command the server refused outright."""
    message = str(exc)
    if _NO_HANDLER in message:
        return SetupError(
            f"spark_steward {op}: this Connect server does not run spark-steward's command "
            "extension. Start it with the flags of `spark-steward conf --server` (spark-steward "
            "installed on the server too)")
    at = message.find("spark-steward:")
    line = (message[at:] if at >= 0 else message).splitlines()[0] if message else repr(exc)
    return StewardError(f"spark_steward {op} through Spark Connect failed: {line}")
