"""Spark's own reliable checkpoints, seen from Python: JVM probes and call hooks, no storage.

What Spark does (pyspark 4.x classic, verified by tests/spark/test_spark_checkpoint_hooks.py):

* ``sc.setCheckpointDir(d)`` creates ``<d>/<random uuid>`` at once and makes that the context's
  checkpoint dir (:func:`checkpoint_dir`). Spark never deletes this folder.
* ``rdd.checkpoint()`` fixes the RDD's checkpoint folder to ``<checkpoint dir>/rdd-<id>``
  (:func:`rdd_checkpoint_path`) and writes nothing; the folder (``part-NNNNN`` files) is written
  by an extra job right after the first action that runs on the RDD.
* ``df.checkpoint(eager=True)`` runs the plan into a new internal RDD, checkpoints it and writes
  it before returning; ``eager=False`` writes it after the first action on the returned
  DataFrame. The returned DataFrame's logical plan is a ``LogicalRDD`` over that RDD
  (:func:`checkpointed_rdd_of_dataframe`).
* Spark's ContextCleaner deletes ``<checkpoint dir at cleaning time>/rdd-<id>`` once the RDD is
  garbage collected on the JVM, but only for checkpoints *written* while
  ``spark.cleaner.referenceTracking.cleanCheckpoints`` was true in the live conf
  (:func:`enable_clean_checkpoints`). The shim's CheckpointCleanWatch (:func:`install_clean_watch`)
  then sends a :class:`~spark_steward.kernel.events.CheckpointCleaned` event. Nothing is deleted
  at ``spark.stop()`` or after a crash.

Paths are returned as URLs: Hadoop's ``file:/x`` becomes ``file:///x``; other schemes are kept as
Hadoop prints them. Every JVM object created here is released before returning, so nothing here
keeps a checkpointed RDD alive on the JVM (a held reference would stop the cleaner forever).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol

from spark_steward.kernel import jvm, patches

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

CLEAN_CHECKPOINTS = "spark.cleaner.referenceTracking.cleanCheckpoints"
_LOGICAL_RDD = "LogicalRDD"


class CheckpointListener(Protocol):
    """What :func:`install_checkpoint_hooks` calls. Every method runs on the user's thread inside
    the user's call, so it should return quickly; what it raises is logged and swallowed.

    ``sc`` is the pyspark SparkContext; paths are URLs as described in the module docstring.
    """

    def before_checkpoint_dir(self, sc: "SparkContext", requested_dir: str | None) -> None:
        """``sc.setCheckpointDir(requested_dir)`` is about to run (it creates
        ``<requested_dir>/<uuid>``); ``requested_dir`` is the user's argument, unchanged."""

    def checkpoint_dir_set(self, sc: "SparkContext", actual_url: str | None) -> None:
        """``setCheckpointDir`` returned; ``actual_url`` is the new ``<requested>/<uuid>`` dir.
        Not called when it raised."""

    def before_rdd_checkpoint(self, sc: "SparkContext", rdd_id: int, path: str) -> None:
        """``rdd.checkpoint()`` is about to mark RDD ``rdd_id``; its data will be written to
        ``path`` after the next action on it. Also called for a repeated ``checkpoint()`` (a
        no-op in Spark); not called when no checkpoint dir is set (Spark then raises)."""

    def dataframe_checkpointed(self, sc: "SparkContext", rdd_id: int, path: str,
                               written: bool, session: Any) -> None:
        """``df.checkpoint(eager)`` returned a DataFrame over checkpointed RDD ``rdd_id`` whose
        data is at ``path``: already written when ``written`` (eager), else written after the
        first action on the returned DataFrame. ``session`` is the DataFrame's SparkSession
        (whose runtime conf says whether spark-steward is on for it)."""


# -- probes ----------------------------------------------------------------------------------


def to_url(hadoop_path: str) -> str:
    """A Hadoop path string as a URL: ``file:/x`` -> ``file:///x``; anything else unchanged."""
    if hadoop_path.startswith("file:/") and not hadoop_path.startswith("file://"):
        return "file://" + hadoop_path[len("file:"):]
    return hadoop_path


def checkpoint_dir(sc: "SparkContext") -> str | None:
    """The context's current checkpoint dir (``<requested>/<uuid>``) as a URL, or None."""
    return _url_or_none(jvm.option_value(jvm.context_handle(sc).getCheckpointDir()))


def _url_or_none(path: str | None) -> str | None:
    return None if path is None else to_url(path)


def rdd_checkpoint_path(sc: "SparkContext", rdd_id: int) -> str | None:
    """Where Spark puts (or put) RDD ``rdd_id``'s reliable checkpoint if it is checkpointed now:
    ``<checkpoint dir>/rdd-<id>``, as ReliableRDDCheckpointData names it; None without a dir."""
    directory = checkpoint_dir(sc)
    return None if directory is None else f"{directory.rstrip('/')}/rdd-{int(rdd_id)}"


def checkpointed_rdd_of_dataframe(df: "DataFrame") -> tuple[int, str | None]:
    """For a DataFrame returned by ``df.checkpoint(eager)``: the id of the checkpointed internal
    RDD and its checkpoint folder URL once written (None before). Raises ValueError for a
    DataFrame that is not a reliable checkpoint (e.g. a ``localCheckpoint`` or a query on top)."""
    plan = jvm.dataframe_handle(df).logicalPlan()
    rdd = None
    try:
        if str(plan.nodeName()) != _LOGICAL_RDD:
            raise ValueError(f"not a checkpointed DataFrame: its plan is {plan.nodeName()}")
        rdd = plan.rdd()
        rdd_id = int(rdd.id())
        data = rdd.checkpointData()
        try:
            marked = bool(data.isDefined())
        finally:
            jvm.release(data)
        if not marked or rdd.isLocallyCheckpointed():
            raise ValueError(f"RDD {rdd_id} under this DataFrame is not reliably checkpointed")
        return rdd_id, _url_or_none(jvm.option_value(rdd.getCheckpointFile()))
    finally:
        jvm.release(rdd, plan)


# -- the shim's CheckpointCleanWatch ---------------------------------------------------------


def install_clean_watch(sc: "SparkContext") -> bool:
    """Attaches the shim's CheckpointCleanWatch to ``sc``'s ContextCleaner (idempotent per
    context), so every checkpoint Spark cleans arrives as a ``CheckpointCleaned`` event through
    the runtime's dispatcher. False when the context has no cleaner
    (``spark.cleaner.referenceTracking=false``)."""
    return bool(jvm.call(sc, "installCleanWatch", jvm.context_handle(sc)))


def enable_clean_checkpoints(sc: "SparkContext") -> bool:
    """Sets ``spark.cleaner.referenceTracking.cleanCheckpoints=true`` on the live conf unless the
    user set it; returns whether checkpoints written from now on will be cleaned by Spark.
    Checkpoints written before this call stay unregistered with the cleaner."""
    return bool(jvm.call(sc, "enableCleanCheckpoints", jvm.context_handle(sc)))


# -- call hooks ------------------------------------------------------------------------------

_listener: CheckpointListener | None = None
_hooks_lock = threading.Lock()
_hooked = False


def _notify(method: str, *args: Any) -> None:
    listener = _listener
    if listener is None:
        return
    try:
        getattr(listener, method)(*args)
    except Exception:
        log.exception("spark-steward checkpoint listener %s failed in %s",
                      type(listener).__name__, method)


def install_checkpoint_hooks(listener: CheckpointListener | None) -> Callable[[], None]:
    """Wraps ``SparkContext.setCheckpointDir``, ``RDD.checkpoint`` and the classic
    ``DataFrame.checkpoint`` once per process, and makes ``listener`` the one they call (a later
    call replaces it; None silences them). The user's call behaves as without spark-steward:
    same return value, same exceptions; listener and probe errors are logged.

    Returns a function that, if ``listener`` is still the current one, puts back the listener
    that was current before this call (stack discipline: nested installs unwind cleanly)."""
    global _listener, _hooked
    with _hooks_lock:
        previous, _listener = _listener, listener
        if not _hooked:
            _patch()
            _hooked = True

    def remove() -> None:
        global _listener
        with _hooks_lock:
            if _listener is listener:
                _listener = previous

    return remove


def _set_checkpoint_dir(proceed: Callable[..., Any], sc: Any, *args: Any, **kwargs: Any
                        ) -> Any:
    if _listener is None:
        return proceed(sc, *args, **kwargs)
    requested = args[0] if args else kwargs.get("dirName")
    _notify("before_checkpoint_dir", sc, requested)
    result = proceed(sc, *args, **kwargs)
    try:
        actual = checkpoint_dir(sc)
    except Exception:
        log.exception("spark-steward could not read the checkpoint dir just set")
        return result
    _notify("checkpoint_dir_set", sc, actual)
    return result


def _rdd_checkpoint(proceed: Callable[..., Any], rdd: Any, *args: Any, **kwargs: Any) -> Any:
    if _listener is not None:
        try:
            rdd_id = int(rdd.id())
            path = rdd_checkpoint_path(rdd.ctx, rdd_id)
        except Exception:
            log.exception("spark-steward could not probe the RDD being checkpointed")
            path = None
        if path is not None:  # None: no dir set, and Spark raises below
            _notify("before_rdd_checkpoint", rdd.ctx, rdd_id, path)
    return proceed(rdd, *args, **kwargs)


def _dataframe_checkpoint(proceed: Callable[..., Any], df: Any, *args: Any, **kwargs: Any
                          ) -> Any:
    result = proceed(df, *args, **kwargs)
    if _listener is None:
        return result
    try:
        sc = result.sparkSession.sparkContext
        rdd_id, written_at = checkpointed_rdd_of_dataframe(result)
        path = written_at or rdd_checkpoint_path(sc, rdd_id)
    except Exception:
        log.exception("spark-steward could not probe the checkpointed DataFrame")
        return result
    if path is not None:
        _notify("dataframe_checkpointed", sc, rdd_id, path, written_at is not None,
                result.sparkSession)
    return result


_POINTS = ("SparkContext.setCheckpointDir", "RDD.checkpoint", "DataFrame.checkpoint")


def _patch() -> None:
    patches.intercept(_POINTS[0], "checkpoints", _set_checkpoint_dir)
    patches.intercept(_POINTS[1], "checkpoints", _rdd_checkpoint)
    patches.intercept(_POINTS[2], "checkpoints", _dataframe_checkpoint)
    patches.install(_POINTS)
