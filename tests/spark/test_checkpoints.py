"""Named checkpoint series (``spark_steward.checkpoints``) and the ownership of Spark's own
checkpoints, on the shared local-cluster: save → latest/restore round trips, subsumption and
cleanup of the storage dir, corruption, failed saves, bad names, the per-session switch, Spark's
ContextCleaner, and a restore in another application.

Every test uses its own series name: the shared session's storage dir outlives each test.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import spark_steward
from spark_steward.checkpoint import metadata as layout
from spark_steward.errors import (CheckpointCorrupt, CheckpointError, CheckpointNotFound,
                                  DisabledForSession)
from spark_steward.checkpoint.lifecycle import CheckpointKind, CheckpointState
from spark_steward.checkpoint.spark_checkpoints import checkpoint_dir, checkpointed_rdd_of_dataframe
from tests.spark.conftest import SCRIPTS, STORAGE_DIR, run_spark_submit, steward_conf
from spark_steward.checkpoint.service import CheckpointService

IDLE = 30.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def service(runtime: Any) -> Any:
    return runtime.service(CheckpointService)


@pytest.fixture(scope="module")
def store(service: Any) -> Any:
    return service.require_store()


@pytest.fixture
def one_file_per_partition(spark: Any) -> Iterator[None]:
    """File merging off for this test's saves: it checks that layout's files."""
    key = "spark.steward.checkpoints.file-merging.enabled"
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.unset(key)


def _idle(store: Any) -> None:
    assert store.cleaner.wait_idle(IDLE), f"cleanup still busy: {store.cleaner.stats()}"


def _local(runtime: Any, rel: str) -> Path:
    return Path(runtime.storage.path(rel))


def _states(series: Any) -> list[tuple[int, str]]:
    return [(c.id, c.state) for c in series.ls()]


def _poll(done: Callable[[], bool], timeout: float = 30.0, step: Callable[[], None] | None = None
          ) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if done():
            return True
        time.sleep(0.3)
    return False


SCHEMA = T.StructType([
    T.StructField("id", T.LongType()),
    T.StructField("n", T.IntegerType()),
    T.StructField("s", T.StringType()),
    T.StructField("amount", T.DecimalType(20, 4)),
    T.StructField("big", T.DecimalType(38, 6)),
    T.StructField("ts", T.TimestampType()),
    T.StructField("day", T.DateType()),
    T.StructField("ints", T.ArrayType(T.IntegerType())),
    T.StructField("attrs", T.MapType(T.StringType(), T.LongType())),
    T.StructField("point", T.StructType([
        T.StructField("x", T.DoubleType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("label", T.StringType())])),
])


def _row(i: int) -> tuple[Any, ...]:
    if i % 9 == 4:  # every column but the id null
        return (i,) + (None,) * (len(SCHEMA.fields) - 1)
    return (i, i * 7 - 300, None if i % 5 == 0 else f"wört-{i}-" + "z" * (i % 30),
            Decimal(i) / 8, Decimal(f"{i}98765432109876543210.123456"),
            dt.datetime(2022, 3, 4, 5, 6, 7, 890000) + dt.timedelta(minutes=i * 13),
            dt.date(1970, 1, 1) + dt.timedelta(days=i * 11),
            [i, None, -i] if i % 3 else [],
            {"a": i, "b": None} if i % 4 else {},
            (i / 3, [f"t{i}", None], None if i % 2 else "even") if i % 6 else None)


def _by_id(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: r["id"])


# -- save, latest, restore, list ---------------------------------------------------------------


def test_save_latest_and_restore_round_trip(spark: Any) -> None:
    name = _name("roundtrip")
    series = spark_steward.checkpoints(name, retained=3)
    rows = [_row(i) for i in range(240)]
    # 4 local partitions (default parallelism) coalesced: 3 partitions without a shuffle
    df = spark.createDataFrame(rows, SCHEMA).coalesce(3)
    assert df.rdd.getNumPartitions() == 3
    expected = sorted(rows)  # Rows compare as tuples; decimals by value

    assert series.save(df) == 1
    (info,) = series.ls()
    assert (info.series, info.id, info.state, info.rows) == (name, 1, "completed", 240)
    assert info.bytes and info.completed_at is not None and info.completed_at >= info.created_at

    back = series.latest()
    assert back.schema == df.schema
    assert back.rdd.getNumPartitions() == 3
    assert _by_id(back.collect()) == expected

    second = df.filter("id % 2 = 0").coalesce(2)
    assert series.save(second) == 2
    assert series.save(spark.range(7, numPartitions=1)) == 3
    assert _states(series) == [(1, "completed"), (2, "completed"), (3, "completed")]

    assert _by_id(series.restore(1).collect()) == expected
    two = series.restore(2)
    assert two.schema == df.schema and two.rdd.getNumPartitions() == 2
    assert _by_id(two.collect()) == [r for r in expected if r[0] % 2 == 0]
    latest = series.latest()
    assert latest.columns == ["id"] and sorted(r.id for r in latest.collect()) == list(range(7))
    # a new handle on the same name sees the same series
    assert [c.id for c in spark_steward.checkpoints(name).ls()] == [1, 2, 3]


@pytest.mark.usefixtures("one_file_per_partition")
def test_retained_subsumes_and_removes_the_oldest(spark: Any, runtime: Any, store: Any) -> None:
    name = _name("retained")
    series = spark_steward.checkpoints(name, retained=2)
    ids = [series.save(spark.range(10 * i, numPartitions=2).withColumn("i", F.lit(i)))
           for i in range(1, 5)]
    assert ids == [1, 2, 3, 4]
    listed = dict(_states(series))
    assert listed[3] == listed[4] == "completed"
    assert set(listed) <= {1, 2, 3, 4}
    assert all(listed[n] == "marked-for-deletion" for n in (1, 2) if n in listed), listed

    _idle(store)
    assert _states(series) == [(3, "completed"), (4, "completed")]
    for number in (1, 2):
        assert not _local(runtime, layout.data_path(name, number)).exists()
        assert not _local(runtime, layout.artifact_path(name, number)).exists()
        assert not _local(runtime, layout.entry_path(name, number)).exists()
    for number in (3, 4):
        assert _local(runtime, layout.data_path(name, number)).is_dir()
        assert _local(runtime, layout.artifact_path(name, number)).is_file()
        assert _local(runtime, layout.entry_path(name, number)).is_file()

    with pytest.raises(CheckpointNotFound, match=rf"{name}/1\b") as info:
        series.restore(1)
    assert "3 (completed)" in str(info.value) and "4 (completed)" in str(info.value)
    assert series.restore(3).count() == 30
    assert series.latest().agg(F.sum("i")).first()[0] == 4 * 40


def test_default_retained_keeps_one(spark: Any, store: Any) -> None:
    series = spark_steward.checkpoints(_name("default-retained"))
    assert series.save(spark.range(3)) == 1
    assert series.save(spark.range(4)) == 2
    _idle(store)
    assert _states(series) == [(2, "completed")]
    assert series.latest().count() == 4


def test_latest_of_an_empty_series_is_not_found(spark: Any) -> None:
    name = _name("nothing")
    with pytest.raises(CheckpointNotFound, match=name):
        spark_steward.checkpoints(name).latest()
    assert spark_steward.checkpoints(name).ls() == []


# -- empty DataFrames --------------------------------------------------------------------------


def test_empty_dataframes_round_trip(spark: Any) -> None:
    series = spark_steward.checkpoints(_name("empty"), retained=5)
    no_rows = spark.range(50, numPartitions=3).withColumn("s", F.lit("x")).filter("id < 0")
    first = series.save(no_rows)
    back = series.restore(first)
    assert back.schema == no_rows.schema
    assert back.rdd.getNumPartitions() == 3
    assert back.collect() == [] and back.count() == 0
    assert series.ls()[-1].rows == 0

    schema = T.StructType([T.StructField("k", T.StringType()),
                           T.StructField("v", T.ArrayType(T.DecimalType(10, 2)))])
    number = first
    for nothing in (spark.createDataFrame([], schema),
                    spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)):
        partitions = nothing.rdd.getNumPartitions()
        number += 1
        assert series.save(nothing) == number
        back = series.latest()
        assert back.schema == schema
        assert back.rdd.getNumPartitions() == partitions
        assert back.collect() == [] and back.count() == 0
        assert series.ls()[-1].rows == 0
    assert partitions == 0  # the last one had no partition at all
    assert back.union(spark.createDataFrame([("a", None)], schema)).count() == 1


# -- corruption ------------------------------------------------------------------------------


def _files(store: Any, name: str, number: int) -> list[dict[str, Any]]:
    return list(store.metadata.read_artifact(name, number)["files"])


@pytest.mark.usefixtures("one_file_per_partition")
def test_a_missing_data_file_fails_restore_naming_it(spark: Any, runtime: Any,
                                                     store: Any) -> None:
    name = _name("missing")
    series = spark_steward.checkpoints(name)
    number = series.save(spark.range(300, numPartitions=3))
    victim = _files(store, name, number)[1]["name"]
    (_local(runtime, layout.data_path(name, number)) / victim).unlink()
    for restore in (lambda: series.restore(number), series.latest):
        with pytest.raises(CheckpointCorrupt) as info:
            restore()
        message = str(info.value)
        assert f"{name}/{number}" in message and victim in message and "missing" in message


@pytest.mark.usefixtures("one_file_per_partition")
def test_a_flipped_byte_fails_the_action_naming_crc32c_and_the_file(
        spark: Any, runtime: Any, store: Any) -> None:
    name = _name("flipped")
    series = spark_steward.checkpoints(name)
    number = series.save(spark.range(600, numPartitions=2).selectExpr("id", "id * 3 AS y"))
    victim = _files(store, name, number)[0]
    path = _local(runtime, layout.data_path(name, number)) / victim["name"]
    data = bytearray(path.read_bytes())
    assert len(data) == victim["bytes"] > 100
    data[12 + 12 + 40] ^= 0x01  # inside the first block's payload
    path.write_bytes(bytes(data))

    restored = series.restore(number)  # sizes match: nothing is read yet
    rows: list[Any] = []
    with pytest.raises(Exception) as info:
        rows = restored.collect()
    assert rows == []
    message = str(info.value)
    assert "crc32c" in message and victim["name"] in message, message[:3000]
    with pytest.raises(Exception, match="crc32c"):
        restored.agg(F.sum("y")).first()


# -- failed saves ----------------------------------------------------------------------------


def test_a_failing_save_is_discarded_and_reraised(spark: Any, runtime: Any, store: Any) -> None:
    name = _name("failing")
    series = spark_steward.checkpoints(name, retained=3)
    assert series.save(spark.range(5)) == 1

    # A task that fails (every attempt) while the executors write the data; JVM only, so no
    # Python worker has to start.
    bad = spark.range(20, numPartitions=2).select(
        F.when(F.col("id") == 7, F.raise_error(F.lit("no sevens here")))
        .otherwise(F.col("id")).alias("id"))
    with pytest.raises(Exception) as info:
        series.save(bad)
    assert "no sevens here" in str(info.value), str(info.value)[:3000]
    failed = 2
    assert failed not in [c.id for c in series.ls() if c.state != "marked-for-deletion"]
    _idle(store)
    assert _states(series) == [(1, "completed")]
    assert not _local(runtime, layout.entry_path(name, failed)).exists()
    assert not _local(runtime, layout.data_path(name, failed)).exists()
    assert not _local(runtime, layout.artifact_path(name, failed)).exists()

    assert series.save(spark.range(6)) == 3
    assert _states(series) == [(1, "completed"), (3, "completed")]
    assert series.latest().count() == 6


# -- names and arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../x", "", "_spark.x", "a/b", "x" * 201, ".hidden"])
def test_bad_series_names_are_refused(bad: str) -> None:
    with pytest.raises(CheckpointError) as info:
        spark_steward.checkpoints(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("retained", [0, -1, 1.5, "2"])
def test_bad_retained_is_refused(retained: Any) -> None:
    with pytest.raises(CheckpointError, match="retained"):
        spark_steward.checkpoints("fine", retained=retained)


# -- Spark's own checkpoints -------------------------------------------------------------------


@pytest.fixture
def spark_checkpoint_dir(spark: Any, tmp_path: Path) -> Iterator[Path]:
    """A checkpoint dir for the shared context; the one set before (if any) is put back as it
    was (the same ``<dir>/<uuid>`` folder, not a new one) afterwards."""
    sc = spark.sparkContext
    jsc = sc._jsc.sc()
    previous = jsc.getCheckpointDir()  # scala Option[String]
    before = checkpoint_dir(sc)
    requested = tmp_path / "spark-cp"
    sc.setCheckpointDir(str(requested))
    try:
        yield requested
    finally:
        # SparkContext.setCheckpointDir always makes a new <uuid> folder: set the var itself.
        getattr(jsc, "checkpointDir_$eq")(previous)
        assert checkpoint_dir(sc) == before


def _spark_entries(store: Any, owner: Any, kind: CheckpointKind) -> list[Any]:
    return [e for e in store.entries(owner.series) if e.kind is kind]


def test_dataframe_checkpoint_is_owned_and_discarded_when_spark_cleans_it(
        spark: Any, runtime: Any, service: Any, store: Any, spark_checkpoint_dir: Path) -> None:
    owner = service.spark_checkpoints
    assert owner.active
    sc = spark.sparkContext
    dirs = [e for e in _spark_entries(store, owner, CheckpointKind.SPARK_CONTEXT_DIR)
            if e.data.startswith(spark_checkpoint_dir.as_uri() + "/")]
    assert len(dirs) == 1 and dirs[0].state is CheckpointState.PENDING

    cp = spark.range(40, numPartitions=2).selectExpr("id", "id * 5 AS y").checkpoint()
    rdd_id, folder = checkpointed_rdd_of_dataframe(cp)
    assert folder is not None and folder.startswith(dirs[0].data + "/rdd-")
    (entry,) = [e for e in _spark_entries(store, owner, CheckpointKind.SPARK_RDD)
                if e.data == folder]
    assert entry.state is CheckpointState.COMPLETED
    assert entry.series == f"_spark.{runtime.app_id}" and entry.app_id == runtime.app_id
    assert _local(runtime, layout.entry_path(entry.series, entry.number)).is_file()
    rdd_dir = Path(folder[len("file://"):])
    assert rdd_dir.is_dir() and any(p.name.startswith("part-") for p in rdd_dir.iterdir())
    assert cp.agg(F.sum("y")).first()[0] == 5 * sum(range(40))

    del cp

    def collect() -> None:
        gc.collect()
        sc._jvm.System.gc()

    def gone() -> bool:
        return entry.key not in {e.key for e in store.entries(owner.series)} \
            and not rdd_dir.exists()

    assert _poll(gone, 30.0, collect), (
        f"entry {entry.id}: {[e.state for e in store.entries(owner.series) if e.key == entry.key]}"
        f"; folder exists: {rdd_dir.exists()}")
    _idle(store)
    assert not _local(runtime, layout.entry_path(entry.series, entry.number)).exists()
    # the context's folder stays owned (pending) until the application stops
    assert dirs[0].key in {e.key for e in store.entries(owner.series)}


# -- the per-session switch ----------------------------------------------------------------------


@pytest.fixture
def off_session(spark: Any) -> Iterator[Any]:
    off = spark.newSession()
    off.conf.set("spark.steward.enabled", "false")
    try:
        yield off
    finally:
        spark.createDataFrame([(1,)], ["x"])  # make the default session active again


def test_a_session_with_steward_off_cannot_save(store: Any, off_session: Any) -> None:
    name = _name("off")
    df = off_session.range(12, numPartitions=2)
    with pytest.raises(DisabledForSession, match="spark.steward.enabled=false"):
        spark_steward.checkpoints(name).save(df)
    assert store.metadata.numbers(name) == {"entries": set(), "artifacts": set(), "data": set()}
    assert [e for e in store.entries() if e.series == name] == []


def _new_spark_entries(store: Any, owner: Any, checkpoint: Callable[[], Any]) -> list[Any]:
    before = {e.key for e in store.entries(owner.series)}
    cp = checkpoint()
    _, folder = checkpointed_rdd_of_dataframe(cp)
    assert folder is not None and cp.count() == 30
    return [e for e in store.entries(owner.series) if e.key not in before or e.data == folder]


def test_spark_checkpoint_in_the_active_off_session_is_not_owned(
        service: Any, store: Any, spark_checkpoint_dir: Path, off_session: Any) -> None:
    off_session.createDataFrame([(1,)], ["x"])  # pyspark makes it the active session
    new = _new_spark_entries(store, service.spark_checkpoints,
                             lambda: off_session.range(30, numPartitions=2).checkpoint())
    assert new == [], f"the off session's checkpoint was registered: {new}"


def test_spark_checkpoint_of_an_off_session_is_not_owned(
        spark: Any, service: Any, store: Any, spark_checkpoint_dir: Path,
        off_session: Any) -> None:
    spark.createDataFrame([(1,)], ["x"])  # the default (enabled) session is the active one
    new = _new_spark_entries(store, service.spark_checkpoints,
                             lambda: off_session.range(30, numPartitions=2).checkpoint())
    assert new == [], f"the off session's checkpoint was registered: {new}"


# -- another application ---------------------------------------------------------------------


def test_a_series_restores_in_another_application(spark: Any, tmp_path: Path) -> None:
    name = _name("handover")
    series = spark_steward.checkpoints(name, retained=2)
    series.save(spark.range(10))
    df = spark.range(1000, numPartitions=4).selectExpr("id", "id % 7 AS k")
    number = series.save(df)
    out = tmp_path / "restored.json"
    started = time.monotonic()
    # local[1]: the later application only reads; no executor JVMs to start (the last --master
    # wins over run_spark_submit's local-cluster).
    result = run_spark_submit(SCRIPTS / "restore_series.py",
                              ["--master", "local[1]", *steward_conf(STORAGE_DIR)], str(out), name)
    took = time.monotonic() - started
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    got = json.loads(out.read_text())
    assert got["app_id"] != spark.sparkContext.applicationId
    assert got["ids"] == [number - 1, number]
    assert got["latest"] == {"count": 1000, "sum": sum(range(1000)), "k": sum(i % 7 for i in
                                                                          range(1000)),
                             "partitions": 4}
    assert got["first"]["count"] == 10
    # the restoring application left the series as it found it
    assert [(c.id, c.state) for c in series.ls()] == [(number - 1, "completed"),
                                                        (number, "completed")]
    print(f"cross-application restore took {took:.1f}s")
