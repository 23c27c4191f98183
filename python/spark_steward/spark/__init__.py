"""Spark glue: shim loading, the driver runtime, events, executor bootstrap, activation."""
