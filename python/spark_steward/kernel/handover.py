"""The spark-steward values the JVM shim acts on, resolved once by Python and handed over typed.

Python owns every ``spark.steward.*`` key: its grammar, its default, its bounds
(:mod:`spark_steward.config`). The shim must act on a few of them before any Python of ours runs
in its JVM (the driver plugin as the context starts, executor plugins as executors start), so
the driver's Python resolves them as the SparkContext is built and writes the result into that
context's conf under :data:`~spark_steward.config.RESOLVED_KEY`; every JVM of the application
(driver and executors) reads that one entry (the shim's ``kernel.Handover``) and never a
``spark.steward.*`` key itself.

The encoding is ``field=value`` pairs joined by ``&``, each value percent-encoded, in canonical
forms only: ``true``/``false``, decimal integers, durations in whole milliseconds, sizes in
bytes, paths resolved. A driver started without our Python beside it (a JVM-launched driver, or
``SPARK_STEWARD_AUTOLOAD=0``) asks this module for the same record in a subprocess
(``python -m spark_steward.kernel.handover``), so the resolution still has one owner.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable
from urllib.parse import quote, unquote

from spark_steward.config import (
    BLOB_NETWORK_TIMEOUT,
    BLOB_PEER_ENABLED,
    BLOB_PEER_MAX_CONNECTIONS,
    BLOB_PEER_RATE,
    BLOB_SERVER_HANDSHAKE_TIMEOUT,
    ENABLED,
    EVENTS_BUFFER_CAPACITY,
    RESOLVED_KEY,
    STREAMS_ENABLED,
    StewardConf,
)
from spark_steward.errors import ConfigError

#: Bumped when a field changes meaning; the shim refuses a record of another version.
VERSION = 1

#: Exit status of the subprocess form for a value Python refuses (the shim stops the start).
EXIT_CONFIG_ERROR = 2


@dataclass(frozen=True)
class Handover:
    """What the shim needs, typed; field order is the encoding's order."""

    enabled: bool
    local_dir: str
    events_buffer_capacity: int
    blob_peer_enabled: bool
    blob_peer_max_connections: int
    blob_peer_rate: int
    blob_network_timeout_ms: int
    blob_handshake_timeout_ms: int
    streams_enabled: bool

    def encode(self) -> str:
        """The conf value: ``v=<VERSION>&<field>=<value>...``, values percent-encoded."""
        parts = [f"v={VERSION}"]
        for name, value in asdict(self).items():
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            parts.append(f"{name}={quote(text, safe='')}")
        return "&".join(parts)

    @classmethod
    def decode(cls, raw: str) -> "Handover | None":
        """The record ``encode`` wrote, or None for :data:`OFF` (for tests and tools);
        ValueError when it is neither."""
        pairs = dict(part.split("=", 1) for part in raw.split("&") if "=" in part)
        if pairs.get("v") != str(VERSION):
            raise ValueError(f"not a version {VERSION} handover: {raw[:80]!r}")
        if pairs.get("enabled") == "false":
            return None
        values: dict[str, Any] = {}
        for f in fields(cls):
            text = unquote(pairs[f.name])
            values[f.name] = (text == "true" if f.type in ("bool", bool)
                              else int(text) if f.type in ("int", int) else text)
        return cls(**values)


def _millis(seconds: float) -> int:
    """Whole milliseconds, rounded up: a timeout never becomes shorter than what was asked."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))


def resolve(conf: StewardConf) -> Handover:
    """The handover of ``conf`` (already validated: every value in range)."""
    return Handover(
        enabled=conf.get(ENABLED),
        local_dir=conf.local_dir(),
        events_buffer_capacity=conf.get(EVENTS_BUFFER_CAPACITY),
        blob_peer_enabled=conf.get(BLOB_PEER_ENABLED),
        blob_peer_max_connections=conf.get(BLOB_PEER_MAX_CONNECTIONS),
        blob_peer_rate=conf.get(BLOB_PEER_RATE),
        blob_network_timeout_ms=_millis(conf.get(BLOB_NETWORK_TIMEOUT)),
        blob_handshake_timeout_ms=_millis(conf.get(BLOB_SERVER_HANDSHAKE_TIMEOUT)),
        streams_enabled=conf.get(STREAMS_ENABLED),
    )


#: The record of a context started with spark-steward off: the shim reads nothing else, and no
#: other value is validated (a bad one must not stop an application that does not use them).
OFF = f"v={VERSION}&enabled=false"


def encode_pairs(pairs: Iterable[tuple[str, str]]) -> str:
    """The encoded handover of a SparkConf's pairs: :data:`OFF` when spark-steward is off at
    context start; ConfigError names a bad key and value."""
    pairs = list(pairs)
    raw = dict(pairs).get(ENABLED.name)
    if raw is None or not ENABLED.parse(raw):
        return OFF
    return resolve(StewardConf.from_pairs(pairs, warn_unknown=False)).encode()


def install(jconf: Any, *, enabled: bool) -> str:
    """Writes the handover of ``jconf`` (a JVM SparkConf about to build a SparkContext) into it,
    replacing one copied from another context's conf. Returns the encoded record."""
    if enabled:
        pairs = [(str(t._1()), str(t._2())) for t in jconf.getAll()
                 if str(t._1()).startswith("spark.steward.")]
        encoded = encode_pairs(pairs)
    else:
        encoded = OFF
    jconf.set(RESOLVED_KEY, encoded)
    return encoded


def main(stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    """The subprocess form: a JSON list of ``[key, value]`` pairs on stdin, the encoded record on
    stdout. A value Python refuses exits :data:`EXIT_CONFIG_ERROR` with ConfigError's one line on
    stderr."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    try:
        pairs = [(str(k), str(v)) for k, v in json.load(stdin)]
    except (ValueError, TypeError) as exc:
        print(f"spark-steward: the handover request is not a JSON list of pairs: {exc}",
              file=stderr)
        return 1
    try:
        stdout.write(encode_pairs(pairs))
    except ConfigError as exc:
        print(str(exc), file=stderr)
        return EXIT_CONFIG_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
