"""Host-local replicas of cached tables on the shared local-cluster: the executors' JVMs copy
each file they read into the working dir with a manifest record the Python layer verifies,
later reads are served from the replica (proved by damaging the storage dir's copy), and a
damaged replica is detected and fetched again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

import spark_steward
from spark_steward.local.working_dir import WorkingDir
from tests.spark.conftest import LOCAL_DIR, STORAGE_DIR

ROWS = 6000
TOTAL = ROWS * (ROWS - 1) // 2


@pytest.fixture
def replicas_on(spark: Any) -> Iterator[None]:
    # The shared storage dir is a local filesystem, where `auto` keeps replicas off.
    spark.conf.set("spark.steward.cache.host-replicas", "true")
    yield
    spark.conf.unset("spark.steward.cache.host-replicas")
    spark_steward.close(spark)


def _flip(path: Path, *, keep_mtime: bool = False) -> bytes:
    """Damages ``path`` in place (same size, so only a checksum can tell); returns the original.
    ``keep_mtime`` models bit rot rather than a rewrite."""
    before = path.stat()
    original = path.read_bytes()
    damaged = bytearray(original)
    for i in range(64, len(damaged) - 64):
        damaged[i] ^= 0x5A
    path.write_bytes(bytes(damaged))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return original


def _table(spark: Any) -> Any:
    df = spark.range(0, ROWS, numPartitions=3).selectExpr("id", "repeat('r', 40) AS pad")
    return spark_steward.cache(df)


def test_reads_are_served_from_verified_host_local_replicas(spark: Any,
                                                            replicas_on: None) -> None:
    app = spark.sparkContext.applicationId
    table = _table(spark)
    assert table.selectExpr("sum(id)").collect()[0][0] == TOTAL
    work = WorkingDir(LOCAL_DIR / app, app)
    records = [r for r in work.records() if r.capability == "tables"]
    replicas = sorted(work.path_of(r.file) for r in records)
    assert len(replicas) == 3 and all(p.name.endswith(".parquet") for p in replicas)
    # The JVM's records are the Python layer's: it verifies their crc32c itself.
    assert all(work.lookup(r.entry) is not None for r in records)
    remote = [STORAGE_DIR / p.relative_to(LOCAL_DIR / app / "table-replicas")
              for p in replicas]
    assert all(r.read_bytes() == p.read_bytes() for r, p in zip(remote, replicas))

    times = [r.stat() for r in remote]
    originals = [_flip(r, keep_mtime=True) for r in remote]
    try:
        # Damaged in the storage dir, same sizes: only reads served by the replicas are right.
        assert table.selectExpr("sum(id)").collect()[0][0] == TOTAL
    finally:
        for r, original, st in zip(remote, originals, times):
            r.write_bytes(original)
            os.utime(r, ns=(st.st_atime_ns, st.st_mtime_ns))

    _flip(replicas[0])
    assert table.selectExpr("sum(id)").collect()[0][0] == TOTAL
    assert replicas[0].read_bytes() == remote[0].read_bytes(), "fetched again"
    assert work.lookup(records[0].entry) is not None


def test_replicas_are_off_on_local_storage_by_default(spark: Any) -> None:
    app = spark.sparkContext.applicationId
    table = _table(spark)
    try:
        before = {r.entry for r in WorkingDir(LOCAL_DIR / app, app).records()}
        assert table.selectExpr("sum(id)").collect()[0][0] == TOTAL
        after = {r.entry for r in WorkingDir(LOCAL_DIR / app, app).records()}
        assert after == before
    finally:
        spark_steward.close(spark)
