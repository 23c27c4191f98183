"""The registry of capabilities: what the driver runtime builds a service of at attach.

A capability (blobs, checkpoints, cached tables, local state, a third party's) is a
``RuntimeService`` (:mod:`spark_steward.kernel.runtime`). The kernel imports no capability: it
finds them by name at attach, from the entry points of the group ``spark_steward.services``
(the built-in ones are declared in setup.cfg exactly as a third party declares its own) and
from :func:`register_service` calls made in this process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

from spark_steward.errors import SetupError

log = logging.getLogger(__name__)

#: The entry point group capabilities are declared in: ``name = module:ServiceClass``.
ENTRY_POINT_GROUP = "spark_steward.services"

#: Builds one capability's service (a RuntimeService of kernel.runtime) for a new runtime.
ServiceFactory = Callable[[], Any]


@dataclass(frozen=True)
class ServiceSpec:
    """One registered capability: its name and what builds its service for a runtime."""

    name: str
    factory: ServiceFactory
    source: str  # "entry point module:attr" or "register_service", for errors


_REGISTERED: list[ServiceSpec] = []


def register_service(name: str, factory: ServiceFactory) -> None:
    """Adds a capability to every runtime attached from now on (idempotent per name).

    >>> register_service("audit", AuditService)          # doctest: +SKIP

    Installed packages can instead declare an entry point in the group
    ``spark_steward.services``, which needs no import before attach.
    """
    if all(spec.name != name for spec in _REGISTERED):
        _REGISTERED.append(ServiceSpec(name, factory, "register_service"))


#: The capabilities spark-steward itself declares: attach refuses to run without them (their
#: absence means the package metadata is stale or missing, not a choice).
BUILT_IN = ("local", "blobs", "checkpoints", "tables", "streams")
#: The distribution that declares them.
DISTRIBUTION = "spark-steward"

_entry_points: list[ServiceSpec] | None = None


def _entry_point_specs() -> list[ServiceSpec]:
    """The entry points of the group, loaded once per process. A built-in one that cannot be
    loaded fails attach; a third party's is skipped with a warning (a broken extension must not
    stop every Spark application of the environment)."""
    global _entry_points
    if _entry_points is not None:
        return _entry_points
    specs = []
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            factory = point.load()
            if not callable(factory):
                raise TypeError("not a RuntimeService class or factory")
        except Exception as exc:
            problem = (f"spark-steward capability {point.name!r} ({point.value}, entry point "
                       f"group {ENTRY_POINT_GROUP}) cannot be loaded: {type(exc).__name__}: "
                       f"{exc}")
            if point.name in BUILT_IN:
                raise SetupError(f"{problem}; reinstall spark-steward") from exc
            log.warning("%s; attaching without it", problem)
            continue
        specs.append(ServiceSpec(point.name, factory, point.value))
    missing = [name for name in BUILT_IN if all(spec.name != name for spec in specs)]
    if missing:
        raise SetupError(
            f"spark-steward's built-in capabilities {', '.join(missing)} are not registered "
            f"(entry point group {ENTRY_POINT_GROUP} of the {DISTRIBUTION} distribution): the "
            "package's metadata is missing or stale, as with a source tree on PYTHONPATH or an "
            "install from before an upgrade; install it with pip (pip install spark-steward, or "
            "pip install -e . in a checkout)")
    _entry_points = specs
    return specs


def discover() -> list[ServiceSpec]:
    """Every registered capability: entry points first, then :func:`register_service` ones;
    the first of two with one name wins."""
    found: dict[str, ServiceSpec] = {}
    for spec in _entry_point_specs() + list(_REGISTERED):
        found.setdefault(spec.name, spec)
    return list(found.values())
