"""The blob service on a real local-cluster: executor caches, HA and server paths, scopes,
transient payloads, corruption and job-driven cleanup.

The shared session sets ``spark.steward.blob.cache.same-host-link=false``, so executors fetch
as they would on another host: from the HA store (the storage dir), else from the driver.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import crc32c
import pytest
from pyspark import InheritableThread

import spark_steward
from spark_steward.blob.keys import BlobRef
from spark_steward.blob.service import BlobService


@pytest.fixture(scope="module")
def blobs(runtime: Any) -> Any:
    return runtime.service(BlobService)


def _fetch_report(ref: BlobRef) -> Any:
    def task(it: Iterator[Any]) -> Iterator[tuple[int, int, int, dict[str, int]]]:
        import crc32c as c

        import spark_steward
        from spark_steward.blob.executor import executor_blobs

        cache = executor_blobs().cache
        before = Counter(cache.stats)
        path = spark_steward.blobs.get(ref)
        data = Path(path).read_bytes()
        delta = Counter(cache.stats)
        delta.subtract(before)
        yield (os.getpid(), c.crc32c(data), len(data), dict(+delta))

    return task


def _local_cache_file(runtime: Any, ref: BlobRef) -> Path:
    return (Path(runtime.context.local_dir) / runtime.app_id / "blob-cache" / ref.scope
            / ref.key.digest)


def _ha_file(runtime: Any, ref: BlobRef) -> Path:
    return Path(runtime.storage.path(f"apps/{runtime.app_id}/blobs/{ref.scope}/{ref.key}"))


def _driver_file(runtime: Any, ref: BlobRef) -> Path:
    return Path(runtime.context.local_dir) / runtime.app_id / "blobs" / ref.scope / ref.key.digest


def _transfers(rows: list[tuple[int, int, int, dict[str, int]]]) -> Counter[str]:
    """Transfers per source over all tasks (each row holds its task's own delta)."""
    total: Counter[str] = Counter()
    for _, _, _, delta in rows:
        total.update({k: v for k, v in delta.items() if k in ("ha", "server", "linked", "peers")})
    return total


def test_many_tasks_racing_for_one_blob_download_it_once_per_host(spark: Any, runtime: Any,
                                                                    tmp_path: Path) -> None:
    data = os.urandom(8 << 20)
    source = tmp_path / "model.bin"
    source.write_bytes(data)
    ref = spark_steward.blobs.put(source)
    assert ref.size == len(data) and ref.name == "model.bin"
    assert _ha_file(runtime, ref).read_bytes() == data, "put returns only once HA has it"
    rows = spark.sparkContext.parallelize(range(16), 16).mapPartitions(_fetch_report(ref)) \
        .collect()
    assert {(r[1], r[2]) for r in rows} == {(crc32c.crc32c(data), len(data))}
    # Both executors share the host's cache directory: one transfer for all of them.
    assert len({r[0] for r in rows}) >= 2
    assert sum(_transfers(rows).values()) == 1


def test_ha_copy_missing_falls_back_to_the_driver_server(spark: Any, runtime: Any,
                                                          blobs: Any) -> None:
    """Also test_submit_files' case of Spark's network crypto off (this session's): the
    executors fetch from the driver's server in the clear, no certificate pinned, and none
    fails to authenticate."""
    assert spark.sparkContext.getConf().get("spark.network.crypto.enabled", "false") == "false"
    assert not runtime.context.server_cert
    data = os.urandom(3 << 20)
    ref = spark_steward.blobs.put(data)
    _ha_file(runtime, ref).unlink()
    served, failures = blobs.server.stats.blobs_served, blobs.server.stats.auth_failures
    rows = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_fetch_report(ref)).collect()
    assert {(r[1], r[2]) for r in rows} == {(crc32c.crc32c(data), len(data))}
    assert blobs.server.stats.blobs_served == served + 1
    assert blobs.server.stats.auth_failures == failures


def test_server_gone_falls_back_to_the_ha_store(spark: Any, runtime: Any, blobs: Any) -> None:
    from spark_steward.blob.server import BlobServer

    data = os.urandom(1 << 20)
    ref = spark_steward.blobs.put(data)
    old = blobs.server
    old.close()
    try:
        rows = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_fetch_report(ref)) \
            .collect()
        assert {(r[1], r[2]) for r in rows} == {(crc32c.crc32c(data), len(data))}
        assert _transfers(rows)["ha"] >= 1
    finally:
        blobs.server = BlobServer(host=runtime.context.driver_host,
                                  port=runtime.context.server_port,
                                  secret=runtime.context.auth_token, locate=blobs.depot.locate,
                                  on_message=blobs.depot.handle_message)
        blobs.server.start()


def test_corrupted_cache_copy_is_detected_and_fetched_again(spark: Any, runtime: Any) -> None:
    data = os.urandom(2 << 20)
    ref = spark_steward.blobs.put(data)
    sc = spark.sparkContext
    sc.parallelize(range(4), 4).mapPartitions(_fetch_report(ref)).collect()
    cached = _local_cache_file(runtime, ref)
    raw = bytearray(cached.read_bytes())
    raw[12345] ^= 0xFF
    cached.write_bytes(bytes(raw))  # in place: same name, new bytes
    rows = sc.parallelize(range(4), 4).mapPartitions(_fetch_report(ref)).collect()
    assert {(r[1], r[2]) for r in rows} == {(crc32c.crc32c(data), len(data))}
    assert cached.read_bytes() == data


def test_corrupted_driver_copy_is_restored_from_ha(runtime: Any, blobs: Any) -> None:
    data = os.urandom(1 << 20)
    ref = spark_steward.blobs.put(data)
    local = _driver_file(runtime, ref)
    local.write_bytes(b"x" * len(data))
    located = blobs.depot.locate(ref.key, ref.scope)
    with located.file as file:
        assert file.read() == data


def test_transient_blob_is_deleted_after_its_receivers_succeed(spark: Any, runtime: Any,
                                                                blobs: Any) -> None:
    payload = {"weights": list(range(50_000))}
    handle = spark_steward.blobs.offload(payload, receivers=4)
    ref = handle.ref
    assert _ha_file(runtime, ref).exists()
    sums = spark.sparkContext.parallelize(range(4), 4) \
        .map(lambda _: sum(handle.load()["weights"])).collect()
    assert sums == [sum(payload["weights"])] * 4
    runtime.flush_events()
    assert not blobs.depot.ledger.is_tracked(ref.scope, ref.key.digest)
    assert not _driver_file(runtime, ref).exists()
    assert not _ha_file(runtime, ref).exists()


def test_transient_blob_waits_while_receivers_are_missing(spark: Any, runtime: Any,
                                                          blobs: Any) -> None:
    handle = spark_steward.blobs.offload(b"payload" * 1000, receivers=3)
    spark.sparkContext.parallelize(range(2), 2).map(lambda _: len(handle.load())).collect()
    runtime.flush_events()
    ref = handle.ref
    assert blobs.depot.ledger.count(ref.scope, ref.key.digest) == 1
    assert _driver_file(runtime, ref).exists()


def test_failed_job_resets_transient_counts_and_stages_them(spark: Any, runtime: Any,
                                                            blobs: Any) -> None:
    handle = spark_steward.blobs.offload(list(range(1000)), receivers=2)

    def fail_after_load(_: int) -> int:
        handle.load()
        raise RuntimeError("boom")

    with pytest.raises(Exception, match="boom"):
        spark.sparkContext.parallelize(range(2), 2).map(fail_after_load).collect()
    runtime.flush_events()
    ref = handle.ref
    ledger = blobs.depot.ledger
    assert ledger.count(ref.scope, ref.key.digest) == 0
    assert ledger.is_staged(ref.scope, ref.key.digest)
    blobs.tick()
    assert _driver_file(runtime, ref).exists(), "staged blobs survive one period"
    blobs.tick()
    assert not _driver_file(runtime, ref).exists()
    assert not _ha_file(runtime, ref).exists()


def test_permanent_blob_of_a_failed_job_keeps_its_reference(spark: Any, runtime: Any,
                                                            blobs: Any) -> None:
    ref = spark_steward.blobs.put(b"model" * 100)

    def fail_after_get(_: int) -> int:
        spark_steward.blobs.get(ref)
        raise RuntimeError("boom")

    with pytest.raises(Exception, match="boom"):
        spark.sparkContext.parallelize(range(1), 1).map(fail_after_get).collect()
    runtime.flush_events()
    assert blobs.depot.ledger.count(ref.scope, ref.key.digest) == 1
    blobs.tick()
    blobs.tick()
    assert _driver_file(runtime, ref).exists()


def test_bound_permanent_blob_is_staged_after_its_job_and_rescued_by_reuse(
        spark: Any, runtime: Any, blobs: Any) -> None:
    ref = spark_steward.blobs.put(b"lookup" * 100)
    sc = spark.sparkContext
    read = (lambda _: len(spark_steward.blobs.read_bytes(ref)))
    assert sc.parallelize(range(2), 2).map(read).collect() == [600, 600]
    runtime.flush_events()
    ledger = blobs.depot.ledger
    assert ledger.count(ref.scope, ref.key.digest) == 0 and ledger.is_staged(ref.scope,
                                                                             ref.key.digest)
    blobs.tick()
    assert sc.parallelize(range(2), 2).map(read).collect() == [600, 600]  # rescued
    blobs.tick()
    assert _driver_file(runtime, ref).exists()
    runtime.flush_events()
    blobs.tick()
    blobs.tick()
    assert not _driver_file(runtime, ref).exists()


def test_scope_is_deleted_when_closed_and_its_last_job_ends(spark: Any, runtime: Any,
                                                            blobs: Any) -> None:
    started = threading.Event()
    release = Path(runtime.context.local_dir) / "release-scope-job"
    release.unlink(missing_ok=True)
    result: list[Any] = []

    def wait_for_release(_: int) -> int:
        while not release.exists():
            time.sleep(0.05)
        return len(spark_steward.blobs.read_bytes(ref))

    with spark_steward.scope("nightly") as scope:
        ref = spark_steward.blobs.put(b"scoped" * 1000)
        assert ref.scope == scope.id

        def run() -> None:
            started.set()
            result.extend(spark.sparkContext.parallelize(range(2), 2)
                          .map(wait_for_release).collect())

        job = InheritableThread(target=run)
        job.start()
        started.wait(10)
        time.sleep(1.0)  # the job is running in the scope
    assert _driver_file(runtime, ref).exists(), "closed, but a job of the scope still runs"
    assert _ha_file(runtime, ref).exists()
    release.touch()
    job.join(60)
    assert result == [6000, 6000]
    runtime.flush_events()
    assert not _driver_file(runtime, ref).parent.exists()
    assert not _ha_file(runtime, ref).parent.exists()
    assert scope.id not in blobs.depot.ledger.scopes()


def test_jobs_in_a_scope_carry_its_id(spark: Any, runtime: Any, recorder: Any) -> None:
    from spark_steward.kernel.events import JobStart

    with spark_steward.scope("tagged") as scope:
        spark.sparkContext.parallelize(range(2), 2).count()
    spark.sparkContext.parallelize(range(2), 2).count()
    runtime.flush_events()
    starts = [e for e in recorder.snapshot() if isinstance(e, JobStart)]
    assert starts[-2].properties.get("spark.steward.scope") == scope.id
    assert "spark.steward.scope" not in starts[-1].properties


def test_archive_is_unpacked_once_per_host(spark: Any, tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "lookup.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("table/a.txt", "alpha")
        zf.writestr("table/b.txt", "beta")
    ref = spark_steward.blobs.put(archive)

    def read_unpacked(_: int) -> tuple[str, str]:
        root = Path(spark_steward.blobs.get(ref, unpack=True))
        return str(root), (root / "table" / "a.txt").read_text()

    rows = spark.sparkContext.parallelize(range(6), 6).map(read_unpacked).collect()
    assert {r[1] for r in rows} == {"alpha"}
    assert len({r[0] for r in rows}) == 1, "one unpacked directory per host"


def test_add_file_and_spark_files_go_through_the_blob_service(spark: Any, runtime: Any,
                                                              blobs: Any, tmp_path: Path) -> None:
    from pyspark import SparkFiles

    source = tmp_path / "vocab.txt"
    source.write_text("hello\nworld\n")
    folder = tmp_path / "conf.d"
    (folder / "nested").mkdir(parents=True)
    (folder / "nested" / "x.ini").write_text("[x]\n")
    sc = spark.sparkContext
    sc.addFile(str(source))
    sc.addFile(str(folder), recursive=True)

    def read(_: int) -> tuple[str, str, str]:
        path = SparkFiles.get("vocab.txt")
        nested = Path(SparkFiles.get("conf.d")) / "nested" / "x.ini"
        return os.path.basename(path), Path(path).read_text(), nested.read_text()

    rows = sc.parallelize(range(4), 4).map(read).collect()
    assert set(rows) == {("vocab.txt", "hello\nworld\n", "[x]\n")}
    names = {ref.name for ref in spark_steward.blobs.ls()}
    assert {"vocab.txt", "conf.d.tar"} <= names
    assert not any("vocab.txt" in f for f in sc.listFiles), "Spark must not ship it as well"
    assert Path(SparkFiles.get("vocab.txt")).read_text() == "hello\nworld\n"  # driver side


def test_session_add_artifacts_of_files_and_archives_go_through_the_blob_service(
        spark: Any, runtime: Any, blobs: Any, tmp_path: Path) -> None:
    """Spark 4's classic ``spark.addArtifacts`` (SPARK-50718) hands files and archives to the
    context's addFile/addArchive, so the same service owns and verifies them."""
    import zipfile

    from pyspark import SparkFiles

    source = tmp_path / "artifact-lookup.csv"
    source.write_text("k,v\n1,2\n")
    archive = tmp_path / "artifact-bundle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("inside.txt", "unpacked\n")
    spark.addArtifacts(str(source), file=True)
    spark.addArtifacts(str(archive), archive=True)

    def read(_: int) -> tuple[str, str]:
        bundle = Path(SparkFiles.get("artifact-bundle.zip"))
        return (Path(SparkFiles.get("artifact-lookup.csv")).read_text(),
                (bundle / "inside.txt").read_text())

    rows = spark.sparkContext.parallelize(range(2), 2).map(read).collect()
    assert set(rows) == {("k,v\n1,2\n", "unpacked\n")}
    names = {ref.name for ref in spark_steward.blobs.ls()}
    assert {"artifact-lookup.csv", "artifact-bundle.zip"} <= names
    sc = spark.sparkContext
    assert not any("artifact-lookup" in f for f in sc.listFiles), "Spark must not ship it too"


def test_the_driver_reads_a_blob_itself_from_its_verified_copy(runtime: Any) -> None:
    data = os.urandom(1 << 16)
    ref = spark_steward.blobs.put(data)
    assert Path(spark_steward.blobs.get(ref)).read_bytes() == data
    _driver_file(runtime, ref).unlink()  # gone: restored from HA, checked against the key
    assert Path(spark_steward.blobs.get(ref)).read_bytes() == data


def test_get_outside_a_task_and_without_runtime_is_a_clear_error() -> None:
    from spark_steward.errors import StewardError

    with pytest.raises(StewardError, match="BlobRef"):
        spark_steward.blobs.get("not-a-ref")  # type: ignore[arg-type]


def test_large_blobs_come_in_verified_pieces_through_peer_fetch(spark: Any, runtime: Any,
                                                                blobs: Any) -> None:
    """Above ``peer.min-bytes`` a host fills the blob piece by piece (blob/swarm.py): here from
    the HA store as origin; both executors share the host's cache, so neither is the other's
    peer (their JVMs' endpoints are the host's own)."""
    data = os.urandom(20 << 20)
    ref = spark_steward.blobs.put(data)
    before = blobs.depot.transfers["peers"]
    rows = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_fetch_report(ref)).collect()
    assert {(r[1], r[2]) for r in rows} == {(crc32c.crc32c(data), len(data))}
    assert sum(r[3].get("peers", 0) for r in rows) == 1
    assert blobs.depot.transfers["peers"] == before + 1
    folder = _local_cache_file(runtime, ref).parent
    assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name]  # no have- or temp file
    assert blobs.depot.peers.holders((ref.scope, ref.key)) or not list(
        (Path(runtime.context.local_dir) / runtime.app_id / "peers").glob("*.json"))


def test_peer_fetch_without_an_origin_falls_back_to_the_whole_blob(spark: Any, runtime: Any,
                                                                   blobs: Any) -> None:
    data = os.urandom(17 << 20)
    ref = spark_steward.blobs.put(data)
    _ha_file(runtime, ref).unlink()  # the origin of peer fetch here, and the first whole source
    served = blobs.server.stats.blobs_served
    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_fetch_report(ref)).collect()
    assert {(r[1], r[2]) for r in rows} == {(crc32c.crc32c(data), len(data))}
    assert blobs.server.stats.blobs_served == served + 1


def test_a_large_added_file_and_archive_come_through_peer_fetch(spark: Any, blobs: Any,
                                                                tmp_path: Path) -> None:
    """Transparent mode: ``sc.addFile`` / ``sc.addArchive`` of large files take the same path
    as ``blobs.get``, with no change to the job."""
    import tarfile

    from pyspark import SparkFiles

    data = os.urandom(18 << 20)
    source = tmp_path / "big-model.bin"
    source.write_bytes(data)
    archive = tmp_path / "big-env.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(source, arcname="env/model.bin")
    sc = spark.sparkContext
    before = blobs.depot.transfers["peers"]
    sc.addFile(str(source))
    sc.addArchive(str(archive))

    def read(_: int) -> tuple[int, int]:
        import crc32c as c

        unpacked = Path(SparkFiles.get("big-env.tar")) / "env" / "model.bin"
        return c.crc32c(Path(SparkFiles.get("big-model.bin")).read_bytes()), \
            c.crc32c(unpacked.read_bytes())

    rows = sc.parallelize(range(4), 4).map(read).collect()
    assert set(rows) == {(crc32c.crc32c(data), crc32c.crc32c(data))}
    assert blobs.depot.transfers["peers"] == before + 2  # one fill per blob on this host
