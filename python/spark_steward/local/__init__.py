"""Host-local files: the working directory with its durable manifest (FLIP-201), and named
key-value stores for tasks.

``spark_steward.local.state(name)`` inside a task returns the application's store ``name`` on
that host (:class:`~spark_steward.local.stores.LocalState`).

``lifecycle`` (the pure file records and recovery decisions), ``fs``/``working_dir`` (the
durable manifest and its IO), ``space`` (a full disk reported as ``LocalDiskFull``), ``stores``
(``LocalState``), ``executor`` (one working dir per process, inside tasks), ``service`` (the
driver service: dead applications' folders swept at attach, this one's removed at stop) and
``gc`` (``spark-steward gc --local-dir``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_steward.local.stores import LocalState


def state(name: str) -> "LocalState":
    """The application's host-local store ``name``, from inside a task.

    Raises :class:`~spark_steward.errors.NotInTask` outside a task of a session with
    spark-steward on.
    """
    from spark_steward.local.executor import local_state

    return local_state(name)


__all__ = ["state"]
