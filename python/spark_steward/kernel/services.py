"""The registry of capabilities: what the driver runtime builds a service of at attach.

A capability (blobs, checkpoints, cached tables, local state, streams, a third party's) brings a
``RuntimeService`` (:mod:`spark_steward.kernel.runtime`). The kernel imports no capability: it
finds them by name at attach, from their declarations (:mod:`spark_steward.capabilities`: the
entry points of the group ``spark_steward.services``, the built-in ones declared in setup.cfg
exactly as a third party declares its own) and from :func:`register_service` calls made in this
process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from spark_steward import capabilities
from spark_steward.capabilities import BUILT_IN
from spark_steward.errors import SetupError

log = logging.getLogger(__name__)

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

    Installed packages can instead declare their capability with an entry point in the group
    ``spark_steward.services`` (:mod:`spark_steward.capabilities`), which needs no import
    before attach.
    """
    if all(spec.name != name for spec in _REGISTERED):
        _REGISTERED.append(ServiceSpec(name, factory, "register_service"))


_entry_points: list[ServiceSpec] | None = None


def _entry_point_specs() -> list[ServiceSpec]:
    """The declared capabilities' services, loaded once per process. A built-in one that cannot
    be loaded fails attach; a third party's is skipped with a warning (a broken extension must
    not stop every Spark application of the environment)."""
    global _entry_points
    if _entry_points is not None:
        return _entry_points
    found = capabilities.declared()
    problem = found.built_in_problem()
    if problem:
        raise SetupError(problem)
    for _, why in found.broken:
        log.warning("%s; attaching without it", why)
    specs = []
    for capability in found.capabilities:
        source = capability.service if isinstance(capability.service, str) else capability.name
        try:
            factory = capability.service_factory()
        except Exception as exc:
            problem = (f"spark-steward capability {capability.name!r} ({source}) cannot be "
                       f"loaded: {type(exc).__name__}: {exc}")
            if capability.name in BUILT_IN:
                raise SetupError(f"{problem}; reinstall spark-steward") from exc
            log.warning("%s; attaching without it", problem)
            continue
        specs.append(ServiceSpec(capability.name, factory, source))
    _entry_points = specs
    return specs


def discover() -> list[ServiceSpec]:
    """Every registered capability: entry points first, then :func:`register_service` ones;
    the first of two with one name wins."""
    found: dict[str, ServiceSpec] = {}
    for spec in _entry_point_specs() + list(_REGISTERED):
        found.setdefault(spec.name, spec)
    return list(found.values())
