"""File-merged checkpoints (FLIP-306) on the shared local-cluster[2,1,1024]: few physical files
per save, segments readable by any Arrow tool, merging toggled between save and restore,
reuse across the checkpoint boundary, the space-amplification bound, a corrupted byte, an
executor killed during a save, and ``df.checkpoint()`` served by the store.

Every test uses its own series name: the shared session's storage dir outlives each test.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import crc32c
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import spark_steward
from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.gc import series_space
from spark_steward.errors import CheckpointCorrupt
from spark_steward.checkpoint.lifecycle import CheckpointKind, CheckpointState, spark_series
from spark_steward.checkpoint.merging.lifecycle import Segment
from spark_steward.checkpoint.spark_checkpoints import checkpoint_dir, checkpointed_rdd_of_dataframe
from tests.spark.conftest import executor_pids, wait_for_executors
from tests.spark.test_checkpoints import SCHEMA, _by_id, _row
from spark_steward.checkpoint.service import CheckpointService

MERGING = "spark.steward.checkpoints.file-merging.enabled"
ACROSS = "spark.steward.checkpoints.file-merging.across-checkpoint-boundary"
BOUND = "spark.steward.checkpoints.file-merging.max-space-amplification"
REPLACE = "spark.steward.checkpoints.replace-builtin"
CODEC = "spark.steward.checkpoints.compression"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def store(runtime: Any) -> Any:
    return runtime.service(CheckpointService).require_store()


@contextmanager
def session_conf(spark: Any, **values: str) -> Iterator[None]:
    keys = {"merging": MERGING, "across": ACROSS, "bound": BOUND, "replace": REPLACE,
            "codec": CODEC}
    before = {keys[k]: spark.conf.get(keys[k], None) for k in values}
    for k, v in values.items():
        spark.conf.set(keys[k], v)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _idle(store: Any) -> None:
    assert store.cleaner.wait_idle(30.0), f"cleanup still busy: {store.cleaner.stats()}"


def _segments(store: Any, series: str, number: int) -> list[Segment]:
    artifact = store.metadata.read_artifact(series, number)
    return [Segment.from_json(s) for s in artifact["segments"]]


def _physical(runtime: Any, series: str) -> dict[str, int]:
    root = Path(runtime.storage.path(f"{layout.MERGED}/{series}"))
    return {str(p.relative_to(Path(runtime.storage.path()))): p.stat().st_size
            for p in root.rglob("*") if p.is_file()} if root.exists() else {}


# -- layout and round trips --------------------------------------------------------------------


def test_a_save_of_200_partitions_is_a_few_physical_files_that_arrow_reads_by_range(
        spark: Any, runtime: Any, store: Any) -> None:
    name = _name("merged")
    df = spark.range(0, 20_000, numPartitions=200).withColumn("v", F.col("id") * 3)
    number = spark_steward.checkpoints(name).save(df)
    segments = _segments(store, name, number)
    assert [s.partition for s in segments] == list(range(200))
    files = {s.file for s in segments}
    # two executor processes on one host share their host's files: at most one per writer
    assert 1 <= len(files) <= 2, files
    assert set(_physical(runtime, name)) == files
    entry = store.get_completed(name, number)
    assert entry.merged and set(entry.physical) == files and entry.files == len(files)
    # any Arrow tool reads a partition by its byte range
    seg = segments[137]
    with open(runtime.storage.path(seg.file), "rb") as fh:
        fh.seek(seg.offset)
        table = pa.ipc.open_stream(fh.read(seg.length)).read_all()
    assert table.column("id").to_pylist() == list(range(13_700, 13_800))
    assert table.column("v").to_pylist() == [i * 3 for i in range(13_700, 13_800)]
    assert spark_steward.checkpoints(name).latest().rdd.getNumPartitions() == 200


@pytest.mark.parametrize("save_merged,restore_merged", [("true", "true"), ("true", "false"),
                                                        ("false", "true")])
def test_round_trip_with_merging_on_off_and_toggled(spark: Any, save_merged: str,
                                                    restore_merged: str) -> None:
    series = spark_steward.checkpoints(_name("toggle"), retained=3)
    rows = [_row(i) for i in range(240)]
    nested = spark.createDataFrame(rows, SCHEMA).coalesce(3)
    empty_parts = spark.range(0, 50, numPartitions=4).filter("id < 10 or id > 45")
    nothing = spark.createDataFrame([], "a INT, b STRING")
    with session_conf(spark, merging=save_merged):
        ids = [series.save(nested), series.save(empty_parts), series.save(nothing)]
    with session_conf(spark, merging=restore_merged):
        back = series.restore(ids[0])
        assert back.schema == nested.schema and back.rdd.getNumPartitions() == 3
        assert _by_id(back.collect()) == sorted(rows)
        parts = series.restore(ids[1])
        assert parts.rdd.getNumPartitions() == 4
        assert [len(p) for p in parts.rdd.glom().collect()] == \
            [len(p) for p in empty_parts.rdd.glom().collect()]
        assert sorted(r.id for r in parts.collect()) == [*range(10), 46, 47, 48, 49]
        none = series.restore(ids[2])
        assert none.schema == nothing.schema and none.collect() == []


def test_subsumed_and_deleted_checkpoints_leave_no_physical_file_behind(spark: Any, runtime: Any,
                                                            store: Any) -> None:
    name = _name("subsume")
    series = spark_steward.checkpoints(name, retained=1)
    first = series.save(spark.range(0, 1000, numPartitions=8))
    first_files = set(store.get_completed(name, first).physical)
    second = series.save(spark.range(0, 2000, numPartitions=8))
    _idle(store)
    left = set(_physical(runtime, name))
    assert left == set(store.get_completed(name, second).physical)
    assert not (left & first_files)
    assert not Path(runtime.storage.path(layout.merged_path(name, first))).exists()
    assert series.latest().count() == 2000
    # deleting the series deletes every physical file and entry it had
    assert series.drop() == [second]
    _idle(store)
    assert _physical(runtime, name) == {} and series.ls() == []


# -- compression (issue 25) ---------------------------------------------------------------------


def _texts(spark: Any, partitions: int = 8) -> Any:
    return spark.range(0, 40_000, numPartitions=partitions).select(
        "id", (F.col("id") * 1.5).alias("x"), F.concat(F.lit("name-"), F.col("id")).alias("s"))


def _segment_bytes(runtime: Any, seg: Segment) -> bytes:
    with open(runtime.storage.path(seg.file), "rb") as fh:
        fh.seek(seg.offset)
        return fh.read(seg.length)


def test_segments_are_compressed_with_the_session_codec_and_any_arrow_reader_opens_them(
        spark: Any, runtime: Any, store: Any) -> None:
    df = _texts(spark)
    sizes = {}
    for codec in ("none", "lz4", "zstd"):
        name = _name(f"codec-{codec}")
        with session_conf(spark, codec=codec):
            number = spark_steward.checkpoints(name).save(df)
        segments = _segments(store, name, number)
        sizes[codec] = sum(s.length for s in segments)
        seg = segments[5]
        stream = _segment_bytes(runtime, seg)
        assert format(crc32c.crc32c(stream), "08x") == seg.crc32c  # over the stored bytes
        table = pa.ipc.open_stream(stream).read_all()  # pyarrow, nothing of ours
        assert table.column("id").to_pylist() == list(range(25_000, 30_000))
        assert table.column("s").to_pylist()[:2] == ["name-25000", "name-25001"]
        back = spark_steward.checkpoints(name).latest()
        assert back.agg(F.sum("id"), F.count("*")).first() == (sum(range(40_000)), 40_000)
    assert sizes["zstd"] < sizes["none"] / 3 and sizes["lz4"] < sizes["none"], sizes
    with session_conf(spark, codec="gzip"), pytest.raises(Exception, match="compression"):
        spark_steward.checkpoints(_name("codec-bad")).save(df)


def test_uncompressed_segments_restore_under_any_codec(spark: Any, store: Any) -> None:
    """Segments without compression are what versions before issue 25 wrote: they restore
    whatever the session's codec says now, and so do compressed ones with the codec off."""
    df = _texts(spark, 4)
    name = _name("old")
    series = spark_steward.checkpoints(name, retained=2)
    with session_conf(spark, codec="none"):
        old = series.save(df)
    with session_conf(spark, codec="zstd"):
        new = series.save(df)
        assert sorted(series.restore(old).collect()) == sorted(df.collect())
    with session_conf(spark, codec="none"):
        assert sorted(series.restore(new).collect()) == sorted(df.collect())


def test_a_codec_change_rewrites_every_segment_once_then_reuses_them(spark: Any,
                                                                     store: Any) -> None:
    name = _name("codec-across")
    series = spark_steward.checkpoints(name, retained=1)
    df = _texts(spark, 6)

    def written(number: int) -> int:
        return len([s for s in _segments(store, name, number)
                    if s.file.startswith(layout.merged_path(name, number))])

    with session_conf(spark, across="true", codec="none"):
        first = series.save(df)
        assert written(series.save(df)) == 0  # unchanged: all reused
    with session_conf(spark, across="true", codec="zstd"):
        changed = series.save(df)
        assert written(changed) == 6  # other bytes: all written once, compressed
        again = series.save(df)
        assert written(again) == 0  # and reused from then on
    assert first < changed < again
    assert sorted(series.latest().collect()) == sorted(df.collect())


def _plant(runtime: Any, store: Any, name: str, number: int, partition: int,
           stream: bytes) -> None:
    """A neighbour's segment with consistent records: ``stream`` appended to the physical file
    of ``partition`` and the artifact rewritten to name it with its true length and checksums."""
    import hashlib

    artifact = store.metadata.read_artifact(name, number)
    seg = Segment.from_json(artifact["segments"][partition])
    path = runtime.storage.path(seg.file)
    offset = os.path.getsize(path)
    with open(path, "ab") as fh:
        fh.write(stream)
    artifact["segments"][partition] = Segment(
        partition=seg.partition, file=seg.file, offset=offset, length=len(stream),
        rows=seg.rows, crc32c=format(crc32c.crc32c(stream), "08x"),
        sha256=hashlib.sha256(stream).hexdigest()).to_json()
    store.metadata.write_artifact(name, number, artifact)


def _arrow_stream(table: Any, codec: str | None = "zstd") -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression=codec)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("case", ["null-in-not-null", "huge-claim", "garbage-body"])
def test_a_hostile_compressed_segment_with_true_checksums_fails_clearly(
        spark: Any, runtime: Any, store: Any, case: str) -> None:
    """What a neighbour could leave with every record consistent: nulls in a NOT NULL column
    (read without a copy, so checked per batch), a buffer claiming 2**40 bytes uncompressed
    (refused before allocating), a zstd body of garbage. The restore fails naming the
    partition; nothing is read wrong or allocated huge."""
    name = _name("hostile")
    series = spark_steward.checkpoints(name)
    number = series.save(spark.range(0, 3000, numPartitions=3))  # id is NOT NULL
    ids = pa.array([1, None, 3] if case == "null-in-not-null" else list(range(1000)), pa.int64())
    stream = bytearray(_arrow_stream(pa.table({"id": ids})))
    if case != "null-in-not-null":
        reader = pa.BufferReader(bytes(stream))
        pa.ipc.read_message(reader)                 # the schema
        batch = pa.ipc.read_message(reader)
        body = reader.tell() - batch.body.size      # the validity buffer is empty: the data
        if case == "huge-claim":                    # buffer's length prefix comes first
            stream[body:body + 8] = (2 ** 40).to_bytes(8, "little")
        else:
            stream[body + 8:reader.tell()] = bytes(range(256)) * ((reader.tell() - body - 8)
                                                                  // 256) + bytes(
                (reader.tell() - body - 8) % 256)
    _plant(runtime, store, name, number, 1, bytes(stream))
    with pytest.raises(Exception) as info:
        series.latest().collect()
    text = str(info.value)
    assert "checkpoint segment of partition 1" in text, text[:3000]
    expected = {"null-in-not-null": "which the schema declares NOT NULL",
                "huge-claim": "claims 1099511627776 uncompressed bytes",
                "garbage-body": "zstd buffer is corrupt"}[case]
    assert expected in text, text[:3000]


# -- across the checkpoint boundary, and the amplification bound ------------------------------


def _changed(step: int) -> set[int]:
    return {step % 20, (step * 7) % 20} if step else set()


def _iteration(spark: Any, step: int) -> Any:
    """20 partitions of 500 rows; partition p holds version = the last step ≤ ``step`` that
    changed it (:func:`_changed`), so each step changes exactly two partitions."""
    version = {p: s for s in range(step + 1) for p in _changed(s)}
    marks = F.create_map(*[x for p, v in sorted(version.items()) for x in (F.lit(p), F.lit(v))])
    df = spark.range(0, 10_000, numPartitions=20).withColumn("p", F.spark_partition_id())
    current = F.coalesce(marks[F.col("p")], F.lit(0)) if version else F.lit(0)
    return df.withColumn("v", F.col("id") * 10 + current).drop("p")


def test_unchanged_partitions_are_reused_and_amplification_stays_bounded(
        spark: Any, runtime: Any, store: Any) -> None:
    name = _name("across")
    series = spark_steward.checkpoints(name, retained=1)
    with session_conf(spark, across="true", bound="1.3"):
        series.save(_iteration(spark, 0))
        written = []
        for step in range(1, 7):
            number = series.save(_iteration(spark, step))
            _idle(store)
            segments = _segments(store, name, number)
            mine = [s for s in segments if s.file.startswith(layout.merged_path(name, number))]
            written.append(len(mine))
            (space,) = [s for s in series_space(runtime.registry) if s.series == name]
            assert space.amplification <= 1.3 + 1e-9, (step, space)
            assert sorted(series.latest().collect()) == sorted(_iteration(spark, step).collect())
    # the first saves wrote only the 2 changed partitions (physical bytes grow by about 10% of
    # the live ones each time, and the files of twice-changed partitions go); by the 4th save
    # the bound made a save also copy the live segments out of the most wasteful file
    assert written[:3] == [2, 2, 2] and max(written[3:]) > 2, written


# -- damage ------------------------------------------------------------------------------------


def test_a_corrupted_byte_fails_the_read_naming_series_checkpoint_and_segment(
        spark: Any, runtime: Any, store: Any) -> None:
    name = _name("corrupt")
    series = spark_steward.checkpoints(name)
    number = series.save(spark.range(0, 3000, numPartitions=6))
    seg = _segments(store, name, number)[4]
    path = runtime.storage.path(seg.file)
    with open(path, "r+b") as fh:
        fh.seek(seg.offset + seg.length - 20)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(Exception) as info:
        series.latest().collect()
    text = str(info.value)
    assert f"checkpoint {name}/{number}" in text and "partition 4" in text and "crc32c" in text
    # a file cut short fails the restore itself, before any task runs
    os.truncate(path, seg.offset + 10)
    with pytest.raises(CheckpointCorrupt, match=rf"checkpoint {name}/{number}.*partition \d"):
        series.latest()


# -- an executor killed during a save ---------------------------------------------------------


def test_an_executor_killed_during_a_save_leaves_a_complete_checkpoint(
        spark: Any, runtime: Any, store: Any) -> None:
    sc = spark.sparkContext
    name = _name("exec-kill")
    series = spark_steward.checkpoints(name, retained=1)

    @F.udf("long")
    def slow(x: int) -> int:
        time.sleep(0.02)
        return x

    df = spark.range(0, 1200, numPartitions=12).withColumn("w", slow("id"))
    victims = executor_pids(sc)
    assert len(victims) == 2
    result: dict[str, Any] = {}
    saver = threading.Thread(target=lambda: result.update(number=series.save(df)))
    folder = Path(runtime.storage.path(f"{layout.MERGED}/{name}"))
    saver.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(folder.rglob("*.arrows")):
        time.sleep(0.05)
    os.kill(victims[0], signal.SIGKILL)
    saver.join(180)
    assert "number" in result, "the save did not complete"
    number = result["number"]
    restored = series.latest()
    assert sorted(r.id for r in restored.select("id").collect()) == list(range(1200))
    # the killed attempts' bytes are in no segment; subsuming the checkpoint reclaims them
    first_files = set(store.get_completed(name, number).physical)
    series.save(spark.range(5, numPartitions=1))
    _idle(store)
    assert not (set(_physical(runtime, name)) & first_files)
    wait_for_executors(sc, exclude=victims[0])


# -- df.checkpoint() served by the store -------------------------------------------------------


def test_replace_builtin_serves_df_checkpoint_per_session(spark: Any, runtime: Any,
                                                          store: Any, tmp_path: Path) -> None:
    series = spark_series(runtime.app_id)
    df = spark.range(0, 5000, numPartitions=10).withColumn("sq", F.col("id") * F.col("id"))
    before = {e.number for e in store.entries(series)}
    with session_conf(spark, replace="true"):
        cut = df.checkpoint()
        lazy = df.checkpoint(eager=False)
    new = [e for e in store.entries(series) if e.number not in before]
    assert len(new) == 2
    assert all(e.kind is CheckpointKind.SPARK_DATAFRAME and e.merged and
               e.state is CheckpointState.COMPLETED for e in new)
    assert sorted(cut.collect()) == sorted(df.collect()) == sorted(lazy.collect())
    assert cut.rdd.getNumPartitions() == 10
    plan = cut._jdf.queryExecution().logical().toString()
    assert "Range" not in plan, plan  # lineage cut: the plan reads the saved segments
    # a session without the switch keeps Spark's own checkpoint
    if checkpoint_dir(spark.sparkContext) is None:
        spark.sparkContext.setCheckpointDir(str(tmp_path / "sparkcp"))
    with session_conf(spark, replace="true"):
        other = spark.newSession()
        spark_own = other.range(3).checkpoint()
    rdd_id, path = checkpointed_rdd_of_dataframe(spark_own)
    assert path is not None and sorted(r.id for r in spark_own.collect()) == [0, 1, 2]
    served = [e for e in store.entries(series) if e.kind is CheckpointKind.SPARK_DATAFRAME]
    assert {e.number for e in served} - before == {e.number for e in new}

    # released like Spark's own: once nothing on the JVM reads it, Spark's cleaner cleans the
    # RDD over the segments and the checkpoint is discarded with its physical files
    first = min(new, key=lambda e: e.number)
    folder = Path(runtime.storage.path(first.data))
    assert folder.is_dir()
    del cut

    def collect() -> None:
        gc.collect()
        spark.sparkContext._jvm.System.gc()

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and first.key in {e.key for e in store.entries(series)}:
        collect()
        time.sleep(0.3)
    assert first.key not in {e.key for e in store.entries(series)}
    _idle(store)
    assert not folder.exists()
    assert sorted(lazy.collect()) == sorted(df.collect())  # the other one is still there
