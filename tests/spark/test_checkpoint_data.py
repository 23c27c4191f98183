"""The checkpoint data path on a real local-cluster: executors write each partition into one
checksummed file (JVM only) and read them back; corruption fails the reading action, naming the
file. The hadoop_url rules at the end need no Spark."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_steward.errors import CheckpointError
from spark_steward.checkpoint.data import (DataFile, ensure_on_executors, hadoop_url,
                                                 read_dataframe, write_dataframe)
from spark_steward.kernel.jvm import java_message

BLOCK = 1 << 20


CODECS = {0: "none", 1: "zstd", 2: "lz4"}


def _round_trip(spark: Any, df: Any, folder: Path, codec: str = "zstd"
                ) -> tuple[list[DataFile], Any]:
    files = write_dataframe(df, folder.as_uri(), codec)
    return files, read_dataframe(spark, folder.as_uri(), files, df.schema.json())


def _unpack(codec: int, stored: bytes, raw: int) -> bytes:
    """A block's raw payload, unpacked by pyarrow's codecs (not ours): the format is standard."""
    if codec == 0:
        return stored
    name = {1: "zstd", 2: "lz4"}[codec]  # pyarrow's "lz4" is the LZ4 frame format
    return pa.Codec(name).decompress(stored, decompressed_size=raw).to_pybytes()


def _blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(raw payload length, rows, stored bytes) of every block of a format-2 file, checking the
    layout on the way."""
    assert data[:4] == b"SSCK"
    version, fields, codec = struct.unpack_from("<iii", data, 4)
    assert version == 2 and fields > 0 and codec in CODECS
    pos, out = 16, []
    while pos < len(data):
        length, rows, crc, raw = struct.unpack_from("<iiIi", data, pos)
        stored = data[pos + 16:pos + 16 + length]
        assert len(stored) == length and crc32c.crc32c(stored) == crc
        payload = _unpack(codec, stored, raw)
        assert len(payload) == raw
        at = 0
        for _ in range(rows):
            (size,) = struct.unpack_from("<i", payload, at)
            at += 4 + size
        assert at == raw, "rows fill the payload exactly"
        out.append((raw, rows, length))
        pos += 16 + length
    assert pos == len(data)
    return out


def _by_id(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (r["id"] is None, r["id"]))


def _partition_sizes(df: Any) -> list[int]:
    ids = [r[0] for r in df.select(F.spark_partition_id()).collect()]
    return [ids.count(p) for p in range(df.rdd.getNumPartitions())]


NESTED = T.StructType([
    T.StructField("id", T.LongType()),
    T.StructField("i", T.IntegerType()),
    T.StructField("flag", T.BooleanType()),
    T.StructField("d", T.DoubleType()),
    T.StructField("f", T.FloatType()),
    T.StructField("s", T.StringType()),
    T.StructField("small", T.DecimalType(10, 2)),
    T.StructField("big", T.DecimalType(38, 10)),
    T.StructField("day", T.DateType()),
    T.StructField("ts", T.TimestampType()),
    T.StructField("raw", T.BinaryType()),
    T.StructField("ints", T.ArrayType(T.IntegerType())),
    T.StructField("tags", T.MapType(T.StringType(), T.ArrayType(T.StringType()))),
    T.StructField("point", T.StructType([
        T.StructField("x", T.DoubleType()),
        T.StructField("inner", T.StructType([T.StructField("name", T.StringType()),
                                             T.StructField("when", T.DateType())]))])),
])


def _nested_row(i: int) -> tuple[Any, ...]:
    if i % 7 == 3:  # every column null
        return (i,) + (None,) * (len(NESTED.fields) - 1)
    return (i, i * 3 - 50, i % 2 == 0, i / 7, float(i) / 4, f"näme-{i}-" + "x" * (i % 40),
            Decimal(i) / 4, Decimal(f"{i}1234567890123456789.0123456789"),
            dt.date(2020, 1, 1) + dt.timedelta(days=i),
            dt.datetime(2021, 6, 1, 12, 30) + dt.timedelta(seconds=i * 37),
            bytes(range(i % 256))[: i % 50], [i, None, -i] if i % 3 else [],
            {"a": [str(i), None], "b": []} if i % 5 else {},
            (i * 0.5, (f"in-{i}", dt.date(1999, 12, 31))) if i % 4 else (None, None))


@pytest.mark.parametrize("codec", ["zstd", "lz4", "none"])
def test_round_trip_keeps_every_type_value_and_partition(spark: Any, tmp_path: Path,
                                                         codec: str) -> None:
    df = spark.createDataFrame([_nested_row(i) for i in range(300)], NESTED).repartition(3)
    files, back = _round_trip(spark, df, tmp_path / "data", codec)
    for f in files:
        data = (tmp_path / "data" / f.name).read_bytes()
        assert CODECS[struct.unpack_from("<i", data, 12)[0]] == codec
        assert sum(rows for _, rows, _ in _blocks(data)) == f.rows
    assert [f.partition for f in files] == [0, 1, 2]
    assert sum(f.rows for f in files) == 300
    assert back.schema == df.schema
    assert back.rdd.getNumPartitions() == 3
    assert _by_id(back.collect()) == _by_id(df.collect())
    # partition i of the restore is file i, row for row
    assert _partition_sizes(back) == [f.rows for f in files]


def test_records_match_the_file_bytes_and_blocks_stay_near_one_mib(spark: Any,
                                                                   tmp_path: Path) -> None:
    wide = spark.range(0, 3000, numPartitions=2).select(
        "id", F.repeat(F.lit("y"), 1000).alias("s"))  # ~1.5 MiB per partition
    giant = spark.range(0, 2, numPartitions=1).select(
        "id", F.repeat(F.lit("z"), (F.col("id") + 1) * 1_200_000).alias("s"))  # rows > 1 MiB
    df = wide.unionByName(giant)
    folder = tmp_path / "data"
    files, back = _round_trip(spark, df, folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f.name for f in files), \
        "no temporaries or side files stay behind"
    for f in files:
        data = (folder / f.name).read_bytes()
        assert f.name.startswith(f"part-{f.partition:05d}-")
        assert f.bytes == len(data)
        assert f.crc32c == format(crc32c.crc32c(data), "08x")
        blocks = _blocks(data)
        assert sum(rows for _, rows, _ in blocks) == f.rows
        assert all(raw <= BLOCK or rows == 1 for raw, rows, _ in blocks)
        assert all(stored < raw / 10 for raw, _, stored in blocks), "repeated text compresses"
        assert len(blocks) >= 2
    assert [rows for _, rows, _ in _blocks((folder / files[2].name).read_bytes())] == [1, 1]
    assert back.agg(F.sum(F.length("s")), F.count("*")).first() == \
        (3000 * 1000 + 3 * 1_200_000, 3002)
    assert back.filter(F.col("s").startswith("z")).select("id").orderBy("id") \
        .collect() == [(0,), (1,)]


def test_empty_partitions_still_write_a_file(spark: Any, tmp_path: Path) -> None:
    df = spark.range(0, 20, numPartitions=5).filter(F.col("id") < 6)  # partitions 2-4 empty
    files, back = _round_trip(spark, df, tmp_path / "data")
    assert [f.rows for f in files] == [4, 2, 0, 0, 0]
    empty = (tmp_path / "data" / files[4].name).read_bytes()
    assert len(empty) == 16 == files[4].bytes and _blocks(empty) == []
    assert sorted(back.collect()) == sorted(df.collect())
    assert _partition_sizes(back) == [4, 2, 0, 0, 0]


def test_empty_dataframes_with_and_without_partitions(spark: Any, tmp_path: Path) -> None:
    schema = "id long, s string"
    no_rows = spark.createDataFrame([], schema)
    files, back = _round_trip(spark, no_rows, tmp_path / "a")
    assert all(f.rows == 0 for f in files) and len(files) == no_rows.rdd.getNumPartitions()
    assert back.collect() == [] and back.schema == no_rows.schema

    no_partitions = spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)
    assert no_partitions.rdd.getNumPartitions() == 0
    files, back = _round_trip(spark, no_partitions, tmp_path / "b")
    assert files == []
    assert back.collect() == [] and back.count() == 0
    assert back.schema == no_partitions.schema
    assert back.rdd.getNumPartitions() == 0


@pytest.fixture
def written(spark: Any, tmp_path: Path) -> tuple[Path, list[DataFile], str]:
    df = spark.range(0, 40_000, numPartitions=2).select(
        "id", F.concat(F.lit("row-"), F.col("id").cast("string"), F.repeat(F.lit("p"), 60))
        .alias("s"))
    folder = tmp_path / "data"
    files = write_dataframe(df, folder.as_uri())
    assert all(len(_blocks((folder / f.name).read_bytes())) >= 2 for f in files)
    return folder, files, df.schema.json()


def _read_error(spark: Any, folder: Path, files: list[DataFile], schema: str,
                action: str = "collect") -> str:
    df = read_dataframe(spark, folder.as_uri(), files, schema)
    with pytest.raises(Exception) as info:
        df.limit(1).collect() if action == "limit" else df.collect()
    return str(info.value)


def test_a_flipped_byte_fails_the_read_naming_the_file_and_crc32c(
        spark: Any, written: tuple[Path, list[DataFile], str]) -> None:
    folder, files, schema = written
    path = folder / files[1].name
    raw = bytearray(path.read_bytes())
    raw[16 + 16 + _blocks(bytes(raw))[0][2] // 2] ^= 0x01  # inside the first block's payload
    path.write_bytes(bytes(raw))
    message = _read_error(spark, folder, files, schema)
    assert "spark-steward: checkpoint data" in message
    assert path.as_uri().replace("file:///", "file:/") in message.replace("file:///", "file:/")
    assert "block 0 crc32c" in message and "!= recorded" in message
    # not even one row of an unverified block comes out
    only_bad = [files[1]]
    assert "block 0 crc32c" in _read_error(spark, folder, only_bad, schema, action="limit")


def test_a_truncated_file_fails_the_read_naming_the_file(
        spark: Any, written: tuple[Path, list[DataFile], str]) -> None:
    folder, files, schema = written
    path = folder / files[0].name
    path.write_bytes(path.read_bytes()[: files[0].bytes - 1000])
    message = _read_error(spark, folder, files, schema)
    assert files[0].name in message and "short file" in message


def test_a_missing_file_or_wrong_record_fails_the_read(
        spark: Any, written: tuple[Path, list[DataFile], str]) -> None:
    folder, files, schema = written
    (folder / files[0].name).unlink()
    message = _read_error(spark, folder, files, schema)
    assert files[0].name in message and "missing file" in message

    wrong_crc = [DataFile(f.partition, f.name, f.rows, f.bytes, "00000000") for f in files[1:]]
    assert "file crc32c" in _read_error(spark, folder, wrong_crc, schema)
    wrong_rows = [DataFile(f.partition, f.name, f.rows + 1, f.bytes, f.crc32c) for f in files[1:]]
    assert "rows, recorded" in _read_error(spark, folder, wrong_rows, schema)
    with pytest.raises(CheckpointError, match="not a plain name"):
        read_dataframe(spark, folder.as_uri(), [DataFile(0, "a b", 0, 12, "0")], schema)


def _v1_file(values: list[list[int]]) -> bytes:
    """A format-1 file (what versions before compression wrote) of rows of one long column:
    each row an UnsafeRow of a null bitset word and the value."""
    out = bytearray(b"SSCK" + struct.pack("<ii", 1, 1))
    for block in values:
        payload = b"".join(struct.pack("<i", 16) + struct.pack("<qq", 0, v) for v in block)
        out += struct.pack("<iiI", len(payload), len(block), crc32c.crc32c(payload)) + payload
    return bytes(out)


def test_files_of_format_1_written_before_compression_still_restore(spark: Any,
                                                                    tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    parts = [[[1, 2, 3], [4]], [], [[5, 6]]]
    files = []
    for i, blocks in enumerate(parts):
        data = _v1_file(blocks)
        (folder / f"part-{i:05d}-old-0").write_bytes(data)
        files.append(DataFile(i, f"part-{i:05d}-old-0", sum(map(len, blocks)), len(data),
                              format(crc32c.crc32c(data), "08x")))
    schema = T.StructType([T.StructField("id", T.LongType())]).json()
    back = read_dataframe(spark, folder.as_uri(), files, schema)
    assert _partition_sizes(back) == [4, 0, 2]
    assert sorted(r.id for r in back.collect()) == [1, 2, 3, 4, 5, 6]


def _rewrite_block(data: bytes, *, raw: int | None = None, stored: bytes | None = None,
                   codec: int | None = None) -> bytes:
    """``data`` with its first block's raw length, stored bytes (crc32c recomputed, so only the
    packing is wrong) or file codec replaced."""
    length, rows, _, old_raw = struct.unpack_from("<iiIi", data, 16)
    body = stored if stored is not None else data[32:32 + length]
    head = data[:12] + struct.pack("<i", codec if codec is not None else
                                   struct.unpack_from("<i", data, 12)[0])
    block = struct.pack("<iiIi", len(body), rows, crc32c.crc32c(body),
                        old_raw if raw is None else raw) + body
    return head + block + data[32 + length:]


@pytest.mark.parametrize("case", ["huge-claim", "short-claim", "garbage", "unknown-codec"])
def test_a_lying_compressed_block_fails_the_read_clearly(
        spark: Any, written: tuple[Path, list[DataFile], str], case: str) -> None:
    """A neighbour's block whose checksums agree but whose packing lies: a claimed raw length of
    2 GiB is refused before anything is allocated, a wrong one or garbage is named corrupt."""
    folder, files, schema = written
    path = folder / files[1].name
    data = path.read_bytes()
    bad = {"huge-claim": lambda: _rewrite_block(data, raw=2**31 - 1),
           "short-claim": lambda: _rewrite_block(data, raw=1000),
           "garbage": lambda: _rewrite_block(data, stored=bytes(range(256)) * 40),
           "unknown-codec": lambda: _rewrite_block(data, codec=7)}[case]()
    path.write_bytes(bad)
    record = DataFile(files[1].partition, files[1].name, files[1].rows, len(bad),
                      format(crc32c.crc32c(bad), "08x"))
    message = _read_error(spark, folder, [record], schema)
    assert "spark-steward: checkpoint data" in message and files[1].name in message
    expected = {"huge-claim": "claims", "short-claim": "block 0", "garbage": "block 0",
                "unknown-codec": "codec 7"}[case]
    assert expected in message, message
    assert "OutOfMemory" not in message


def test_an_unknown_codec_is_refused_before_any_task(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="codec 'gzip' is not one of zstd, lz4, none"):
        write_dataframe(spark.range(3), (tmp_path / "data").as_uri(), "gzip")
    assert not (tmp_path / "data").exists()


def test_a_failed_write_is_a_checkpoint_error_with_the_java_message(spark: Any) -> None:
    df = spark.range(0, 10, numPartitions=2)
    with pytest.raises(CheckpointError) as info:
        write_dataframe(df, "nosuchfs://bucket/data")
    message = str(info.value)
    assert message.startswith("writing checkpoint data to nosuchfs://bucket/data failed: ")
    assert "nosuchfs" in message.split("failed: ", 1)[1] and "\n" not in message


def test_ensure_on_executors_is_idempotent(spark: Any) -> None:
    sc = spark.sparkContext
    ensure_on_executors(sc)
    jars = str(sc._jsc.sc().listJars().mkString("\n"))
    ensure_on_executors(sc)
    assert str(sc._jsc.sc().listJars().mkString("\n")) == jars


# -- no Spark needed ------------------------------------------------------------------------------

@pytest.mark.parametrize("storage, expected", [
    ("file:///data/ck", "file:///data/ck"),
    ("s3://bucket/ck/1", "s3a://bucket/ck/1"),
    ("s3a://bucket/ck", "s3a://bucket/ck"),
    ("gcs://bucket/ck", "gs://bucket/ck"),
    ("gs://bucket/ck", "gs://bucket/ck"),
    ("hdfs://nn:8020/ck", "hdfs://nn:8020/ck"),
    ("abfss://c@acct.dfs.core.windows.net/ck", "abfss://c@acct.dfs.core.windows.net/ck"),
])
def test_hadoop_url_maps_fsspec_urls_to_what_executors_open(storage: str, expected: str) -> None:
    assert hadoop_url(storage) == expected


def test_hadoop_url_turns_a_plain_path_into_a_file_url(tmp_path: Path) -> None:
    assert hadoop_url(str(tmp_path / "ck")) == (tmp_path / "ck").as_uri()


@pytest.mark.parametrize("storage", ["memory://ck/1", "https://host/ck",
                                     "simplecache::s3://bucket/ck"])
def test_hadoop_url_rejects_storage_executors_cannot_write(storage: str) -> None:
    with pytest.raises(CheckpointError, match="needs a filesystem Spark's executors can write"):
        hadoop_url(storage)
    with pytest.raises(CheckpointError, match=storage.split("::")[-1].split("/")[0]):
        hadoop_url(storage)


def test_java_message_prefers_the_spark_steward_line() -> None:
    class FakeJava:
        def __init__(self, text: str, cause: Any = None) -> None:
            self.text, self.cause = text, cause

        def toString(self) -> str:  # noqa: N802 - the Java name
            return self.text

        def getCause(self) -> Any:  # noqa: N802
            return self.cause

    class Raised(Exception):
        java_exception = FakeJava(
            "org.apache.spark.SparkException: Job aborted: Lost task 0.1: java.io.IOException: "
            "spark-steward: checkpoint data file file:/x/part-00000: block 2 crc32c 1 != 2\n"
            "\tat somewhere")

    assert java_message(Raised()) == \
        "spark-steward: checkpoint data file file:/x/part-00000: block 2 crc32c 1 != 2"
    Raised.java_exception = FakeJava("java.lang.IllegalStateException: boom\n\tat x",
                                     FakeJava("java.lang.Error: root"))
    assert java_message(Raised()) == "java.lang.IllegalStateException: boom"
