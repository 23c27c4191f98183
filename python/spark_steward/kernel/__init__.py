"""The runtime kernel: what every capability stands on, knowing none of them.

``runtime`` (attach/detach, the driver runtime, ``RuntimeService``), ``services`` (the registry
that finds capabilities by name at attach), ``session`` (which SparkSession is in use and
whether spark-steward is on for it), ``events``/``pump``/``dispatch`` (Spark events from the
shim to subscribers), ``heartbeat`` (the application record), ``executor``/``bootstrap`` (the
executor runtime, started inside tasks), ``autoload`` (attach with conf flags alone),
``carrier``/``executor_package`` (the executor side's entry, and whether the executors' Python
has spark-steward), ``patches`` (every pyspark attribute replaced, in one order), ``compat``
(every difference between pyspark lines), ``logs``/``metrics`` (log records and numbers where
Spark's go), ``jvm`` (the one door to the JVM) and ``shim``/``shim_build`` (the shim jar).
"""
