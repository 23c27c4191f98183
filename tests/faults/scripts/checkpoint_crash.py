"""A driver that SIGKILLs itself at one chosen point of the checkpoint lifecycle, or one that
attaches again to finish what a killed one left.

usage: checkpoint_crash.py OUT_FILE SPARKCP_DIR crash POINT K
       checkpoint_crash.py OUT_FILE SPARKCP_DIR attach

Run with spark-submit and the steward conf. ``crash`` owns Spark's own checkpoints
(``sc.setCheckpointDir`` + ``df.checkpoint()`` + ``rdd.checkpoint()``), saves four DataFrames in
series ``s`` (retained=2, so checkpoints 1 and 2 are subsumed) and stops; it sends itself
SIGKILL at the K-th time it passes POINT. Points are probes, logged as they are passed:

``before:<step>`` / ``after:<step>``  around a store step, where <step> is
    ``entry:<who>:<state>`` (an entry write), ``artifact:<who>``, ``rm-data:<who>``,
    ``rm-artifact:<who>``, ``rm-entry:<who>`` or ``write-data:<who>`` (the executors' job);
    <who> is ``s/<n>`` for checkpoint n of series s, ``ctx`` for the ``setCheckpointDir``
    folder and ``rdd`` for a checkpointed RDD's folder
``rename:entry:...`` / ``rename:artifact:...``  inside an atomic write: temp file written and
    synced, not yet renamed into place
``unlink:s/<n>`` / ``unlink:spark``  before each file removal inside a data delete (of
    checkpoint n, or of one of Spark's own folders)
``job:s/<n>`` / ``job:sparkcp``  inside a write job: a watcher saw its first part file

OUT_FILE gets one JSON object a line: ``attached`` (app id, pid), ``begun`` (checkpoint number
and the iteration whose rows it holds), every ``probe``, ``killing``, ``done``. ``attach`` waits
for the failover cleanup (``recovered``), then restores every completed checkpoint of ``s``
through ``spark_steward.checkpoints("s")`` (``listed``, ``restored`` with count, sum(id),
min(tag), max(tag), sum(v)).

Rows of iteration i: ``id`` in [0, 500*i), ``tag`` = i, ``v`` = id * i.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable
from spark_steward.checkpoint.service import CheckpointService

SAVES = 4
RETAINED = 2
PARTITIONS = 6

_out_lock = threading.Lock()
_out: Any = None


def log(**fields: Any) -> None:
    with _out_lock:
        _out.write(json.dumps(dict(fields, t=round(time.time(), 3))) + "\n")
        _out.flush()


def rows_of(spark: Any, i: int) -> Any:
    from pyspark.sql import functions as F

    return (spark.range(0, 500 * i, numPartitions=PARTITIONS)
            .withColumn("tag", F.lit(i)).withColumn("v", F.col("id") * i))


# -- the trap ---------------------------------------------------------------------------------

class Trap:
    def __init__(self, point: str, k: int) -> None:
        self.point = point
        self.k = k
        self.seen = 0
        self.lock = threading.Lock()

    def probe(self, label: str, detail: str = "") -> None:
        log(event="probe", label=label, thread=threading.current_thread().name)
        if label != self.point:
            return
        with self.lock:
            self.seen += 1
            hit = self.seen == self.k
        if hit:
            kill(label, self.k, detail)


def kill(point: str, k: int, detail: str) -> None:
    log(event="killing", point=point, k=k, detail=detail)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)  # SIGKILL is not deferred; never reached


_local = threading.local()
_labels: dict[tuple[str, int], str] = {}


def who(entry: Any) -> str:
    from spark_steward.checkpoint.lifecycle import CheckpointKind

    if entry.kind is CheckpointKind.SERIES:
        return f"{entry.series}/{entry.number}"
    return "ctx" if entry.kind is CheckpointKind.SPARK_CONTEXT_DIR else "rdd"


def label_of(series: str, number: int) -> str:
    return _labels.get((series, number), f"{series}/{number}")


def instrument(trap: Trap) -> None:
    """Wraps the store's steps in the driver process; nothing else changes."""
    from spark_steward.checkpoint import metadata, store
    from spark_steward.checkpoint import data as checkpoint_data

    def around(owner: Any, name: str, step: Callable[..., str]) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            label = step(*args, **kwargs)
            previous = getattr(_local, "step", None)
            _local.step = label
            trap.probe("before:" + label)
            try:
                result = original(*args, **kwargs)
            finally:
                _local.step = previous
            trap.probe("after:" + label)
            return result

        setattr(owner, name, wrapper)

    def entry_step(self: Any, entry: Any) -> str:
        _labels[entry.key] = who(entry)
        return f"entry:{who(entry)}:{entry.state.value}"

    around(metadata.CheckpointMetadata, "write_entry", entry_step)
    around(metadata.CheckpointMetadata, "write_artifact",
           lambda self, series, number, body: f"artifact:{label_of(series, number)}")
    around(metadata.CheckpointMetadata, "remove_artifact",
           lambda self, series, number: f"rm-artifact:{label_of(series, number)}")
    around(metadata.CheckpointMetadata, "remove_entry",
           lambda self, series, number: f"rm-entry:{label_of(series, number)}")
    around(store.CheckpointStore, "_delete_data", lambda self, entry: f"rm-data:{who(entry)}")
    around(checkpoint_data, "write_dataframe",
           lambda df, url, *codec: f"write-data:s/{int(url.rstrip('/').rsplit('/', 1)[1])}")

    # Inside Storage._write_local: temp file synced, rename next.
    real_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        step = getattr(_local, "step", None)
        if step and (step.startswith("entry:") or step.startswith("artifact:")):
            trap.probe("rename:" + step, detail=str(src))
        return real_replace(src, dst, *args, **kwargs)

    os.replace = replace  # type: ignore[assignment]

    # Inside a recursive data delete (shutil.rmtree under fsspec's rm): before each file.
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        step = getattr(_local, "step", None)
        if step and step.startswith("rm-data:"):
            # Spark's own folders nest (<uuid>/rdd-<id>) and are deleted concurrently at stop:
            # one label for them, so the K-th file is always reached.
            owner = step[len("rm-data:"):]
            trap.probe("unlink:" + (owner if owner.startswith("s/") else "spark"),
                       detail=str(path))
        return real_unlink(path, *args, **kwargs)

    os.unlink = unlink  # type: ignore[assignment]


def watch_for_part_files(folder: Path, point: str, done: threading.Event) -> None:
    """Kills the driver as soon as a part file (also a temporary) appears below ``folder``."""

    def run() -> None:
        while not done.is_set():
            found = [p for p in folder.rglob("*") if p.is_file() and "part-" in p.name] \
                if folder.exists() else []
            if found:
                kill(point, 1, f"{len(found)} part file(s): {sorted(p.name for p in found)[:4]}")
            time.sleep(0.002)

    threading.Thread(target=run, name="crash-watcher", daemon=True).start()


# -- the workloads ----------------------------------------------------------------------------

def crash(spark: Any, sparkcp: Path, point: str, k: int) -> None:
    import spark_steward
    from spark_steward.checkpoint.metadata import data_path

    trap = Trap(point, k)
    instrument(trap)
    runtime = spark_steward.runtime(spark)
    sc = spark.sparkContext
    stop_watching = threading.Event()
    if point == "job:sparkcp":
        watch_for_part_files(sparkcp, point, stop_watching)
    elif point.startswith("job:s/"):
        number = int(point.rsplit("/", 1)[1])
        watch_for_part_files(Path(runtime.storage.path(data_path("s", number))), point,
                             stop_watching)

    sc.setCheckpointDir(str(sparkcp))
    checkpointed = spark.range(0, 3000, numPartitions=PARTITIONS).checkpoint()  # eager
    # A Python RDD over JVM rows, and a JVM action on it: Spark writes the checkpoint after
    # the job, with no Python worker to start (keeps each crash run short).
    rdd = spark.range(0, 300, numPartitions=3).rdd
    rdd.checkpoint()
    rdd._jrdd.count()  # counts pickled batches, not rows
    assert checkpointed.count() == 3000

    series = spark_steward.checkpoints("s", retained=RETAINED)
    real_begin = runtime.service(CheckpointService).store.begin

    for i in range(1, SAVES + 1):
        def begin(name: str, *args: Any, _i: int = i, **kwargs: Any) -> Any:
            entry = real_begin(name, *args, **kwargs)
            if name == "s":
                log(event="begun", number=entry.number, iteration=_i)
            return entry

        runtime.service(CheckpointService).store.begin = begin
        number = series.save(rows_of(spark, i))
        log(event="saved", number=number, iteration=i)
    runtime.service(CheckpointService).store.begin = real_begin
    stop_watching.set()
    spark.stop()
    log(event="done")


def attach_again(spark: Any) -> None:
    import spark_steward

    store = spark_steward.runtime(spark).service(CheckpointService).store
    deadline = time.monotonic() + 120
    while store.cleaner.outstanding() and time.monotonic() < deadline:
        store.cleaner.wait_idle(0.2)
    log(event="recovered", outstanding=[k.describe() for k in store.cleaner.outstanding()],
        given_up={k.describe(): v for k, v in store.cleaner.given_up().items()})
    # Every completed checkpoint through the public API, as a later application restores it.
    from pyspark.sql import functions as F

    series = spark_steward.checkpoints("s")
    listed = series.ls()
    log(event="listed", checkpoints=[[c.id, c.state, c.rows] for c in listed])
    for info in listed:
        if info.state == "completed":
            row = series.restore(info.id).agg(
                F.count("*"), F.sum("id"), F.min("tag"), F.max("tag"), F.sum("v")).collect()[0]
            log(event="restored", number=info.id, summary=list(row))
    spark.stop()
    log(event="done")


if __name__ == "__main__":
    out_file, sparkcp_dir, mode = sys.argv[1:4]
    _out = open(out_file, "a", encoding="utf-8")
    from pyspark.sql import SparkSession

    session = SparkSession.builder.appName(f"checkpoint-crash-{mode}").getOrCreate()
    log(event="attached", app_id=session.sparkContext.applicationId, pid=os.getpid(), mode=mode)
    if mode == "crash":
        crash(session, Path(sparkcp_dir), sys.argv[4], int(sys.argv[5]))
    else:
        attach_again(session)
