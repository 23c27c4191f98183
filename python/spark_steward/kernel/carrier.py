"""The function every Python command runs through on an executor while it is unpickled.

It is pickled BY VALUE (``cloudpickle.register_pickle_by_value``, see
:mod:`spark_steward.kernel.bootstrap`), so an executor whose Python lacks spark-steward can
still load it: plain PySpark code then runs unchanged, the driver hears of it through an
accumulator and warns once, and only a command that itself calls spark-steward fails, with one
line that names the fix instead of ``ModuleNotFoundError`` from deep inside pickle. Hence no
module-level import of spark-steward here, and nothing else in this module. The context
broadcast it reads holds builtins only (``ExecutorContext.to_broadcast``): with I/O encryption
the worker loads it before this function runs.
"""


def unwrap(context_broadcast, payload, rdd_command, missing):  # type: ignore[no-untyped-def]
    """The command pickled in ``payload``, with spark-steward's executor context installed
    (and, for an RDD command, its function run inside a task scope) when the package is here."""
    import pickle
    import socket
    import sys

    try:
        from spark_steward.kernel import executor
    except ImportError:
        if missing is not None:
            missing.add(1)
        try:
            return pickle.loads(payload)
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] != "spark_steward":
                raise
            raise RuntimeError(
                f"spark-steward is not installed in the Python of this executor "
                f"({sys.executable} on {socket.gethostname()}), and this task calls it: "
                "install spark-steward, the driver's version, in the executors' Python on "
                "every host (or ship it with the job's environment)") from None
    command = pickle.loads(payload)
    executor.install_context(executor.ExecutorContext.from_broadcast(context_broadcast.value))
    if rdd_command:
        func, profiler, deserializer, serializer = command
        command = (executor.TaskScoped(func), profiler, deserializer, serializer)
    return command
