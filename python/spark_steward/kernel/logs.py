"""spark-steward's Python log records where Spark's own go.

On the driver, :func:`forward_to_log4j` (at attach, undone by :func:`stop_forwarding` at
detach) adds a :class:`Log4jHandler` to the ``spark_steward`` logger: each record becomes a
``LogManager.getLogger(record.name).log(level, message)`` call in the driver JVM (through
:class:`~spark_steward.kernel.jvm.Log4jLoggers`), so Spark's log4j2 configuration decides its
format and where it goes, like any JVM logger's. The Python loggers take log4j's effective level
for their names at attach, so a record log4j would drop is never even formatted.

The handler never blocks on itself and never recurses: it holds no lock (py4j gives each Python
thread its own connection), a record logged while a record is being forwarded on the same
thread, and every record once the gateway has failed (at interpreter exit, say), go to stderr in
Spark's default layout instead.

On executors, :func:`log_to_stderr_in_worker` gives the Python worker a stderr handler with
Spark's default layout (``yy/MM/dd HH:mm:ss LEVEL name: message``, the executor's stderr log) at
the level the driver's log4j set.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark import SparkContext

    from spark_steward.kernel.jvm import Log4jLoggers

LOGGER = "spark_steward"

_TO_LOG4J = ((logging.CRITICAL, "FATAL"), (logging.ERROR, "ERROR"), (logging.WARNING, "WARN"),
             (logging.INFO, "INFO"), (logging.DEBUG, "DEBUG"), (logging.NOTSET, "TRACE"))
_FROM_LOG4J = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
               "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG,
               "TRACE": 5, "ALL": 1}


def log4j_level(level: int) -> str:
    """log4j's name for the Python level ``level`` (the nearest at or below it)."""
    return next(name for number, name in _TO_LOG4J if level >= number)


def python_level(name: str) -> int:
    """The Python level for log4j's level ``name``; WARN for a name log4j does not define."""
    return _FROM_LOG4J.get(name.strip().upper(), logging.WARNING)


class SparkFormatter(logging.Formatter):
    """Spark's default log4j2 layout, ``%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(log4j_level)s %(short_name)s: %(message)s",
                         datefmt="%y/%m/%d %H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        record.log4j_level = log4j_level(record.levelno)
        record.short_name = record.name.rsplit(".", 1)[-1]
        return super().format(record)


class _MessageFormatter(logging.Formatter):
    """The message and the traceback: log4j's layout adds the rest."""

    def __init__(self) -> None:
        super().__init__("%(message)s")


class Log4jHandler(logging.Handler):
    """Hands records to the driver JVM's log4j; stderr when that is not possible."""

    def __init__(self, loggers: "Log4jLoggers", fallback: TextIO | None = None) -> None:
        super().__init__()
        self.loggers = loggers
        self.setFormatter(_MessageFormatter())
        self._fallback_stream = fallback
        self._fallback_format = SparkFormatter()
        self._forwarding = threading.local()
        self.broken = False

    def createLock(self) -> None:
        # No handler lock: a thread waiting on the JVM must never hold up another thread's
        # record (py4j gives each thread its own connection, so calls never interleave).
        self.lock = None  # type: ignore[assignment]

    def emit(self, record: logging.LogRecord) -> None:
        if self.broken or getattr(self._forwarding, "busy", False):
            self._to_stderr(record)
            return
        self._forwarding.busy = True
        try:
            self.loggers.log(record.name, log4j_level(record.levelno), self.format(record))
        except Exception:  # the gateway is gone (interpreter exit): stderr from now on
            self.broken = True
            self._to_stderr(record)
        finally:
            self._forwarding.busy = False

    def _to_stderr(self, record: logging.LogRecord) -> None:
        stream = self._fallback_stream or sys.stderr
        try:
            stream.write(self._fallback_format.format(record) + "\n")
            stream.flush()
        except Exception:  # stderr closed too: nowhere left to say it
            pass


_lock = threading.Lock()
_handler: Log4jHandler | None = None
_saved_levels: dict[str, int] = {}


def forward_to_log4j(sc: "SparkContext") -> Log4jHandler | None:
    """Sends the ``spark_steward`` logger tree's records to the driver's log4j and sets each
    configured logger's Python level from log4j's (restored by :func:`stop_forwarding`).
    Idempotent; None when the JVM cannot be reached (nothing changes then)."""
    global _handler
    from spark_steward.kernel.jvm import Log4jLoggers

    with _lock:
        if _handler is not None:
            return _handler
        try:
            loggers = Log4jLoggers(sc)
            levels = {name: python_level(loggers.level(name))
                      for name in {LOGGER, *loggers.configured(LOGGER)}}
        except Exception as exc:  # no JVM, or no log4j 2: Python's own logging stays as is
            logging.getLogger(__name__).warning(
                "spark-steward logs stay in Python's logging: the driver's log4j cannot be "
                "reached (%s)", exc)
            return None
        for name, level in levels.items():
            logger = logging.getLogger(name)
            _saved_levels[name] = logger.level
            logger.setLevel(level)
        _handler = Log4jHandler(loggers)
        logging.getLogger(LOGGER).addHandler(_handler)
        return _handler


def stop_forwarding() -> None:
    """Removes the handler :func:`forward_to_log4j` added and restores the Python levels."""
    global _handler
    with _lock:
        handler, _handler = _handler, None
        if handler is None:
            return
        logging.getLogger(LOGGER).removeHandler(handler)
        for name, level in _saved_levels.items():
            logging.getLogger(name).setLevel(level)
        _saved_levels.clear()
    try:
        handler.loggers.close()
    except Exception:  # the gateway is gone: so are its references
        pass


def forwarded_level() -> str:
    """log4j's name of the ``spark_steward`` logger's effective Python level (what executors
    log at)."""
    return log4j_level(logging.getLogger(LOGGER).getEffectiveLevel())


_worker_pid: int | None = None


def log_to_stderr_in_worker(level: str) -> None:
    """Gives this Python worker process one stderr handler in Spark's default layout on the
    ``spark_steward`` logger, at log4j level ``level`` (the driver's; WARN when empty). Only
    inside a Spark task; once per process (a forked worker gets its own)."""
    global _worker_pid
    from pyspark import TaskContext

    if _worker_pid == os.getpid() or TaskContext.get() is None:
        return
    _worker_pid = os.getpid()
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):  # inherited from the process this one forked from
        if getattr(handler, "spark_steward_worker", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SparkFormatter())
    handler.spark_steward_worker = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(python_level(level) if level else logging.WARNING)
