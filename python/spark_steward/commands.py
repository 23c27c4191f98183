"""What the command groups of ``spark-steward`` share: the storage arguments and the registry
they open, the shape of a ``gc`` collector, and how sizes, ages and counts print.

The kernel's commands live in :mod:`spark_steward.cli`; each capability adds its group and its
collector from its own folder (the ``cli`` and ``gc`` of its
:class:`~spark_steward.capabilities.Capability`, e.g. ``blob/cli.py``) and builds on this module,
never on the cli itself.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from spark_steward.errors import StewardError

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress


@dataclass(frozen=True)
class Collector:
    """One kind of garbage ``spark-steward gc`` collects: a capability's, named as the ``gc`` of
    its declaration. Collectors run in capability order, those with ``only_with`` last."""

    name: str
    run: Callable[["ApplicationRegistry", argparse.Namespace, "Progress | None"], "GcReport"]
    #: What one deleted item is, for the summary line.
    noun: str = "application"
    #: The ``gc`` option (its argparse dest) without which this collector does not run.
    only_with: str | None = None


def storage_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--storage``, ``--json``, ``--option`` and ``--heartbeat-timeout``: what every
    command that reads a storage dir takes."""
    parser.add_argument("--storage", required=True, help="storage URL to inspect")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--option", action="append", metavar="NAME=VALUE",
                        help="fsspec option for the storage, as spark.steward.storage.option.NAME")
    parser.add_argument("--heartbeat-timeout", help="override spark.steward.heartbeat.timeout")


def storage_options(items: list[str] | None) -> dict[str, object]:
    """``NAME=VALUE`` items of ``--option`` as fsspec keyword arguments."""
    from spark_steward.config import STORAGE_OPTION_PREFIX, parse_storage_option

    options: dict[str, object] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise StewardError(f"--option {item!r} is not NAME=VALUE (the part after "
                               f"{STORAGE_OPTION_PREFIX})")
        options[name] = parse_storage_option(value)
    return options


def open_registry(args: argparse.Namespace) -> "ApplicationRegistry":
    """The registry of ``--storage`` with ``--option`` and ``--heartbeat-timeout`` applied."""
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.config import HEARTBEAT_TIMEOUT
    from spark_steward.storage import Storage

    storage = Storage.from_url(args.storage, **storage_options(args.option))
    timeout = HEARTBEAT_TIMEOUT.parse(args.heartbeat_timeout) if args.heartbeat_timeout \
        else HEARTBEAT_TIMEOUT.default
    return ApplicationRegistry(storage, heartbeat_timeout=timeout)


def plural(n: int, word: str) -> str:
    """``1 blob``, ``2 blobs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def human_size(n: int) -> str:
    """Bytes as ``512 B``, ``1.5 KiB`` ... ``2.0 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def ago(seconds: float) -> str:
    """An age as ``42s ago``, ``7min ago`` or ``3.5h ago``."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min ago"
    return f"{seconds / 3600:.1f}h ago"


def ratio(value: float) -> str:
    """A ratio with two decimals, ``-`` for infinity."""
    return "-" if value == float("inf") else f"{value:.2f}"
