"""Structured Streaming checkpoint locations owned, on local-cluster[2,1,1024] (issue 24).

Each test runs a real stateful query (rate source, aggregation, HDFS state store) in a session
of its own (``spark.newSession()``) over the shared context. Failing storage comes from the
test-only delegate ``FaultyCheckpointFiles`` (tests/support/java): it fails a share of the
deletes Spark asks for, logs every one, and counts operations.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pyspark
import pytest

import spark_steward
from spark_steward.errors import StreamActive
from spark_steward.streams.lifecycle.locations import StreamState
from spark_steward.streams.service import StreamService
from spark_steward.streams.store import StreamStore
from tests.support.faulty_files import CLASS as FAULTY, DIR_KEY, deletes_asked

#: Retention small enough that Spark deletes within seconds: 2 batches kept, a snapshot every
#: 2 deltas, state maintenance every 300 ms.
RETAIN = {"spark.sql.streaming.minBatchesToRetain": "2",
          "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
          "spark.sql.streaming.stateStore.maintenanceInterval": "300ms"}


@pytest.fixture
def service(runtime: Any) -> StreamService:
    return runtime.service(StreamService)  # type: ignore[no-any-return]


def _session(spark: Any, conf: dict[str, str]) -> Any:
    session = spark.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    return session


def _start(session: Any, location: Path, name: str) -> Any:
    rate = session.readStream.format("rate").option("rowsPerSecond", 200) \
        .option("numPartitions", 2).load()
    counts = rate.groupBy((rate.value % 8).alias("k")).count()
    return (counts.writeStream.format("memory").queryName(name).outputMode("complete")
            .trigger(processingTime="200 milliseconds")
            .option("checkpointLocation", str(location)).start())


def _wait_batches(query: Any, batches: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if progress is not None and progress["batchId"] >= batches:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {batches} batches in {timeout}s")


def _wait(predicate: Any, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def _status(name: str) -> Any:
    found = [s for s in spark_steward.streams.ls(files=True) if s.record.name == name]
    assert len(found) == 1, found
    return found[0]


def _files(location: Path) -> set[str]:
    return {str(p.relative_to(location)) for p in location.rglob("*") if p.is_file()}


@pytest.fixture
def stop_queries(spark: Any) -> Iterator[list[Any]]:
    queries: list[Any] = []
    yield queries
    for q in queries:
        if q.isActive:
            q.stop()


def test_a_query_location_is_recorded_running_then_stopped(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any]) -> None:
    location = tmp_path / "ckpt"
    query = _start(_session(spark, {}), location, "recorded")
    stop_queries.append(query)
    _wait_batches(query, 2)
    runtime.flush_events()
    running = _status("recorded")
    assert running.state is StreamState.RUNNING
    assert running.record.query_id == str(query.id)
    assert running.record.run_id == str(query.runId)
    assert running.record.app_id == runtime.app_id
    assert running.record.location.rstrip("/").endswith(str(location))
    assert running.survey.files > 0 and running.survey.bytes > 0
    query.stop()
    runtime.flush_events()
    stopped = _status("recorded")
    assert stopped.state is StreamState.STOPPED and stopped.record.stopped is not None
    record = runtime.storage.read_record(f"streams/{query.id}.json")
    assert record["location"] == running.record.location and record["stopped"]


@pytest.mark.parametrize("mode", ["throw", "false"])
def test_deletes_that_fail_are_retried_until_every_file_spark_deleted_is_gone(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any], mode: str) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "fail-deletes").write_text("0.3")
    (faults / "fail-mode").write_text(mode)
    location = tmp_path / "ckpt"
    session = _session(spark, {**RETAIN, "spark.steward.streams.delegate-class": FAULTY,
                               DIR_KEY: str(faults)})
    query = _start(session, location, f"flaky_{mode}")
    stop_queries.append(query)
    _wait_batches(query, 14)
    # Spark asked for deletes, some failed, and those were recorded rather than lost.
    _wait(lambda: list((location / "_steward" / "deletes").glob("*.json")), 60,
          "an intent for a failed delete")
    assert query.exception() is None  # Spark's query does not notice
    (faults / "fail-deletes").unlink()  # the storage recovers
    asked = set(deletes_asked(faults))
    assert len(asked) >= 10, asked
    # Retried while the query still runs (every sweep-interval, 1 s here).
    _wait(lambda: not [p for p in asked if os.path.exists(p)] or not query.isActive, 60,
          "retried deletes")
    left = [p for p in asked if os.path.exists(p)]
    assert not left, f"{len(left)} of {len(asked)} files Spark deleted are still there: {left[:5]}"
    query.stop()
    runtime.flush_events()
    # A write the stop cancelled (Spark's own "..N.delta.<uuid>.TID<n>.tmp.crc") is not a
    # delete Spark asked for; every file it did ask to delete must have lost its checksum too.
    orphans = [p for p in location.rglob(".*.crc") if not p.name.endswith(".tmp.crc")
               and not p.with_name(p.name[1:-4]).exists()]
    assert not orphans, f"checksum files of deleted files left: {orphans[:5]}"
    intents = location / "_steward" / "deletes"
    _wait(lambda: not list(intents.glob("*")), 30,
          f"intents settled: {[p.read_text() for p in intents.glob('*')]}")
    assert _status(f"flaky_{mode}").survey.intents == 0


@pytest.mark.parametrize("mode", ["throw", "false"])
def test_without_spark_steward_the_same_failures_fail_the_query_or_leave_files_behind(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any], mode: str) -> None:
    """The control of the test above (it could fail): Spark alone stops the whole query at a
    metadata-log delete that throws, and forgets one that leaves the file."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "fail-deletes").write_text("0.3")
    (faults / "fail-mode").write_text(mode)
    location = tmp_path / "ckpt"
    session = _session(spark, {**RETAIN, "spark.steward.streams.enabled": "false",
                               "spark.steward.streams.delegate-class": FAULTY,
                               DIR_KEY: str(faults)})
    query = _start(session, location, f"unowned_{mode}")
    stop_queries.append(query)
    if mode == "throw":
        _wait(lambda: query.exception() is not None, 120, "the query failing")
        assert "injected delete failure" in str(query.exception())
    else:
        _wait_batches(query, 14)
        query.stop()
        asked = set(deletes_asked(faults))
        assert [p for p in asked if os.path.exists(p)], "no delete failed: proves nothing"
    runtime.flush_events()
    assert not (location / "_steward").exists()
    assert f"unowned_{mode}" not in {s.record.name for s in spark_steward.streams.ls()}


def test_temp_files_of_killed_writers_are_swept_once_the_query_ends(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any]) -> None:
    location = tmp_path / "ckpt"
    query = _start(_session(spark, {}), location, "temps")
    stop_queries.append(query)
    _wait_batches(query, 2)
    left = [location / "offsets" / f".5.{uuid.uuid4()}.tmp",
            location / "state" / "0" / "1" / f".7.delta.{uuid.uuid4()}.tmp"]
    for path in left:
        path.write_bytes(b"half a write")
    keep = location / "offsets" / "notes.tmp"  # not named like Spark's temp files
    keep.write_bytes(b"someone else's")
    time.sleep(2.5)  # sweeps run while the query does: young temp files stay
    assert all(p.exists() for p in left)
    query.stop()
    runtime.flush_events()
    _wait(lambda: not any(p.exists() for p in left), 30, "temp files swept")
    assert keep.exists()


def test_drop_is_refused_while_the_query_runs_and_then_removes_everything(
        spark: Any, runtime: Any, service: StreamService, tmp_path: Path,
        stop_queries: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    location = tmp_path / "ckpt"
    query = _start(_session(spark, {}), location, "doomed")
    stop_queries.append(query)
    _wait_batches(query, 2)
    runtime.flush_events()
    with pytest.raises(StreamActive, match="still runs in application"):
        spark_steward.streams.drop("doomed")
    query.stop()
    runtime.flush_events()
    with pytest.raises(StreamActive, match="drop-grace"):
        spark_steward.streams.drop("doomed")  # stopped, but within the grace
    assert service.store is not None
    monkeypatch.setattr(service.store, "drop_grace", 0.0)
    result = spark_steward.streams.drop(str(location))
    assert result.files > 0 and not location.exists()
    assert "doomed" not in {s.record.name for s in spark_steward.streams.ls()}


def test_a_deleted_locations_record_stays_while_its_query_runs_and_goes_after_the_grace(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any]) -> None:
    """Issue 33: the record of a location whose folder someone deleted is removed by attach and
    gc (both through ``forget_gone``), judged from the storage dir as gc judges it."""
    location = tmp_path / "ckpt"
    rate = _session(spark, {}).readStream.format("rate").option("rowsPerSecond", 1).load()
    # One batch, then an hour's wait: nothing writes the folder again once it is deleted.
    query = (rate.writeStream.format("memory").queryName("deleted_by_hand")
             .trigger(processingTime="1 hour").option("checkpointLocation", str(location))
             .start())
    stop_queries.append(query)
    _wait_batches(query, 0)
    runtime.flush_events()
    qid = str(query.id)

    def store(grace: float) -> StreamStore:
        return StreamStore(runtime.registry, abandoned_after=3600.0, drop_grace=grace,
                           temp_horizon=3600.0)

    _wait(lambda: store(0).records.read(qid) is not None, 30, "the query recorded")
    shutil.rmtree(location)
    running = store(0).records.read(qid)
    assert running is not None and running.stopped is None
    # Its application is live (fresh heartbeat) and the run not stopped: kept, even with no grace.
    why = store(0).forget_gone(running)
    assert why is not None and "still runs in application" in why
    assert store(0).records.read(qid) == running

    query.stop()
    runtime.flush_events()
    _wait(lambda: (store(0).records.read(qid) or running).stopped is not None, 30, "stop recorded")
    stopped = store(0).records.read(qid)
    assert stopped is not None and stopped.stopped is not None and not location.exists()
    grace = 5.0
    why = store(grace).forget_gone(stopped)  # stopped just now: within the grace
    assert why is not None and "drop-grace" in why
    assert store(grace).records.read(qid) == stopped
    time.sleep(max(0.0, stopped.stopped + grace - time.time()) + 0.1)
    assert store(grace).forget_gone(stopped) is None
    assert store(grace).records.read(qid) is None
    assert "deleted_by_hand" not in {s.record.name for s in spark_steward.streams.ls()}


def test_a_session_with_spark_steward_off_records_nothing(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any]) -> None:
    location = tmp_path / "ckpt"
    query = _start(_session(spark, {"spark.steward.enabled": "false"}), location, "off")
    stop_queries.append(query)
    _wait_batches(query, 2)
    query.stop()
    runtime.flush_events()
    assert "off" not in {s.record.name for s in spark_steward.streams.ls()}


@pytest.mark.parametrize("delegate", ["io.sparksteward.shim.streams.StreamCheckpointFiles",
                                      "io.sparksteward.shim.streams.StreamCheckpointFilesV40",
                                      # the names before the shim had packages (aliases now)
                                      "io.sparksteward.shim.StreamCheckpointFiles",
                                      "io.sparksteward.shim.StreamCheckpointFilesV40"])
def test_a_delegate_naming_spark_stewards_own_manager_falls_back_to_sparks_default(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any], delegate: str) -> None:
    """Ours (or another line's, from a copied spark-defaults.conf, or an old name) as the delegate
    would call itself or fail to load: Spark's default manager is used instead."""
    location = tmp_path / "ckpt"
    name = "self_" + delegate.replace("io.sparksteward.shim.", "").replace(".", "_")
    session = _session(spark, {"spark.steward.streams.delegate-class": delegate})
    query = _start(session, location, name)
    stop_queries.append(query)
    _wait_batches(query, 2)
    query.stop()
    runtime.flush_events()
    assert _status(name).state is StreamState.STOPPED


def test_a_conf_naming_the_managers_old_class_still_runs_its_queries(
        spark: Any, runtime: Any, tmp_path: Path, stop_queries: list[Any]) -> None:
    """A spark-defaults.conf written before the shim had packages names the manager
    ``io.sparksteward.shim.StreamCheckpointFiles[V40]``: that class is still there (an alias of
    the ``streams`` package's manager), so the session's queries start and run with it."""
    line = "V40" if pyspark.__version__.startswith(("3.", "4.0")) else ""
    session = _session(spark, {
        "spark.sql.streaming.checkpointFileManagerClass":
            f"io.sparksteward.shim.StreamCheckpointFiles{line}"})
    query = _start(session, tmp_path / "ckpt", "old_manager_name")
    stop_queries.append(query)
    _wait_batches(query, 2)
    query.stop()
    runtime.flush_events()
    assert _status("old_manager_name").state is StreamState.STOPPED
