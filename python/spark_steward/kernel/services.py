"""The contract between the driver runtime and the capabilities built on it.

A capability (blobs, checkpoints, cached tables, local state) is a :class:`RuntimeService`:
started at attach after the runtime is ready, stopped at detach in reverse order. It subscribes
to events through ``runtime.dispatcher`` in ``start``. Factories are registered once at import
time with :func:`register_service`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from spark_steward.kernel.runtime import DriverRuntime


class RuntimeService:
    """Base of every capability attached to the driver runtime; hooks default to no-ops."""

    name: str = "service"

    def start(self, runtime: "DriverRuntime") -> None:
        """Called once at attach, with events not yet flowing."""
        return None

    def before_context_stop(self, runtime: "DriverRuntime") -> None:
        """Called at ``spark.stop()`` while the SparkContext still runs."""
        return None

    def stop(self, runtime: "DriverRuntime") -> None:
        """Called once at detach, after the last event was delivered."""
        return None


ServiceFactory = Callable[[], RuntimeService]
_FACTORIES: list[tuple[str, ServiceFactory]] = []


def register_service(name: str, factory: ServiceFactory) -> None:
    """Adds a capability to every runtime attached from now on (idempotent per name)."""
    if all(existing != name for existing, _ in _FACTORIES):
        _FACTORIES.append((name, factory))


def service_factories() -> list[tuple[str, ServiceFactory]]:
    return list(_FACTORIES)
