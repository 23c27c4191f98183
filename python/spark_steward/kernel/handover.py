"""The spark-steward values the JVM shim acts on, resolved once by Python and handed over typed.

Python owns every ``spark.steward.*`` key: its grammar, its default, its bounds
(:mod:`spark_steward.config`). The shim must act on a few of them before any Python of ours runs
in its JVM (the driver plugin as the context starts, executor plugins as executors start), so
the driver's Python resolves them as the SparkContext is built and writes the result into that
context's conf under :data:`~spark_steward.config.RESOLVED_KEY`; every JVM of the application
(driver and executors) reads that one entry (the shim's ``kernel.Handover``) and never a
``spark.steward.*`` key itself.

The kernel's fields (on/off, the local dir, the event buffer) are declared here; a capability
whose shim half needs values declares them in its config module (``JVM_VALUES``, a tuple of
:class:`~spark_steward.config.JvmValue`), and the shim reads each in that capability's package.
The encoding is ``field=value`` pairs joined by ``&``, each value percent-encoded, in canonical
forms only: ``true``/``false``, decimal integers, durations in whole milliseconds, sizes in
bytes, paths resolved. A driver started without our Python beside it (a JVM-launched driver, or
``SPARK_STEWARD_AUTOLOAD=0``) asks this module for the same record in a subprocess
(``python -m spark_steward.kernel.handover``), so the resolution still has one owner.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import quote, unquote

from spark_steward.config import (
    ENABLED,
    EVENTS_BUFFER_CAPACITY,
    RESOLVED_KEY,
    JvmValue,
    StewardConf,
    jvm_values,
)
from spark_steward.errors import ConfigError

#: Bumped when a field changes meaning; the shim refuses a record of another version.
VERSION = 1

#: Exit status of the subprocess form for a value Python refuses (the shim stops the start).
EXIT_CONFIG_ERROR = 2

#: What the kernel's shim acts on (``kernel.Handover``'s own fields); each capability declares
#: its own (``JVM_VALUES`` of its config module, :func:`spark_steward.config.jvm_values`).
KERNEL_VALUES = (
    JvmValue("enabled", bool, lambda conf: conf.get(ENABLED)),
    JvmValue("local_dir", str, lambda conf: conf.local_dir()),
    JvmValue("events_buffer_capacity", int, lambda conf: conf.get(EVENTS_BUFFER_CAPACITY)),
)


def declared_values() -> list[JvmValue]:
    """The kernel's values, then every capability's; a field declared twice is refused."""
    values = [*KERNEL_VALUES, *jvm_values()]
    seen: set[str] = set()
    for value in values:
        if value.field in seen or not value.field.replace("_", "").isalnum():
            raise ConfigError(f"JVM handover field {value.field!r} is declared twice or is not "
                              "a plain name")
        seen.add(value.field)
    return values


@dataclass(frozen=True)
class Handover:
    """The resolved record: every declared field's typed value, in declaration order."""

    fields: dict[str, bool | int | str]

    def encode(self) -> str:
        """The conf value: ``v=<VERSION>&<field>=<value>...``, values percent-encoded."""
        parts = [f"v={VERSION}"]
        for name, value in self.fields.items():
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            parts.append(f"{name}={quote(text, safe='')}")
        return "&".join(parts)

    @classmethod
    def decode(cls, raw: str) -> "Handover | None":
        """The record ``encode`` wrote, typed by the declared fields, or None for :data:`OFF`
        (for tests and tools); ValueError when it is neither."""
        pairs = dict(part.split("=", 1) for part in raw.split("&") if "=" in part)
        if pairs.get("v") != str(VERSION):
            raise ValueError(f"not a version {VERSION} handover: {raw[:80]!r}")
        if pairs.get("enabled") == "false":
            return None
        fields: dict[str, bool | int | str] = {}
        for value in declared_values():
            text = unquote(pairs[value.field])
            fields[value.field] = (text == "true" if value.type is bool
                                   else int(text) if value.type is int else text)
        return cls(fields)


def resolve(conf: StewardConf) -> Handover:
    """The handover of ``conf`` (already validated: every value in range)."""
    fields: dict[str, bool | int | str] = {}
    for value in declared_values():
        resolved = value.resolve(conf)
        if type(resolved) is not value.type or not isinstance(resolved, (bool, int, str)):
            raise TypeError(f"JVM handover field {value.field} resolved to "
                            f"{type(resolved).__name__}, declared {value.type.__name__}")
        fields[value.field] = resolved
    return Handover(fields)


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


def install(jconf: Any) -> str:
    """Writes the handover of ``jconf`` (a JVM SparkConf about to build a SparkContext) into it,
    replacing one copied from another context's conf. Returns the encoded record."""
    encoded = encode_pairs((str(t._1()), str(t._2())) for t in jconf.getAll()
                           if str(t._1()).startswith("spark.steward."))
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
