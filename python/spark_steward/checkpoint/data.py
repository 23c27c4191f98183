"""The data path of the checkpoint store: a DataFrame's partitions written from the executors
into checksummed files, and read back as a DataFrame.

Everything runs in the JVM (``io.sparksteward.shim.checkpoint.CheckpointData``): one Spark job
whose tasks each write their partition to one file, with no Python worker in the way. This module
passes URLs, names and the JSON records to the JVM (through :mod:`spark_steward.kernel.jvm`) and
turns JVM failures into :class:`~spark_steward.errors.CheckpointError`.

File format 2 (integers little-endian): a 16-byte header ``"SSCK" | int32 version (2) | int32
fields | int32 codec (0 none, 1 zstd, 2 LZ4 frame)``, then blocks ``int32 stored length | int32
rows | int32 crc32c(stored) | int32 raw length | stored``, the stored bytes being the packed raw
payload of at most ~1 MiB of rows, each row ``int32 length | UnsafeRow bytes``. Format 1 (before
compression: 12-byte headers, no codec, no raw length) is read too. Readers verify each block's
crc32c before unpacking it, and the row count, size and whole-file crc32c at its end.

Every partition writes exactly one file, also an empty one (16 bytes, 0 rows), so a restore
has as many partitions as the DataFrame had. Task attempts that did not count (retries,
speculation) may leave files ``part-<partition>-<tag>-<attempt>`` and hidden temporaries
``.part-*.tmp`` in the folder: only the returned :class:`DataFile` records count, and the caller
deletes the rest.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from spark_steward.checkpoint.errors import CheckpointError
from spark_steward.kernel import jvm
from spark_steward.kernel.jvm import ensure_on_executors

__all__ = ["CODECS", "DataFile", "check_codec", "ensure_on_executors", "hadoop_url",
           "read_dataframe", "write_dataframe"]

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class DataFile:
    """One written partition: what a reader verifies the file against."""

    partition: int
    name: str  # file name inside the data folder
    rows: int
    bytes: int
    crc32c: str  # crc32c of the whole file, 8 lower-case hex digits


def hadoop_url(storage_url: str) -> str:
    """The Hadoop URL executors open for ``storage_url``; CheckpointError when there is none."""
    return jvm.hadoop_url(storage_url, "checkpoint data", CheckpointError)


#: What ``spark.steward.checkpoints.compression`` may name; the JVM knows the same three.
CODECS = ("zstd", "lz4", "none")


def check_codec(codec: str) -> str:
    """``codec`` if the JVM writes it; CheckpointError naming it otherwise."""
    if codec not in CODECS:
        raise CheckpointError(f"checkpoint compression codec {codec!r} is not one of "
                              f"{', '.join(CODECS)}")
    return codec


# -- the data path ----------------------------------------------------------------------------

def write_dataframe(df: "DataFrame", data_url: str, codec: str = "zstd") -> list[DataFile]:
    """Writes every partition of ``df`` into the folder ``data_url`` (a Hadoop URL, see
    :func:`hadoop_url`) in one Spark job, each block packed with ``codec`` (``zstd``, ``lz4`` or
    ``none``); returns one record per partition, by partition.

    Files not named in the result (failed or speculative attempts) may be in the folder."""
    check_codec(codec)
    if not jvm.is_classic(df):
        raise CheckpointError("checkpoint data needs a classic (non Spark Connect) DataFrame")
    sc = df.sparkSession.sparkContext
    ensure_on_executors(sc)
    tag = uuid.uuid4().hex[:12]
    out = jvm.call(sc, "writeCheckpointData", jvm.dataframe_handle(df), data_url, tag, codec,
                   error=CheckpointError, what=f"writing checkpoint data to {data_url} failed")
    files = [DataFile(partition=int(r["partition"]), name=str(r["name"]), rows=int(r["rows"]),
                      bytes=int(r["bytes"]), crc32c=str(r["crc32c"]))
             for r in json.loads(str(out))]
    return sorted(files, key=lambda f: f.partition)


def read_dataframe(spark: "SparkSession", data_url: str, files: Sequence[DataFile],
                   schema_json: str) -> "DataFrame":
    """A DataFrame over ``files`` in the folder ``data_url``: one partition per file, in
    partition order. Lazy: a missing, short or corrupt file fails the action that reads it,
    with an IOException naming the file URL and what failed."""
    ordered = sorted(files, key=lambda f: f.partition)
    lines = []
    for f in ordered:
        if not f.name or any(c.isspace() for c in f.name) or "/" in f.name:
            raise CheckpointError(f"checkpoint data file name {f.name!r} is not a plain name")
        try:
            crc = int(f.crc32c, 16)
        except (TypeError, ValueError):
            crc = -1
        if not 0 <= crc <= 0xFFFFFFFF:
            raise CheckpointError(f"checkpoint data file {f.name}: crc32c {f.crc32c!r} is not "
                                  "8 hex digits")
        lines.append(f"{f.name} {int(f.bytes)} {int(f.rows)} {crc:x}")
    listing = "\n".join(lines)
    if not isinstance(schema_json, str):  # a StructType also works
        schema_json = schema_json.json()
    sc = spark.sparkContext
    ensure_on_executors(sc)
    jdf = jvm.call(sc, "readCheckpointData", jvm.session_handle(spark), data_url, listing,
                   schema_json, error=CheckpointError,
                   what=f"reading checkpoint data from {data_url} failed")
    return jvm.to_dataframe(jdf, spark)
