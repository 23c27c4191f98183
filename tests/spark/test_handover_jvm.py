"""The shim reads what Python resolved, and nothing else (issue 34 item 1): ``kernel.Handover``
decodes every record Python's ``kernel/handover.py`` encodes to the same values, refuses what is
not one, parses a session's switches exactly as Python's config does, and its subprocess form
(a driver with no Python of ours beside it) gets the same record Python writes at start.

Through py4j on the driver of the shared session: no JVM of its own."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from py4j.java_gateway import get_field
from py4j.protocol import Py4JJavaError

from spark_steward.config import ENABLED, RESOLVED_KEY
from spark_steward.errors import ConfigError
from spark_steward.kernel.handover import OFF, Handover, declared_values, encode_pairs

ON = [("spark.steward.enabled", "true")]
#: One key varied at a time, each to a value away from its default.
VARIED = [
    ("spark.steward.local.dir", "/data/a b&c=d%e+f/ünï"),
    ("spark.steward.events.buffer-capacity", "7"),
    ("spark.steward.blob.peer.enabled", "false"),
    ("spark.steward.blob.peer.max-connections", "3"),
    ("spark.steward.blob.peer.rate", "1.5m"),
    ("spark.steward.blob.network-timeout", "10.5ms"),
    ("spark.steward.blob.server.handshake-timeout", "2min"),
    ("spark.steward.streams.enabled", "FALSE"),
]
@pytest.fixture(scope="module")
def jhandover(spark: Any) -> Any:
    return spark.sparkContext._jvm.io.sparksteward.shim.kernel.Handover


def java_error(call: Any, *args: Any) -> tuple[str, str]:
    """The simple class name and message of what ``call(*args)`` throws in the JVM (pyspark
    turns some, IllegalArgumentException among them, into its own exceptions)."""
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        call(*args)
    except Py4JJavaError as exc:
        return (str(exc.java_exception.getClass().getSimpleName()),
                str(exc.java_exception.getMessage()))
    except CapturedException as exc:
        return type(exc).__name__, str(exc).split("\n")[0]
    raise AssertionError(f"{args!r} did not throw")


def java_fields(record: Any) -> dict[str, Any]:
    """Every declared field as the shim reads it: the kernel's typed members, and each field
    through the accessor of its declared type, as a capability's package reads it."""
    read = {bool: record.flag, int: record.number, str: record.text}
    fields = {v.field: read[v.type](v.field) for v in declared_values()}
    kernel = {"enabled": get_field(record, "enabled"), "local_dir": get_field(record, "localDir"),
              "events_buffer_capacity": get_field(record, "eventsBufferCapacity")}
    assert {k: fields[k] for k in kernel} == kernel
    return fields


def python_fields(raw: str) -> dict[str, Any]:
    record = Handover.decode(raw)
    assert record is not None
    return record.fields


@pytest.mark.parametrize("pair", [None, *VARIED], ids=lambda p: p[0] if p else "defaults")
def test_java_decodes_what_python_encodes(jhandover: Any, pair: tuple[str, str] | None) -> None:
    raw = encode_pairs(ON + ([pair] if pair else []))
    assert java_fields(jhandover.decode(raw)) == python_fields(raw)


def test_off_and_malformed_records(jhandover: Any) -> None:
    assert get_field(jhandover.decode(OFF), "enabled") is False
    good = encode_pairs(ON)
    # Decoding checks the version and the kernel's fields.
    bad = {
        "v=2&enabled=true": "not version 1",
        good.replace("&events_buffer_capacity=100000", ""): "no field events_buffer_capacity",
        good.replace("events_buffer_capacity=100000", "events_buffer_capacity=1_000"):
            "not a whole number",
        good.replace("enabled=true", "enabled=yes"): "not true or false",
        good.replace("local_dir=", "local_dir=%zz"): "bad percent-encoding",
        good + "&junk": "without '='",
    }
    for raw, why in bad.items():
        kind, message = java_error(jhandover.decode, raw)
        assert kind == "IllegalArgumentException", raw
        assert RESOLVED_KEY in message and why in message, raw
    # A capability's field, when its package reads it.
    record = jhandover.decode(good.replace("streams_enabled=true", "streams_enabled=yes")
                              .replace("&blob_peer_rate=0", ""))
    for read, name, why in ((record.flag, "streams_enabled", "not true or false"),
                            (record.number, "blob_peer_rate", "no field blob_peer_rate"),
                            (record.number, "streams_enabled", "not a whole number")):
        kind, message = java_error(read, name)
        assert kind == "IllegalArgumentException" and why in message, name


SWITCH_VECTORS = ["true", "false", "TRUE", " False ", "\ttrue\n", "yes", "1", "0", "", "on",
                  "truee", "t rue", "ｔrue",
                  # Where Java's trim()/equalsIgnoreCase and Python's strip()/lower() differ.
                  "faLſe", "\u00a0true", "\u2003false\u3000", "\x1ctrue\x1f", "\x85true",
                  "\u200btrue", "true\x00", "\u212arue"]


def test_a_sessions_switch_parses_as_pythons_config(jhandover: Any) -> None:
    for raw in SWITCH_VECTORS:
        try:
            python: Any = ENABLED.parse(raw)
        except ConfigError as exc:
            python = str(exc)
        if isinstance(python, bool):
            assert jhandover.sessionSwitch(ENABLED.name, raw, not python) is python, repr(raw)
        else:
            kind, message = java_error(jhandover.sessionSwitch, ENABLED.name, raw, False)
            # The same line, but Python's repr escapes what Java prints as is.
            assert kind == "IllegalArgumentException", repr(raw)
            assert message.removeprefix("spark-steward: ") == \
                f"{ENABLED.name}='{raw}' is not valid: expected true or false", repr(raw)
            assert python == f"{ENABLED.name}={raw!r} is not valid: expected true or false"
    # Unset in the session: the context's resolved value, either way.
    assert jhandover.sessionSwitch(ENABLED.name, None, True) is True
    assert jhandover.sessionSwitch(ENABLED.name, None, False) is False


def _pairs(spark: Any, pairs: list[tuple[str, str]]) -> Any:
    gateway = spark.sparkContext._gateway
    jlist = gateway.jvm.java.util.ArrayList()
    for key, value in pairs:
        array = gateway.new_array(gateway.jvm.java.lang.String, 2)
        array[0], array[1] = key, value
        jlist.add(array)
    return jlist


def test_the_subprocess_form_answers_as_python_at_start(spark: Any, jhandover: Any) -> None:
    for pairs in (ON, ON + VARIED, [("spark.steward.enabled", "false")]):
        assert jhandover.resolveWithPython(sys.executable, _pairs(spark, pairs)) == \
            encode_pairs(pairs)
    kind, message = java_error(jhandover.resolveWithPython, sys.executable,
                               _pairs(spark, ON + [("spark.steward.blob.peer.rate", "fast")]))
    assert kind == "IllegalArgumentException"
    assert message.startswith("spark.steward.blob.peer.rate='fast' is not valid")
    kind, message = java_error(jhandover.resolveWithPython, "/nonexistent/python3",
                               _pairs(spark, ON))
    assert kind == "IOException" and "/nonexistent/python3 cannot be started" in message


def test_the_running_context_carries_pythons_record(spark: Any) -> None:
    """The shared session started through autoload: Python wrote the record its plugin read."""
    raw = spark.sparkContext.getConf().get(RESOLVED_KEY)
    assert raw is not None
    record = Handover.decode(raw)
    assert record is not None and record.fields["enabled"]
    assert record.fields["local_dir"] == spark.sparkContext.getConf().get("spark.steward.local.dir")
