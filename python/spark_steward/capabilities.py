"""What a capability plugs in, and the one place its declaration is read.

A capability (blobs, checkpoints, cached tables, local state, streams, a third party's) is one
folder declared by one entry point of the group ``spark_steward.services`` whose value is a
:class:`Capability`: the names of what it brings (its driver service, CLI group, gc collector,
config keys and errors), each imported only by whoever needs it. The kernel builds the services
at attach (:mod:`spark_steward.kernel.services`), ``spark-steward`` adds the CLI groups and
collectors, :mod:`spark_steward.config` lists the keys and :mod:`spark_steward.errors` answers for
the errors, all from :func:`declared`. spark-steward declares its own in setup.cfg exactly so::

    [options.entry_points]
    spark_steward.services =
        audit = audit_steward.capability:CAPABILITY

An entry point whose value is the service class itself (``audit = audit_steward:AuditService``)
declares a capability that brings only its service.

This module imports nothing of spark-steward: the low modules that assemble capabilities
(config, errors) may use it without reaching up.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Literal

log = logging.getLogger(__name__)

#: The entry point group capabilities are declared in.
ENTRY_POINT_GROUP = "spark_steward.services"
#: The capabilities spark-steward itself declares, in this order: nothing runs without them
#: (their absence means the package's metadata is stale or missing, not a choice).
BUILT_IN = ("local", "blobs", "checkpoints", "tables", "streams")
#: The distribution that declares them.
DISTRIBUTION = "spark-steward"


@dataclass(frozen=True)
class Capability:
    """One capability's parts, each named ``"module:attribute"`` (``config`` and ``errors``:
    a module) and imported when first needed, so reading a declaration stays cheap.

    >>> CAPABILITY = Capability(                        # doctest: +SKIP
    ...     "audit", service="audit_steward.service:AuditService",
    ...     cli="audit_steward.cli:register", gc="audit_steward.cli:COLLECTOR",
    ...     config="audit_steward.config_keys", errors="audit_steward.errors")
    """

    #: The name it is registered under; the entry point's name.
    name: str
    #: What builds its driver service: a RuntimeService class or factory, or its name.
    service: str | Callable[[], Any]
    #: A function called with the ``spark-steward`` subparsers to add its command group.
    cli: str | None = None
    #: Its :class:`spark_steward.commands.Collector` for ``spark-steward gc``.
    gc: str | None = None
    #: The module whose ConfigKey constants are its ``spark.steward.*`` keys.
    config: str | None = None
    #: The module whose StewardError subclasses are its errors.
    errors: str | None = None

    def service_factory(self) -> Callable[[], Any]:
        """What builds its service, imported now."""
        factory = load(self.service) if isinstance(self.service, str) else self.service
        if not callable(factory):
            raise TypeError(f"{self.service!r} is not a RuntimeService class or factory")
        return factory  # type: ignore[no-any-return]


def load(name: str) -> Any:
    """The object ``"module:attribute"`` (``"module"``: the module) names, imported now."""
    module, _, attribute = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        found = getattr(found, part)
    return found


@dataclass(frozen=True)
class Declared:
    """The capabilities the installed packages declare: built-ins in :data:`BUILT_IN` order,
    then others by name; and the entry points that could not be read."""

    capabilities: tuple[Capability, ...]
    #: ``(name, why)`` of each entry point that could not be loaded.
    broken: tuple[tuple[str, str], ...] = ()

    def built_in_problem(self) -> str | None:
        """Why spark-steward's own capabilities are not all there, naming the fix; None when
        they are."""
        broken = dict(self.broken)
        for name in BUILT_IN:
            if name in broken:
                return f"{broken[name]}; reinstall spark-steward"
        missing = [name for name in BUILT_IN if all(c.name != name for c in self.capabilities)]
        if not missing:
            return None
        return (f"spark-steward's built-in capabilities {', '.join(missing)} are not registered "
                f"(entry point group {ENTRY_POINT_GROUP} of the {DISTRIBUTION} distribution): "
                "the package's metadata is missing or stale, as with a source tree on PYTHONPATH "
                "or an install from before an upgrade; install it with pip (pip install "
                "spark-steward, or pip install -e . in a checkout)")


_declared: Declared | None = None


def declared() -> Declared:
    """Every capability the entry points declare, read once per process (cheap: a declaration
    imports only its own small module)."""
    global _declared
    if _declared is None:
        _declared = _read_entry_points()
    return _declared


def _read_entry_points() -> Declared:
    from importlib import metadata  # ~20 ms to import: only when a declaration is first asked

    found: dict[str, Capability] = {}
    broken: list[tuple[str, str]] = []
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name in found:
            continue  # the first of two with one name wins
        try:
            value = point.load()
            if isinstance(value, Capability):
                if value.name != point.name:
                    raise ValueError(f"it declares the capability {value.name!r}")
                found[point.name] = value
            elif callable(value):
                found[point.name] = Capability(point.name, service=value)
            else:
                raise TypeError("not a Capability nor a RuntimeService class or factory")
        except Exception as exc:
            broken.append((point.name, f"spark-steward capability {point.name!r} ({point.value}, "
                                       f"entry point group {ENTRY_POINT_GROUP}) cannot be loaded: "
                                       f"{type(exc).__name__}: {exc}"))
    order = {name: i for i, name in enumerate(BUILT_IN)}
    ranked = sorted(found.values(), key=lambda c: (order.get(c.name, len(order)), c.name))
    return Declared(tuple(ranked), tuple(broken))


def loaded(part: Literal["cli", "gc", "config", "errors"]) -> list[tuple[Capability, Any]]:
    """Each declared capability that has ``part``, with that part imported. A built-in's that
    cannot be imported raises (a broken install); a third party's is left out with a warning
    (a broken extension must not stop every command)."""
    found = []
    for capability in declared().capabilities:
        name = getattr(capability, part)
        if name is None:
            continue
        try:
            found.append((capability, load(name)))
        except Exception as exc:
            if capability.name in BUILT_IN:
                raise
            log.warning("spark-steward capability %r: its %s %s cannot be loaded, left out: "
                        "%s: %s", capability.name, part, name, type(exc).__name__, exc)
    return found
