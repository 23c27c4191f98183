"""Cached tables (``spark_steward.cache``, FLIP-36) on the shared local-cluster: equal results,
materialization exactly once (counted by an accumulator in an upstream Python UDF), invalidate,
executor loss, fallback on damaged files, eviction, close(), and the session switch.

Each test caches its own DataFrames; the shared session's storage dir outlives each test.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.storagelevel import StorageLevel

import spark_steward
from spark_steward.errors import DisabledForSession
from spark_steward.tables.lifecycle import TableState
from spark_steward.tables.cached_table import CachedTable
from tests.spark.conftest import executor_pids, wait_for_executors
from spark_steward.tables.service import TableService

IDLE = 30.0


@pytest.fixture(scope="module")
def service(runtime: Any) -> Any:
    return runtime.service(TableService)


@pytest.fixture(scope="module")
def store(service: Any) -> Any:
    return service.store


@pytest.fixture(autouse=True)
def _close_tables(spark: Any) -> Iterator[None]:
    yield
    spark_steward.close(spark)


class Counted:
    """A DataFrame whose Python UDF counts the rows it computes (an accumulator)."""

    def __init__(self, spark: Any, rows: int = 2000, partitions: int = 4) -> None:
        self.calls = spark.sparkContext.accumulator(0)
        calls = self.calls

        @F.udf("long")
        def doubled(x: int) -> int:
            calls.add(1)
            return x * 2

        self.rows = rows
        self.df = (spark.range(0, rows, 1, partitions)
                   .withColumn("y", doubled("id"))
                   .groupBy((F.col("id") % 50).alias("k"))
                   .agg(F.sum("y").alias("s"), F.count("*").alias("n")))

    @property
    def value(self) -> int:
        return int(self.calls.value)


def _sorted(df: Any) -> list[Row]:
    return sorted(df.collect())


def _files(store: Any, table: CachedTable) -> list[Path]:
    entry = table._steward_record.entry
    assert entry is not None, "the table is not materialized"
    folder = Path(store.storage.path(store.data_rel(entry)))
    return sorted(p for p in folder.iterdir() if p.name.endswith(".parquet"))


def _wait_gone(path: Path, timeout: float = IDLE) -> None:
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists(), f"{path} is still there"


# -- results and materialization ---------------------------------------------------------------


def test_queries_read_the_materialized_result_exactly_once(spark: Any, store: Any) -> None:
    counted = Counted(spark)
    expected = _sorted(counted.df)
    baseline = counted.value
    assert baseline == counted.rows

    t = spark_steward.cache(counted.df)
    assert isinstance(t, CachedTable) and spark_steward.cache(t) is t
    built_before = t.filter("k < 10").select("k", "s")
    assert t.schema == counted.df.schema and t.columns == ["k", "s", "n"]
    t.explain()
    assert counted.value == baseline and not t.is_materialized, "nothing runs before a use"

    assert _sorted(t) == expected
    assert counted.value == baseline + counted.rows and t.is_materialized
    assert _sorted(built_before) == [Row(k=r.k, s=r.s) for r in expected if r.k < 10]
    assert t.count() == 50
    assert t.agg(F.sum("s")).first()[0] == sum(r.s for r in expected)
    joined = t.alias("a").join(t.alias("b"), "k").select("k", F.col("a.s").alias("s"))
    assert _sorted(joined) == [Row(k=r.k, s=r.s) for r in expected]
    t.createOrReplaceTempView("cached_t")
    assert spark.sql("SELECT max(n) FROM cached_t").first()[0] == counted.rows // 50
    assert counted.value == baseline + counted.rows, "every query read the Parquet copy"

    entry = store.read_entry(t.storage_key)
    assert entry.state is TableState.READY and entry.rows == 50
    manifest = store.read_manifest(t.storage_key)
    assert manifest.rows == 50 and all(f.crc32c for f in manifest.files)


def test_explain_of_a_materialized_table_shows_the_parquet_scan(spark: Any) -> None:
    counted = Counted(spark, rows=500)
    t = spark_steward.cache(counted.df)
    t.count()
    plan = t.filter("k > 3")._jdf.queryExecution().executedPlan().toString()
    assert "parquet" in plan.lower() and "BatchEvalPython" not in plan


NESTED = T.StructType([
    T.StructField("id", T.IntegerType(), False),
    T.StructField("name", T.StringType(), True),
    T.StructField("tags", T.ArrayType(T.StringType()), True),
    T.StructField("attrs", T.MapType(T.StringType(), T.LongType()), True),
    T.StructField("point", T.StructType([T.StructField("x", T.DoubleType()),
                                         T.StructField("y", T.DoubleType())]), True),
    T.StructField("price", T.DecimalType(12, 2), True),
    T.StructField("day", T.DateType(), True),
    T.StructField("at", T.TimestampType(), True),
    T.StructField("raw", T.BinaryType(), True),
])


def test_nested_types_and_nulls_round_trip(spark: Any) -> None:
    rows = [(i, None if i % 7 == 0 else f"n{i}", [f"t{i}", None] if i % 3 else None,
             {"a": i} if i % 2 else None, (float(i), -float(i)) if i % 5 else None,
             Decimal(f"{i}.25"), dt.date(2024, 1, 1 + i % 28),
             dt.datetime(2024, 5, 1, 12, i % 60), bytes([i % 256]) * 3)
            for i in range(300)]
    df = spark.createDataFrame(rows, NESTED).repartition(3)
    t = spark_steward.cache(df)
    assert _sorted(t) == _sorted(df)
    assert t.schema == df.schema


def test_join_of_two_cached_tables_and_an_empty_one(spark: Any) -> None:
    left = spark_steward.cache(spark.range(0, 1000).withColumn("v", F.col("id") * 3))
    right = spark_steward.cache(spark.range(0, 1000, 2).withColumnRenamed("id", "rid"))
    expected = _sorted(spark.range(0, 1000).withColumn("v", F.col("id") * 3)
                       .join(spark.range(0, 1000, 2).withColumnRenamed("id", "rid"),
                             F.col("id") == F.col("rid")))
    assert _sorted(left.join(right, F.col("id") == F.col("rid"))) == expected

    empty = spark_steward.cache(spark.range(0, 100).filter("id < 0"))
    assert empty.count() == 0 and empty.collect() == []
    assert empty.is_materialized and empty.groupBy().count().first()[0] == 0


def test_a_table_cached_on_a_cached_table(spark: Any) -> None:
    counted = Counted(spark, rows=800)
    inner = spark_steward.cache(counted.df)
    outer = spark_steward.cache(inner.filter("k % 2 = 0").withColumn("t", F.col("s") + 1))
    assert outer.count() == 25
    assert inner.is_materialized and outer.is_materialized
    assert counted.value == counted.rows
    assert inner.count() == 50 and counted.value == counted.rows


def test_invalidate_deletes_the_files_and_the_next_use_recomputes_once(
        spark: Any, store: Any) -> None:
    counted = Counted(spark, rows=600)
    t = spark_steward.cache(counted.df)
    assert t.count() == 50
    folder = _files(store, t)[0].parent
    key = t.storage_key

    t.invalidate()
    assert not folder.exists(), "invalidate() deletes the files at once"
    assert store.read_entry(key) is None and not t.is_materialized
    assert counted.value == counted.rows

    assert t.count() == 50 and t.count() == 50
    assert counted.value == 2 * counted.rows, "materialized again, once"
    assert _files(store, t)[0].parent != folder, "a new attempt folder"


# -- fallback ------------------------------------------------------------------------------------


def _damage_delete(path: Path) -> None:
    path.unlink()


def _damage_truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _damage_rewrite(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    time.sleep(0.01)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_damage_delete, _damage_truncate, _damage_rewrite],
                         ids=["deleted", "truncated", "corrupted"])
def test_damaged_files_fall_back_to_recomputing(spark: Any, store: Any,
                                                caplog: pytest.LogCaptureFixture,
                                                damage: Callable[[Path], None]) -> None:
    counted = Counted(spark, rows=900, partitions=3)
    expected = _sorted(counted.df)
    counted.calls.add(-counted.value)
    t = spark_steward.cache(counted.df.repartition(3))
    assert _sorted(t) == expected
    first_key = t.storage_key
    damage(_files(store, t)[0])

    with caplog.at_level(logging.WARNING, logger="spark_steward"):
        assert _sorted(t.select("k", "s", "n")) == expected
    assert "recomputing it from its original plan" in caplog.text
    assert counted.value == 2 * counted.rows, "recomputed once"
    assert t.is_materialized and t.storage_key == first_key
    assert _sorted(t) == expected and counted.value == 2 * counted.rows


def test_executor_loss_after_materialization_recomputes_nothing(spark: Any) -> None:
    counted = Counted(spark, rows=3000, partitions=6)
    t = spark_steward.cache(counted.df)
    expected = _sorted(t)
    assert counted.value == counted.rows
    sc = spark.sparkContext
    before = executor_pids(sc)
    assert len(before) == 2, before
    os.kill(before[0], signal.SIGKILL)
    wait_for_executors(sc, exclude=before[0])

    assert _sorted(t.filter("k >= 0")) == expected
    assert counted.value == counted.rows, "no partition of the table was recomputed"


# -- budget, close, switches ---------------------------------------------------------------------


def test_max_bytes_evicts_unreferenced_tables_then_goes_uncached(
        spark: Any, store: Any, caplog: pytest.LogCaptureFixture) -> None:
    first = spark_steward.cache(spark.range(0, 20000).withColumn("v", F.rand(1)))
    first.count()
    size = first._steward_record.entry.bytes
    spark.conf.set("spark.steward.cache.max-bytes", str(int(size * 1.5)))
    try:
        held = spark_steward.cache(spark.range(0, 20000).withColumn("v", F.rand(2)))
        with caplog.at_level(logging.WARNING, logger="spark_steward"):
            held.count()
        assert "does not fit" in caplog.text, "the first is referenced: nothing to evict"
        assert not held.is_materialized and first.is_materialized

        key = first.storage_key
        del first
        import gc

        gc.collect()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spark_steward"):
            assert held.count() == 20000
        assert "evicting cached table" in caplog.text
        assert held.is_materialized
        assert store.read_entry(key) is None or \
            store.read_entry(key).state is TableState.MARKED_FOR_DELETION
    finally:
        spark.conf.unset("spark.steward.cache.max-bytes")


def test_close_releases_every_table_of_the_session(spark: Any, store: Any) -> None:
    tables = [spark_steward.cache(spark.range(0, 100 * (i + 1))) for i in range(3)]
    for t in tables:
        t.count()
    folders = [_files(store, t)[0].parent for t in tables]
    keys = [t.storage_key for t in tables]
    other = spark.newSession()
    kept = spark_steward.cache(other.range(0, 10))
    kept.count()

    assert spark_steward.close(spark) == 3
    for folder in folders:
        assert not folder.exists()
    assert all(store.read_entry(k) is None for k in keys)
    assert kept.is_materialized and store.read_entry(kept.storage_key) is not None
    assert tables[0].count() == 100, "used after close: computes the original plan"
    assert spark_steward.close(other) == 1


def test_streaming_dataframes_are_returned_unchanged(spark: Any) -> None:
    stream = spark.readStream.format("rate").load()
    assert spark_steward.cache(stream) is stream


def test_the_session_switch(spark: Any) -> None:
    spark.conf.set("spark.steward.enabled", "false")
    try:
        with pytest.raises(DisabledForSession):
            spark_steward.cache(spark.range(3))
    finally:
        spark.conf.unset("spark.steward.enabled")


def test_transparent_cache_persist_and_unpersist(spark: Any, store: Any) -> None:
    counted = Counted(spark, rows=700)
    expected = _sorted(counted.df)
    counted.calls.add(-counted.value)
    plain = counted.df.cache()
    assert plain is counted.df and getattr(plain, "_steward_record", None) is None
    plain.unpersist()

    spark.conf.set("spark.steward.cache.transparent", "true")
    try:
        counted2 = Counted(spark, rows=700)
        df = counted2.df
        assert df.persist() is df and df.is_cached
        assert _sorted(df) == expected and df.count() == 50
        assert counted2.value == counted2.rows
        assert isinstance(df, CachedTable) and spark_steward.cache(df) is df
        key = df.storage_key
        assert store.read_entry(key).state is TableState.READY
        assert df.unpersist() is df
        assert store.read_entry(key) is None and not df.is_cached
        assert not isinstance(df, CachedTable)
        assert _sorted(df) == expected and counted2.value == 2 * counted2.rows
    finally:
        spark.conf.unset("spark.steward.cache.transparent")


LEVELS = [StorageLevel.MEMORY_AND_DISK_DESER, StorageLevel.MEMORY_ONLY, StorageLevel.DISK_ONLY,
          StorageLevel.MEMORY_AND_DISK, StorageLevel.MEMORY_AND_DISK_2, StorageLevel.DISK_ONLY_3,
          StorageLevel(False, True, False, True, 2)]


def _levels(spark: Any, *, transparent: bool) -> list[str]:
    """``storageLevel`` after cache(), after each persist(level), after a second persist at
    another level and after unpersist: Spark's own answers (``transparent`` off, the ground
    truth) or spark-steward's."""
    spark.conf.set("spark.steward.cache.transparent", str(transparent).lower())
    seen = []
    try:
        calls: list[Callable[[Any], Any]] = [lambda df: df.cache()]
        calls += [lambda df, level=level: df.persist(level) for level in LEVELS]
        for call in calls:
            df = spark.range(10).selectExpr("id * 3 AS x")
            assert call(df) is df
            assert isinstance(df, CachedTable) is transparent
            seen.append(str(df.storageLevel))
            df.persist(StorageLevel.DISK_ONLY_2)   # already cached: the level stays
            seen.append(str(df.storageLevel))
            df.unpersist()
            seen.append(str(df.storageLevel))
    finally:
        spark.conf.unset("spark.steward.cache.transparent")
    return seen


def test_transparent_cache_reports_the_storage_level_spark_would(spark: Any) -> None:
    spark_says = _levels(spark, transparent=False)
    assert spark_says[0] == "Disk Memory Deserialized 1x Replicated"
    assert _levels(spark, transparent=True) == spark_says
