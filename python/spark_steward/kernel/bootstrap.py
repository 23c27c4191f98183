"""Gets the executor context into every task, for jobs that never import spark-steward.

pyspark pickles every Python command bound for executors (RDD functions, UDFs, UDTFs, Python data
sources, foreachBatch) in one function, ``pyspark.core.rdd._prepare_for_python_RDD``, which also
collects the broadcasts the command references. We wrap the command in a carrier whose
``__reduce__`` makes the worker, while unpickling, install the context from our broadcast and get
back the original command object unchanged: signatures and eval types are untouched. Commands
of plain RDD functions (whose shape ``func(split, iterator)`` is fixed) also run inside a
:func:`~spark_steward.kernel.executor.task_scope`, the try/finally that releases per-task state.

:func:`bootstrap` is the explicit twin: a mapPartitions wrapper that starts the executor runtime.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from spark_steward.kernel import executor

if TYPE_CHECKING:
    from pyspark import Broadcast, RDD, SparkContext

log = logging.getLogger(__name__)


def _install_and_return(context_broadcast: "Broadcast[executor.ExecutorContext]",
                        command: Any) -> Any:
    """Runs on the executor while the command is unpickled."""
    executor.install_context(context_broadcast.value)
    return command


class _CommandCarrier:
    __slots__ = ("broadcast", "command")

    def __init__(self, broadcast: "Broadcast[executor.ExecutorContext]", command: Any) -> None:
        self.broadcast = broadcast
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (_install_and_return, (self.broadcast, self.command))


class _TaskScoped:
    """``func(split, iterator)`` of an RDD command, run inside a task scope."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[int, Iterable[Any]], Iterable[Any]]) -> None:
        self.func = func

    def __call__(self, split: int, iterator: Iterable[Any]) -> Iterator[Any]:
        with executor.task_scope():
            yield from self.func(split, iterator)


def _is_rdd_command(command: Any) -> bool:
    from pyspark.serializers import Serializer

    return (isinstance(command, tuple) and len(command) == 4 and callable(command[0])
            and isinstance(command[2], Serializer) and isinstance(command[3], Serializer))


def command_handler(
        broadcast_for: Callable[["SparkContext"], "Broadcast[executor.ExecutorContext] | None"]
) -> Callable[..., Any]:
    """The interception of ``_prepare_for_python_RDD`` that routes every pickled Python command
    through the carrier, when ``broadcast_for`` gives a context broadcast for the context."""

    def prepare_with_context(proceed: Callable[..., Any], sc: "SparkContext", command: Any
                             ) -> Any:
        broadcast = broadcast_for(sc)
        if broadcast is not None:
            if _is_rdd_command(command):
                func, profiler, deserializer, serializer = command
                command = (_TaskScoped(func), profiler, deserializer, serializer)
            command = _CommandCarrier(broadcast, command)
        return proceed(sc, command)

    return prepare_with_context


def bootstrap(rdd: "RDD[Any]", context_broadcast: "Broadcast[executor.ExecutorContext]"
              ) -> "RDD[Any]":
    """``rdd`` with the executor runtime started in every task that computes it."""

    def start_runtime(iterator: Iterable[Any]) -> Iterator[Any]:
        executor.install_context(context_broadcast.value)
        executor.executor_runtime()
        yield from iterator

    return rdd.mapPartitions(start_runtime, preservesPartitioning=True)
