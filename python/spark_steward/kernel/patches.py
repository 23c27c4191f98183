"""Every pyspark attribute spark-steward replaces, owned in one place and installed in one order.

Capabilities never assign pyspark attributes themselves: they :func:`intercept` a named
:class:`PatchPoint` with a handler, and :func:`install` replaces each point that has handlers,
once per process, in the order of :data:`POINTS`. A handler is called as
``handler(proceed, *args, **kwargs)`` with the arguments of the original call; ``proceed``
calls the next handler, the last one the original. Handlers of one point run in ascending
``order``, then in registration order, so which one is outermost never depends on who was
installed first. The installed wrapper keeps the original as ``__wrapped__`` (benchmarks and
tests call Spark's own through it).
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from spark_steward.errors import SetupError
from spark_steward.kernel.compat import (CONTEXT_MODULES, DATAFRAME_MODULES, FILES_MODULES,
                                         PREPARE_COMMAND_COPIES, RDD_MODULES)

log = logging.getLogger(__name__)

Handler = Callable[..., Any]


@dataclass(frozen=True)
class PatchPoint:
    """A pyspark attribute: ``owner.attr`` of the first importable module (a class attribute),
    or the module's own ``attr`` when ``owner`` is None. ``copies`` name modules that took the
    module function by name at their import (``from m import attr``) on some pyspark line: one
    already imported and holding the original gets the replacement too."""

    name: str
    modules: tuple[str, ...]
    owner: str | None
    attr: str
    is_classmethod: bool = False
    copies: tuple[str, ...] = ()


_CONTEXT = CONTEXT_MODULES
_RDD = RDD_MODULES
_DATAFRAME = DATAFRAME_MODULES

#: Every point, in installation order: the kernel's own first (attach at a context's start,
#: detach at its stop, the executor context on every command), then files, checkpoints and
#: tables.
POINTS: tuple[PatchPoint, ...] = (
    PatchPoint("SparkContext._do_init", _CONTEXT, "SparkContext", "_do_init"),
    PatchPoint("SparkContext._initialize_context", _CONTEXT, "SparkContext",
               "_initialize_context"),
    PatchPoint("SparkContext.stop", _CONTEXT, "SparkContext", "stop"),
    PatchPoint("rdd._prepare_for_python_RDD", _RDD, None, "_prepare_for_python_RDD",
               copies=PREPARE_COMMAND_COPIES),
    PatchPoint("SparkContext.addFile", _CONTEXT, "SparkContext", "addFile"),
    PatchPoint("SparkContext.addArchive", _CONTEXT, "SparkContext", "addArchive"),
    PatchPoint("SparkContext.addPyFile", _CONTEXT, "SparkContext", "addPyFile"),
    PatchPoint("SparkFiles.get", FILES_MODULES, "SparkFiles", "get",
               is_classmethod=True),
    PatchPoint("SparkContext.setCheckpointDir", _CONTEXT, "SparkContext", "setCheckpointDir"),
    PatchPoint("RDD.checkpoint", _RDD, "RDD", "checkpoint"),
    PatchPoint("DataFrame.checkpoint", _DATAFRAME, "DataFrame", "checkpoint"),
    PatchPoint("DataFrame.cache", _DATAFRAME, "DataFrame", "cache"),
    PatchPoint("DataFrame.persist", _DATAFRAME, "DataFrame", "persist"),
    PatchPoint("DataFrame.unpersist", _DATAFRAME, "DataFrame", "unpersist"),
    PatchPoint("DataFrame.explain", _DATAFRAME, "DataFrame", "explain"),
)
_BY_NAME = {point.name: point for point in POINTS}


@dataclass(frozen=True)
class _Registered:
    owner: str
    order: int
    seq: int
    handler: Handler


_lock = threading.RLock()
_handlers: dict[str, tuple[_Registered, ...]] = {}
_installed: dict[str, Any] = {}  # point name -> the original it replaced
_seq = 0


def intercept(point: str, owner: str, handler: Handler, *, order: int = 50) -> None:
    """Registers ``owner``'s ``handler`` on ``point`` (replacing ``owner``'s earlier one
    there). Takes effect at :func:`install`; a point already installed sees it at once."""
    global _seq
    if point not in _BY_NAME:
        raise SetupError(f"no pyspark patch point named {point!r}; known: "
                         f"{', '.join(_BY_NAME)}")
    with _lock:
        _seq += 1
        kept = [r for r in _handlers.get(point, ()) if r.owner != owner]
        kept.append(_Registered(owner, order, _seq, handler))
        _handlers[point] = tuple(sorted(kept, key=lambda r: (r.order, r.seq)))


def install(points: Iterable[str] | None = None) -> None:
    """Replaces every point (or those named) that has handlers and is not replaced yet, in the
    order of :data:`POINTS`. Idempotent; safe on the driver and in executor processes."""
    wanted = None if points is None else set(points)
    with _lock:
        for point in POINTS:
            if point.name in _installed or not _handlers.get(point.name):
                continue
            if wanted is not None and point.name not in wanted:
                continue
            _replace(point)


def _target(point: PatchPoint) -> Any:
    last: Exception | None = None
    for name in point.modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            last = exc
            continue
        return module if point.owner is None else getattr(module, point.owner)
    raise SetupError(f"pyspark has none of {', '.join(point.modules)} for {point.name}: {last}")


def _current(point: PatchPoint) -> Any:
    value = getattr(_target(point), point.attr)
    return value.__func__ if point.is_classmethod else value


def _replace(point: PatchPoint) -> None:
    target = _target(point)
    before = _current(point)
    name = point.name

    def call(index: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        chain = _handlers.get(name, ())
        if index >= len(chain):
            return before(*args, **kwargs)

        def proceed(*a: Any, **k: Any) -> Any:
            return call(index + 1, a, k)

        return chain[index].handler(proceed, *args, **kwargs)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return call(0, args, kwargs)

    functools.update_wrapper(wrapper, before)
    wrapper.__steward__ = True  # type: ignore[attr-defined]
    setattr(target, point.attr, classmethod(wrapper) if point.is_classmethod else wrapper)
    for copy in point.copies:
        # Not imported yet: its own ``from ... import`` will take the replacement.
        holder = sys.modules.get(copy)
        if holder is not None and getattr(holder, point.attr, None) is before:
            setattr(holder, point.attr, wrapper)
    _installed[name] = before
    log.debug("spark-steward replaced %s", name)
