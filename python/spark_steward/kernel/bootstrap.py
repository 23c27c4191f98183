"""Gets the executor context into every task, for jobs that never import spark-steward.

pyspark pickles every Python command bound for executors (RDD functions, UDFs, UDTFs, Python data
sources, foreachBatch) in one function, ``pyspark.core.rdd._prepare_for_python_RDD``, which also
collects the broadcasts the command references. We wrap the command in a carrier whose
``__reduce__`` makes the worker, while unpickling, install the context from our broadcast and get
back the original command object unchanged: signatures and eval types are untouched. Commands
of plain RDD functions (whose shape ``func(split, iterator)`` is fixed) also run inside a
:func:`~spark_steward.kernel.executor.task_scope`, the try/finally that releases per-task state.
The carrier's function travels by value (:mod:`~spark_steward.kernel.carrier`): an executor
without spark-steward still runs every command that does not call it.

:func:`bootstrap` is the explicit twin: a mapPartitions wrapper that starts the executor runtime.
"""

from __future__ import annotations

import logging
import pickle
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from spark_steward.kernel import carrier, executor

if TYPE_CHECKING:
    from pyspark import Accumulator, Broadcast, RDD, SparkContext

log = logging.getLogger(__name__)

#: pyspark's own protocol for commands (CloudPickleSerializer's).
_PROTOCOL = pickle.HIGHEST_PROTOCOL


def ship_carrier_by_value() -> None:
    """Makes cloudpickle ship :mod:`spark_steward.kernel.carrier` by value (idempotent), so
    executors without spark-steward can run what it wraps."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(carrier)


class _CommandCarrier:
    """Pickles as a call of :func:`~spark_steward.kernel.carrier.unwrap` (shipped by value)
    on the command pickled apart, so the executor loads the command only once it knows whether
    spark-steward is there."""

    __slots__ = ("broadcast", "command", "rdd_command", "missing")

    def __init__(self, broadcast: "Broadcast[dict[str, Any]]", command: Any,
                 missing: "Accumulator[int] | None") -> None:
        self.broadcast = broadcast
        self.command = command
        self.rdd_command = _is_rdd_command(command)
        self.missing = missing

    def __reduce__(self) -> tuple[Any, ...]:
        from pyspark import cloudpickle

        payload = cloudpickle.dumps(self.command, _PROTOCOL)
        return (carrier.unwrap, (self.broadcast, payload, self.rdd_command, self.missing))


def _is_rdd_command(command: Any) -> bool:
    from pyspark.serializers import Serializer

    return (isinstance(command, tuple) and len(command) == 4 and callable(command[0])
            and isinstance(command[2], Serializer) and isinstance(command[3], Serializer))


def command_handler(
        broadcast_for: Callable[["SparkContext"], "Broadcast[dict[str, Any]] | None"],
        missing_for: Callable[["SparkContext"], "Accumulator[int] | None"] = lambda sc: None,
) -> Callable[..., Any]:
    """The interception of ``_prepare_for_python_RDD`` that routes every pickled Python command
    through the carrier, when ``broadcast_for`` gives a context broadcast for the context;
    ``missing_for`` gives the accumulator executors without spark-steward count into."""

    def prepare_with_context(proceed: Callable[..., Any], sc: "SparkContext", command: Any
                             ) -> Any:
        broadcast = broadcast_for(sc)
        if broadcast is not None:
            command = _CommandCarrier(broadcast, command, missing_for(sc))
        return proceed(sc, command)

    return prepare_with_context


def bootstrap(rdd: "RDD[Any]", context_broadcast: "Broadcast[dict[str, Any]]"
              ) -> "RDD[Any]":
    """``rdd`` with the executor runtime started in every task that computes it."""

    def start_runtime(iterator: Iterable[Any]) -> Iterator[Any]:
        executor.install_context(
            executor.ExecutorContext.from_broadcast(context_broadcast.value))
        executor.executor_runtime()
        yield from iterator

    return rdd.mapPartitions(start_runtime, preservesPartitioning=True)
