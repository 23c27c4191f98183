"""Run by spark-submit of one pyspark line for tests/compat/test_spark_lines.py: every capability
once, in one application, enabled by the conf flags alone. Each capability's section records
what it saw, or the error that stopped it, so one broken capability hides none of the others.

    smoke_job.py OUT_JSON WORK_DIR

Writes a JSON report to OUT_JSON after ``spark.stop()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pyspark
from pyspark import SparkFiles
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward

ROWS = 1200


@contextmanager
def section(report: dict[str, Any], name: str) -> Iterator[dict[str, Any]]:
    """``report[name]``: what the block recorded, plus ``error`` (one line and the trace) when it
    raised."""
    found: dict[str, Any] = {}
    report[name] = found
    started = time.monotonic()
    try:
        yield found
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        found["error"] = f"{type(exc).__name__}: {first_line}"
        found["trace"] = traceback.format_exc()[-4000:]
    found["seconds"] = round(time.monotonic() - started, 2)


def files_under(folder: Path) -> list[str] | None:
    if not folder.exists():
        return None
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


# -- blobs --------------------------------------------------------------------------------------

def blobs(spark: SparkSession, work: Path, local_dir: Path, found: dict[str, Any]) -> None:
    sc = spark.sparkContext
    model = work / "model.bin"
    model.write_bytes(b"weights-" * 1000)
    ref = spark_steward.blobs.put(model)
    small = spark_steward.blobs.put(b"lookup-table")

    # First Python tasks of the application: a UDF's command must carry the executor context
    # by itself (3.5's pyspark.sql.udf pickles it through its own copy of the pickler).
    @F.udf("string")
    def lookup(_: int) -> str:
        import spark_steward as steward

        return steward.blobs.read_bytes(small).decode()

    found["udf_rows"] = sorted({r[0] for r in spark.range(0, 4, 1, 4).select(lookup("id"))
                                .collect()})

    def read_blobs(index: int, _: Any) -> Iterator[Any]:
        import spark_steward as steward

        path = steward.blobs.get(ref)
        yield index, len(open(path, "rb").read()), steward.blobs.read_bytes(small).decode()

    rows = sc.parallelize(range(4), 4).mapPartitionsWithIndex(read_blobs).collect()
    found["blob_rows"] = sorted(rows)

    vocab = work / "vocab.txt"
    vocab.write_text("hello\n")
    with zipfile.ZipFile(work / "tables.zip", "w") as zf:
        zf.writestr("t/a.csv", "1,2\n")
    sc.addFile(str(vocab))
    sc.addArchive(str(work / "tables.zip"))

    def read_files(_: Any) -> tuple[str, str, str]:
        from pyspark import SparkFiles as Files

        path = Files.get("vocab.txt")
        with open(path) as v, open(os.path.join(Files.get("tables.zip"), "t", "a.csv")) as t:
            return path, v.read(), t.read()

    files = sc.parallelize(range(4), 4).map(read_files).collect()
    found["file_contents"] = sorted({(v, t) for _, v, t in files})
    found["file_paths_in_local_dir"] = all(p.startswith(str(local_dir)) for p, _, _ in files)
    found["driver_file"] = Path(SparkFiles.get("vocab.txt")).read_text()
    found["listed"] = len(spark_steward.blobs.ls())


# -- checkpoints ----------------------------------------------------------------------------------

def checkpoints(spark: SparkSession, work: Path, found: dict[str, Any]) -> None:
    from spark_steward.checkpoint import metadata as layout
    from spark_steward.checkpoint.service import CheckpointService

    runtime = spark_steward.runtime(spark)
    series = "compat-smoke"
    cp = spark_steward.checkpoints(series, retained=1)
    df = spark.range(0, 10000, numPartitions=4).withColumn("y", F.col("id") * 3)
    first = cp.save(df)
    second = cp.save(df.where("id % 2 = 0"))
    restored = cp.restore(second)
    found["ids"] = [first, second]
    found["restored"] = list(restored.agg(F.count("*"), F.sum("y")).first())
    store = runtime.service(CheckpointService).require_store()
    found["cleaner_idle"] = store.cleaner.wait_idle(30.0)
    found["states"] = [[c.id, c.state] for c in cp.ls()]
    merged = Path(runtime.storage.path(f"{layout.MERGED}/{series}"))
    found["merged_files"] = files_under(merged)

    # Spark's own reliable checkpoints, owned by spark-steward: gone after spark.stop().
    spark.sparkContext.setCheckpointDir(str(work / "spark-checkpoints"))
    eager = df.checkpoint()
    rdd = spark.sparkContext.parallelize(range(100), 2).map(lambda x: x * x)
    rdd.checkpoint()
    found["spark_checkpoint"] = [eager.count(), rdd.sum(), rdd.isCheckpointed()]


# -- cached tables --------------------------------------------------------------------------------

def cached_tables(spark: SparkSession, found: dict[str, Any]) -> None:
    from spark_steward.tables.service import TableService

    store = spark_steward.runtime(spark).service(TableService).store
    calls = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def doubled(x: int) -> int:
        calls.add(1)
        return x * 2

    df = (spark.range(0, ROWS, 1, 3).withColumn("y", doubled("id"))
          .groupBy((F.col("id") % 30).alias("k")).agg(F.sum("y").alias("s")))
    t = spark_steward.cache(df)
    found["type"] = type(t).__name__
    expected = sorted(tuple(r) for r in t.collect())
    found["first"] = [len(expected), t.count(), calls.value]        # materialized once
    t.invalidate()
    found["after_invalidate"] = [t.count(), calls.value]             # computed again, once

    entry = t._steward_record.entry
    folder = Path(store.storage.path(store.data_rel(entry)))
    parquet = sorted(p for p in folder.iterdir() if p.name.endswith(".parquet"))
    parquet[0].unlink()                                              # damaged: recompute
    found["after_damage"] = [sorted(tuple(r) for r in t.collect()) == expected, calls.value]
    # a shared table gets a shared key on every line (the shim's identity and the Python code's)
    shared = spark_steward.cache(spark.range(0, ROWS, 1, 3).withColumn("y", doubled("id")),
                                 shared=True)
    found["shared"] = [shared.count(), (shared.storage_key or "")[:2]]
    found["closed"] = spark_steward.close(spark)
    found["folder_after_close"] = folder.exists()


# -- local state --------------------------------------------------------------------------------

def local_state(spark: SparkSession, found: dict[str, Any]) -> None:
    def use_state(index: int, _: Any) -> Iterator[Any]:
        import spark_steward.local

        store = spark_steward.local.state("compat")
        key = f"k{index}"
        value = b"value-%d" % index
        store.put(key, value)
        read = store.get(key)
        path = store.path(key)
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0xFF                                 # one corrupted byte
        with open(path, "wb") as f:
            f.write(data)
        yield index, read == value, store.get(key), os.path.basename(os.getcwd())

    rows = spark.sparkContext.parallelize(range(4), 4).mapPartitionsWithIndex(use_state).collect()
    found["rows"] = [[i, same, after] for i, same, after, _ in sorted(rows)]
    found["executors"] = sorted({executor for *_, executor in rows})


# -- application records --------------------------------------------------------------------------

# -- streaming checkpoint locations ---------------------------------------------------------------

def streams(spark: SparkSession, work: Path, found: dict[str, Any]) -> None:
    import time
    import uuid

    from spark_steward.streams.service import StreamService

    runtime = spark_steward.runtime(spark)
    service = runtime.service(StreamService)
    session = spark.newSession()
    for key, value in {"spark.sql.shuffle.partitions": "4",
                       "spark.sql.streaming.minBatchesToRetain": "2",
                       "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
                       "spark.sql.streaming.stateStore.maintenanceInterval": "300ms"}.items():
        session.conf.set(key, value)
    found["manager"] = session.conf.get("spark.sql.streaming.checkpointFileManagerClass")
    location = work / "stream"
    rate = session.readStream.format("rate").option("rowsPerSecond", 100).load()
    query = (rate.groupBy((rate.value % 4).alias("k")).count().writeStream.format("memory")
             .queryName("compat_counts").outputMode("complete")
             .trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(location)).start())
    deadline = time.monotonic() + 120
    while (query.lastProgress is None or query.lastProgress["batchId"] < 6) \
            and time.monotonic() < deadline and query.exception() is None:
        time.sleep(0.2)
    runtime.flush_events()
    found["running"] = [[s.record.query_id == str(query.id), s.state.value]
                        for s in spark_steward.streams.ls()]
    temp = location / "offsets" / f".99.{uuid.uuid4()}.tmp"
    temp.write_text("a write cut short")
    query.stop()
    runtime.flush_events()
    assert service.cleaner is not None and service.store is not None
    found["cleaner_idle"] = service.cleaner.wait_idle(30.0)
    found["stopped"] = [s.state.value for s in spark_steward.streams.ls()]
    found["temp_swept"] = not temp.exists()
    found["offsets_kept"] = len(list((location / "offsets").iterdir()))
    # Packed (FLIP-306), then restarted from the packs: this line's manager serves them to the
    # driver's metadata logs and the executors' state stores.
    from spark_steward.streams.location import Location
    from spark_steward.streams.packer import Packer

    before = session.sql("select sum(`count`) from compat_counts").collect()[0][0]
    packer = Packer(Location(f"file:{location}"), keep=0, grace=3.0, max_member=1 << 20)
    first = packer.cycle()
    time.sleep(3.1)  # the grace: longer than a JVM caches its view of the packs
    second = packer.cycle()
    found["packed"] = [first.packed > 0, second.removed > 0]
    query = (rate.groupBy((rate.value % 4).alias("k")).count().writeStream.format("memory")
             .queryName("compat_counts_packed").outputMode("complete")
             .trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(location)).start())
    last = query.lastProgress
    deadline = time.monotonic() + 120
    while (query.lastProgress is None or query.lastProgress["batchId"] < 10) \
            and time.monotonic() < deadline and query.exception() is None:
        time.sleep(0.2)
    after = session.sql("select sum(`count`) from compat_counts_packed").collect()[0][0]
    found["restarted_from_packs"] = [query.exception() is None, last is None,
                                     after is not None and after > before]
    query.stop()
    runtime.flush_events()
    service.cleaner.wait_idle(30.0)
    service.store.drop_grace = 0.0
    found["dropped_files"] = spark_steward.streams.drop("compat_counts_packed").files
    found["location_after_drop"] = location.exists()


def status(storage_url: str, app_id: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                          storage_url, "--json"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"spark-steward status exited {out.returncode}: {out.stderr[-500:]}")
    apps = {a["app_id"]: a for a in json.loads(out.stdout)["applications"]}
    return apps[app_id]


def main() -> None:
    out, work = sys.argv[1], Path(sys.argv[2])
    spark = SparkSession.builder.appName("compat-smoke").getOrCreate()
    sc = spark.sparkContext
    conf = sc.getConf()
    local_dir = Path(conf.get("spark.steward.local.dir"))
    storage_url = conf.get("spark.steward.storage.dir")
    report: dict[str, Any] = {
        "app_id": sc.applicationId, "spark_version": sc.version,
        "pyspark_version": pyspark.__version__, "pyspark_file": pyspark.__file__,
        "local_folder": str(local_dir / sc.applicationId),
    }
    with section(report, "attach") as found:
        found["enabled"] = spark_steward.is_enabled(spark)
        found["plugin"] = spark_steward.runtime(spark).bridge.from_plugin
    with section(report, "blobs") as found:
        blobs(spark, work, local_dir, found)
    with section(report, "checkpoints") as found:
        checkpoints(spark, work, found)
    with section(report, "cached_tables") as found:
        cached_tables(spark, found)
    with section(report, "local_state") as found:
        local_state(spark, found)
    with section(report, "streams") as found:
        streams(spark, work, found)
    with section(report, "records") as found:
        record = status(storage_url, sc.applicationId)
        found["running"] = [record["state"], record["name"], record["pid"] == os.getpid()]
    folder = local_dir / sc.applicationId
    report["local_folder_before_stop"] = folder.is_dir()
    spark.stop()
    report["local_folder_after_stop"] = folder.exists()
    with open(out + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
