"""File-merged checkpoints (FLIP-306) on Spark: a DataFrame saved as Arrow IPC segments in few
physical files (:func:`save_merged`), and restored from them by byte range
(:func:`restore_merged`).

The JVM (``io.sparksteward.shim.checkpoint.SegmentCodec``) turns each partition into one Arrow
IPC stream and back; Python workers move the bytes with fsspec
(:mod:`spark_steward.checkpoint.merging.segment_files`), so every storage spark-steward can reach
works, object stores included, with no Hadoop connector on the executors.

Writing: the partitions are coalesced (no shuffle) into one task per executor core, and each task
writes its partitions one after another, each as its own segment. A Python task costs tens of
milliseconds on top of the JVM's, so one Python task per partition would cost more than Spark's
own checkpoint at a thousand partitions; this way the writes keep full parallelism at a handful
of tasks.

- **Filesystems** (``file://``, NFS-like mounts): every segment is appended to a physical file
  shared by the processes of its host (an exclusive ``flock`` per append, ``fsync`` before the
  task reports success): about one file per concurrently writing task of each host.
- **Object stores** (no append): each task writes its segments into objects of its own; each
  object is complete before the task reports success.

Reading keeps one partition per segment. On filesystems the executors' JVMs read the byte
ranges themselves (``io.sparksteward.shim.checkpoint.SegmentFiles``, a JVM task each); other
storage is read by Python workers through fsspec.

Only the records of successful tasks are returned by the job, so the bytes of a killed or retried
attempt are never referenced; they are reclaimed with the file once nothing uses it.
"""

from __future__ import annotations

import json
import logging
import socket
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from spark_steward.checkpoint.store import CheckpointStore
from spark_steward.cleaner import OrphanKey
from spark_steward.checkpoint.config_keys import (CHECKPOINTS_COMPRESSION,
                                                  CHECKPOINTS_MERGING_ACROSS_BOUNDARY,
                                                  CHECKPOINTS_MERGING_MAX_AMPLIFICATION,
                                                  CHECKPOINTS_MERGING_MAX_FILE_SIZE)
from spark_steward.checkpoint.errors import CheckpointCorrupt, CheckpointError
from spark_steward.checkpoint.merging import lifecycle as merging
from spark_steward.checkpoint.lifecycle import CheckpointEntry, CheckpointKind
from spark_steward.checkpoint.merging.lifecycle import Segment
from spark_steward.kernel.session import session_value
from spark_steward.kernel import jvm
from spark_steward.kernel.jvm import ensure_on_executors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_steward.kernel.runtime import DriverRuntime
    from spark_steward.storage import Storage

log = logging.getLogger(__name__)

ARTIFACT_FORMAT = "spark-steward-segments/1"
#: Pieces of a segment handed between the JVM and a Python worker.
CHUNK_BYTES = 4 << 20


def segments_of(artifact: Mapping[str, Any], label: str) -> list[Segment]:
    """The segments a merged checkpoint's artifact records, by partition."""
    try:
        found = [Segment.from_json(s) for s in artifact["segments"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointCorrupt(f"{label}: artifact has no valid segment list ({exc})") from None
    return sorted(found, key=lambda s: s.partition)


def stored_segments(store: CheckpointStore, entries: Sequence[CheckpointEntry]
                    ) -> dict[int, list[Segment]]:
    """The segments of each merged checkpoint of ``entries``, by number (one artifact read
    each; an unreadable one is left out with a warning: its segments are not reused)."""
    found: dict[int, list[Segment]] = {}
    for entry in entries:
        if not entry.merged:
            continue
        try:
            artifact = store.metadata.read_artifact(entry.series, entry.number)
        except CheckpointCorrupt as exc:
            log.warning("not reusing the segments of %s: %s", entry.id, exc)
            continue
        found[entry.number] = segments_of(artifact, f"checkpoint {entry.id}")
    return found


def by_content(segments: Mapping[int, list[Segment]]) -> dict[str, Segment]:
    """Segments by content hash: what a save across the checkpoint boundary may reuse. Newer
    checkpoints win."""
    return {seg.sha256: seg for number in sorted(segments) for seg in segments[number]}


# -- saving and restoring a checkpoint ---------------------------------------------------------


def save_merged(runtime: "DriverRuntime", store: CheckpointStore, series: str, df: "DataFrame",
                retained: int | None, *, kind: CheckpointKind = CheckpointKind.SERIES) -> int:
    """A file-merged save (FLIP-306): pending entry naming what it may reuse → segments written
    by the executors → wasteful files rewritten → artifact and completed entry → subsume."""
    runtime.executor_package.require("file-merged checkpoints")
    spark = df.sparkSession
    conf = runtime.conf

    def setting(key: Any) -> Any:
        return session_value(spark, key, conf.get(key))

    previous: dict[int, list[Segment]] = {}
    completed: list[int] = []
    if kind is CheckpointKind.SERIES:
        store.refresh(series)
        if setting(CHECKPOINTS_MERGING_ACROSS_BOUNDARY):
            retained_entries = store.completed(series)
            completed = [e.number for e in retained_entries]
            previous = stored_segments(store, retained_entries)
    known = by_content(previous)
    entry = store.begin(series, kind=kind, merged=True,
                        reuses={s.file for s in known.values()})
    label = f"checkpoint {entry.id}"
    try:
        max_file_size = setting(CHECKPOINTS_MERGING_MAX_FILE_SIZE)
        segments = write_merged(df, store.storage, entry.data, max_file_size=max_file_size,
                                known=known, codec=setting(CHECKPOINTS_COMPRESSION))
        new: dict[str, int] = {}
        for seg in segments:
            if seg.file.startswith(entry.data.rstrip("/") + "/"):
                new[seg.file] = max(new.get(seg.file, 0), seg.offset + seg.length)
        store.require_visible(entry, new)
        if known and retained is not None:
            kept = completed[-(retained - 1):] if retained > 1 else []
            segments = rewrite_wasteful(
                store.storage, entry.data, segments,
                [seg for number in kept for seg in previous.get(number, [])],
                bound=setting(CHECKPOINTS_MERGING_MAX_AMPLIFICATION),
                max_file_size=max_file_size, label=label)
        artifact = {"format": ARTIFACT_FORMAT, "series": entry.series, "id": entry.number,
                    "app_id": entry.app_id, "schema": df.schema.json(),
                    "segments": [s.to_json() for s in segments]}
        totals = summary(segments)
        done = store.complete(entry, artifact, rows=totals["rows"], bytes_=totals["bytes"],
                              files=totals["files"], retained=retained,
                              physical={s.file for s in segments})
    except BaseException as exc:
        store.discard(entry, f"save failed: {type(exc).__name__}")
        raise
    # Files holding only bytes of attempts that did not count go now rather than at the next
    # discard: nothing references them.
    def sweep() -> None:
        store.sweep_merged(series)

    store.cleaner.submit(OrphanKey("merged/" + series, round=entry.number), sweep)
    return done.number


def restore_merged(spark: "SparkSession", store: CheckpointStore, entry: CheckpointEntry,
                   artifact: dict[str, Any]) -> "DataFrame":
    """The merged checkpoint ``entry`` (whose artifact is ``artifact``) as a DataFrame."""
    label = f"checkpoint {entry.id}"
    try:
        schema = artifact["schema"]
    except KeyError:
        raise CheckpointCorrupt(f"{label}: artifact lacks the schema") from None
    return read_merged(spark, store.storage, segments_of(artifact, label), schema, label)


# -- writing ----------------------------------------------------------------------------------


def write_merged(df: "DataFrame", storage: "Storage", folder: str, *, max_file_size: int,
                 known: Mapping[str, Segment], codec: str = "zstd") -> list[Segment]:
    """Runs one Spark job that writes every partition of ``df`` as a segment below ``folder``
    (or reuses a ``known`` segment with the same content), its Arrow buffers compressed with
    ``codec``; returns the segments by partition. Known segments match by the sha-256 of their
    stored bytes, so segments of another codec are written anew (once)."""
    from spark_steward.checkpoint.data import check_codec

    check_codec(codec)
    if not jvm.is_classic(df):
        raise CheckpointError("checkpoint data needs a classic (non Spark Connect) DataFrame")
    sc = df.sparkSession.sparkContext
    ensure_on_executors(sc)
    streams = jvm.to_rdd(jvm.call(sc, "encodeSegments", jvm.dataframe_handle(df), CHUNK_BYTES,
                                  codec), sc)
    group = not storage.is_local
    if streams.getNumPartitions() > sc.defaultParallelism:
        streams = streams.coalesce(max(1, sc.defaultParallelism))
    task = _WriteTask(folder, max_file_size, dict(known), group)
    with jvm.translate(CheckpointError,
                       f"writing checkpoint segments to {storage.url_of(folder)} failed"):
        written = streams.mapPartitions(task).collect()
    found = [Segment.from_json(s) for batch in written for s in json.loads(batch)]
    return sorted(found, key=lambda s: s.partition)


class _WriteTask:
    """What each task runs (pickled to the executors): its partitions to segments."""

    def __init__(self, folder: str, max_file_size: int, known: dict[str, Segment],
                 group: bool) -> None:
        self.folder = folder
        self.max_file_size = max_file_size
        self.known = known
        self.group = group

    def __call__(self, elements: Iterable[bytes]) -> Iterator[str]:
        from pyspark import TaskContext

        from spark_steward.checkpoint.merging.segment_files import write_segments
        from spark_steward.kernel.executor import executor_runtime
        from spark_steward.local.executor import ExecutorWorkingDir

        runtime = executor_runtime()
        work = runtime.component("working-dir", ExecutorWorkingDir).work
        host = _host_name()
        if self.group:  # own objects per task attempt: nobody else writes them
            tc = TaskContext.get()
            host = f"{host}-{tc.taskAttemptId() if tc else 0}"
        written = write_segments(runtime.storage, self.folder, elements, writer_name=host,
                                 max_file_size=self.max_file_size, known=self.known,
                                 spool_dir=str(work.scratch_dir()))
        yield json.dumps([s.to_json() for s in written])


def _host_name() -> str:
    name = socket.gethostname() or "host"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]


def rewrite_wasteful(storage: "Storage", folder: str, segments: list[Segment],
                     retained_segments: Iterable[Segment], *, bound: float, max_file_size: int,
                     label: str) -> list[Segment]:
    """Copies this checkpoint's segments out of the physical files that push the series over
    ``bound`` (see :func:`~spark_steward.checkpoint.merging.lifecycle.choose_rewrites`); returns the
    segment list with the copies in place."""
    from spark_steward.checkpoint.merging.segment_files import copy_segments

    live = list(retained_segments) + segments
    sizes = {}
    for rel in {s.file for s in live}:
        try:
            sizes[rel] = int(storage.fs.info(storage.path(rel))["size"])
        except FileNotFoundError:
            sizes[rel] = 0
    chosen = set(merging.choose_rewrites(sizes, live, segments, bound))
    if not chosen:
        return segments
    moving = [s for s in segments if s.file in chosen]
    copies = copy_segments(storage, moving, folder, writer_name="rewrite",
                           max_file_size=max_file_size, label=label)
    by_partition = {old.partition: new for old, new in zip(moving, copies)}
    log.info("%s: copied %d live segment(s) out of %d wasteful physical file(s)", label,
             len(moving), len(chosen))
    return [by_partition.get(s.partition, s) for s in segments]


# -- reading ----------------------------------------------------------------------------------


def read_merged(spark: "SparkSession", storage: "Storage", segments: Sequence[Segment],
                schema_json: str, label: str) -> "DataFrame":
    """A DataFrame over ``segments``: one partition per segment, in partition order. The files
    are checked to exist and be long enough now; every segment's crc32c is checked as it is
    read (a mismatch fails the reading task with an error naming ``label`` and the segment)."""
    from spark_steward.checkpoint.merging.segment_files import check_segments_exist
    from spark_steward.checkpoint.data import read_dataframe

    ordered = sorted(segments, key=lambda s: s.partition)
    if [s.partition for s in ordered] != list(range(len(ordered))):
        raise CheckpointCorrupt(f"{label}: the artifact's segments do not cover partitions "
                                f"0..{len(ordered) - 1}")
    sc = spark.sparkContext
    if not ordered:  # no partitions at all: nothing to read
        return read_dataframe(spark, "file:///", [], schema_json)
    check_segments_exist(storage, ordered, label=label)
    ensure_on_executors(sc)
    with jvm.translate(CheckpointError, f"{label}: reading its segments failed"):
        if storage.is_local:
            listing = "\n".join(segment_line(storage, s) for s in ordered)
            jdf = jvm.call(sc, "readSegmentFiles", jvm.session_handle(spark), listing,
                           schema_json, label)
        else:
            pieces = sc.parallelize(ordered, len(ordered)).mapPartitions(_ReadTask(label))
            pieces._bypass_serializer = True  # type: ignore[attr-defined]  # raw byte[]
            jdf = jvm.call(sc, "decodeSegments", jvm.session_handle(spark),
                           jvm.rdd_handle(pieces), schema_json)
    return jvm.to_dataframe(jdf, spark)


def segment_line(storage: "Storage", segment: Segment) -> str:
    """The line of a restore's listing the JVM reads ``segment`` by (``SegmentFiles``):
    ``url offset length crc32c-hex partition``; the JVM takes the numbers from the right, so
    the URL may hold spaces."""
    from spark_steward.checkpoint.data import hadoop_url

    return (f"{hadoop_url(storage.url_of(segment.file))} {segment.offset} {segment.length} "
            f"{int(segment.crc32c, 16):x} {segment.partition}")


class _ReadTask:
    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, segments: Iterable[Segment]) -> Iterator[bytes]:
        from spark_steward.checkpoint.merging.segment_files import read_segment
        from spark_steward.kernel.executor import executor_runtime

        storage = executor_runtime().storage
        for seg in segments:
            yield from read_segment(storage, seg, label=self.label)


def summary(segments: Sequence[Segment]) -> dict[str, int]:
    """Rows, logical bytes and physical files of a merged checkpoint."""
    return {"rows": sum(s.rows for s in segments), "bytes": sum(s.length for s in segments),
            "files": len({s.file for s in segments})}
