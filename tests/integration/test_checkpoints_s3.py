"""Checkpoint cleanup (FLIP-270 on FLIP-194's retrying cleaner) against a real S3 API while the
store refuses deletes for a while: subsumed checkpoints stay marked for deletion and the cleaner
keeps retrying; once deletes are allowed again everything subsumed goes; ``spark-steward gc``
finishes what a no-retry run and a SIGKILLed process left behind.

What denies the deletes: a bucket policy, enforced by moto's own S3 server. moto (5.x) evaluates
a bucket's policy on every object request without IAM authentication being switched on
(``moto/s3/responses.py``: the key handler checks ``bucket.get_permission("s3:<Method>Object")``
and answers 403; the multi-object delete ``POST ?delete`` checks ``s3:DeleteObject`` per key).
So a statement ``{"Effect": "Deny", "Principal": "*", "Action": ["s3:DeleteObject"]}`` on the
bucket's objects is a denial by the S3 API itself, with S3's own semantics: a single
``DeleteObject`` fails with 403, and ``DeleteObjects`` (what s3fs's ``rm`` sends) answers
200 OK and lists every key with ``AccessDenied`` under ``Errors``. Reads, writes and listings
stay allowed; removing the policy allows deletes again. No reverse proxy and no Python mocking
is needed, and every test has its own bucket, so the session's moto server is shared safely.

The ``Errors`` part matters: s3fs's ``_bulk_delete`` ignores it, so ``Storage.delete`` looks
again after every delete on an object store and raises when objects are left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import RetryingCleaner
from spark_steward.errors import StewardError
from spark_steward.checkpoint.lifecycle import CheckpointEntry, CheckpointState
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.storage import Storage

ROOT = "steward"
PARTS = 3


# -- harness -----------------------------------------------------------------------------------


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def _storage(endpoint: str, bucket: str) -> Storage:
    return Storage.from_url(f"s3://{bucket}/{ROOT}", endpoint_url=endpoint,
                            skip_instance_cache=True)


class Deletes:
    """Denies or allows ``s3:DeleteObject`` on a bucket's objects through its bucket policy."""

    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def deny(self) -> None:
        policy = {"Version": "2012-10-17", "Statement": [{
            "Sid": "NoDeletes", "Effect": "Deny", "Principal": "*",
            "Action": ["s3:DeleteObject"], "Resource": f"arn:aws:s3:::{self.bucket}/*"}]}
        self.client.put_bucket_policy(Bucket=self.bucket, Policy=json.dumps(policy))

    def allow(self) -> None:
        self.client.delete_bucket_policy(Bucket=self.bucket)


def _keys(client: Any, bucket: str) -> set[str]:
    """Every object key in the bucket, straight from S3 (no fsspec cache in between)."""
    found: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        found.update(obj["Key"] for obj in page.get("Contents", []))
    return found


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls ``condition``; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def _part(entry: CheckpointEntry, j: int) -> str:
    return f"{entry.data}/part-{j:05d}.parquet"


def _payload(entry: CheckpointEntry, j: int) -> bytes:
    return f"{entry.id} part {j}\n".encode() * 50


def _artifact(entry: CheckpointEntry) -> dict[str, Any]:
    return {"format": "parquet", "schema": "id long, v string",
            "files": [_part(entry, j).rsplit("/", 1)[1] for j in range(PARTS)]}


def _save(store: CheckpointStore, series: str, retained: int) -> CheckpointEntry:
    """What ``checkpoints(series).save(df)`` does: begin, write the data, complete."""
    entry = store.begin(series)
    for j in range(PARTS):
        store.storage.write_atomic(_part(entry, j), _payload(entry, j))
    return store.complete(entry, _artifact(entry), rows=PARTS * 50, files=PARTS,
                          bytes_=PARTS * len(_payload(entry, 0)), retained=retained)


def _object_keys(entry: CheckpointEntry) -> set[str]:
    """The S3 keys one checkpoint consists of: entry, artifact and data objects."""
    return ({f"{ROOT}/{layout.entry_path(*entry.key)}",
             f"{ROOT}/{layout.artifact_path(*entry.key)}"}
            | {f"{ROOT}/{_part(entry, j)}" for j in range(PARTS)})


def _stored(store: CheckpointStore, entry: CheckpointEntry) -> CheckpointEntry | None:
    return store.metadata.read_entry(*entry.key)


def _gc(endpoint: str, bucket: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """``spark-steward gc --json`` as a real process; (exit status, checkpoints collector)."""
    run = subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                          f"s3://{bucket}/{ROOT}", "--option", f"endpoint_url={endpoint}",
                          "--json", *extra], capture_output=True, text=True, timeout=60)
    assert run.stdout, f"gc printed nothing (exit {run.returncode}): {run.stderr}"
    out = json.loads(run.stdout)
    collectors = {c["name"]: c for c in out["collectors"]}
    assert out["ok"] is (run.returncode == 0), run.stdout
    return run.returncode, collectors["checkpoints"]


def _items(collector: dict[str, Any], kind: str) -> list[str]:
    key = "path" if kind == "failed" else "item"
    return sorted(row[key] for row in collector[kind])


@pytest.fixture
def s3(moto_endpoint: str, s3_bucket: str) -> tuple[str, str, Any, Deletes]:
    client = _client(moto_endpoint)
    return moto_endpoint, s3_bucket, client, Deletes(client, s3_bucket)


@pytest.fixture
def stores() -> Iterator[list[CheckpointStore]]:
    """Stores a test built; their cleaner threads are stopped however the test ends."""
    built: list[CheckpointStore] = []
    yield built
    for store in built:
        store.cleaner.close(0)


def _store(stores: list[CheckpointStore], storage: Storage, app: str,
           strategy: RetryStrategy) -> CheckpointStore:
    cleaner: RetryingCleaner[CheckpointCleanup] = RetryingCleaner(strategy, threads=2, name="checkpoint")
    store = CheckpointStore(storage, app, cleaner, is_dead=lambda other: False)
    stores.append(store)
    return store


# -- the root cause ----------------------------------------------------------------------------


def test_a_delete_s3_refuses_is_an_error(s3: tuple[str, str, Any, Deletes]) -> None:
    endpoint, bucket, client, deletes = s3
    storage = _storage(endpoint, bucket)
    storage.write_atomic("x/a", b"1")
    storage.write_atomic("x/b", b"2")
    deletes.deny()
    with pytest.raises(StewardError, match=f"s3://{bucket}/{ROOT}/x"):
        storage.delete("x")
    assert _keys(client, bucket) == {f"{ROOT}/x/a", f"{ROOT}/x/b"}


def test_the_bucket_policy_refuses_deletes_and_nothing_else(s3: tuple[str, str, Any, Deletes]
                                                             ) -> None:
    """The switch itself: S3 refuses both kinds of delete, reads and writes go on."""
    from botocore.exceptions import ClientError

    endpoint, bucket, client, deletes = s3
    storage = _storage(endpoint, bucket)
    storage.write_atomic("x/a", b"1")
    deletes.deny()
    with pytest.raises(ClientError, match="403|AccessDenied"):
        client.delete_object(Bucket=bucket, Key=f"{ROOT}/x/a")
    answer = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"{ROOT}/x/a"}]})
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [(f"{ROOT}/x/a", "AccessDenied")]
    storage.write_atomic("x/b", b"2")
    assert storage.read_bytes("x/a") == b"1"
    assert _keys(client, bucket) == {f"{ROOT}/x/a", f"{ROOT}/x/b"}
    deletes.allow()
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"{ROOT}/x/a"}]})
    assert _keys(client, bucket) == {f"{ROOT}/x/b"}


# -- the test plan -----------------------------------------------------------------------------


def test_subsumed_checkpoints_wait_marked_while_deletes_are_denied_then_go(
        s3: tuple[str, str, Any, Deletes], stores: list[CheckpointStore]) -> None:
    endpoint, bucket, client, deletes = s3
    storage = _storage(endpoint, bucket)
    store = _store(stores, storage, "app-live", RetryStrategy.exponential(0.05, 0.4))
    deletes.deny()

    done = [_save(store, "daily", retained=1) for _ in range(4)]
    subsumed, kept = done[:-1], done[-1]
    assert [e.number for e in done] == [1, 2, 3, 4]
    everything = set().union(*(_object_keys(e) for e in done))

    # The cleaner's first step is the durable mark; every later step is a refused delete.
    _wait_for(lambda: all((s := _stored(store, e)) is not None
                          and s.state is CheckpointState.DISCARDING for e in subsumed),
              10, "subsumed checkpoints marked for deletion in S3")
    failures = store.cleaner.stats()["failures"]
    _wait_for(lambda: store.cleaner.stats()["failures"] >= failures + 2 * len(subsumed), 5,
              "the cleaner retrying every refused discard")
    stats = store.cleaner.stats()
    assert stats["outstanding"] == len(subsumed) and stats["given_up"] == 0, stats
    assert sorted(k.describe() for k in store.cleaner.outstanding()) == sorted(
        e.id for e in subsumed)
    for entry in subsumed:
        stored = _stored(store, entry)
        assert stored is not None and stored.state is CheckpointState.DISCARDING
        assert stored.discard_reason == "subsumed: more than 1 retained"
    assert _keys(client, bucket) == everything  # nothing deleted, nothing half-deleted
    assert [e.state for e in store.entries("daily")] == (
        [CheckpointState.DISCARDING] * len(subsumed) + [CheckpointState.COMPLETED])
    assert store.latest("daily").number == kept.number

    deletes.allow()
    took = _wait_for(lambda: not store.cleaner.outstanding(), 5,
                     "the subsumed checkpoints deleted once deletes are allowed")
    assert took < 5
    assert _keys(client, bucket) == _object_keys(kept)
    assert store.cleaner.stats()["given_up"] == 0
    assert store.entries("daily") == [kept]
    assert _stored(store, kept) == kept and kept.state is CheckpointState.COMPLETED
    assert store.metadata.read_artifact(*kept.key) == _artifact(kept)
    assert [storage.read_bytes(_part(kept, j)) for j in range(PARTS)] == [
        _payload(kept, j) for j in range(PARTS)]
    assert store.close(5) == []


def test_no_retry_leaves_marked_checkpoints_that_gc_deletes_once_allowed(
        s3: tuple[str, str, Any, Deletes], stores: list[CheckpointStore]) -> None:
    endpoint, bucket, client, deletes = s3
    storage = _storage(endpoint, bucket)
    store = _store(stores, storage, "app-once", RetryStrategy.no_retry())
    deletes.deny()

    done = [_save(store, "hourly", retained=1) for _ in range(3)]
    subsumed, kept = done[:-1], done[-1]
    everything = set().union(*(_object_keys(e) for e in done))
    assert sorted(store.close(10)) == ["hourly/1", "hourly/2"]
    stats = store.cleaner.stats()
    assert (stats["attempts"], stats["failures"], stats["given_up"]) == (2, 2, 2), stats
    for entry in subsumed:
        stored = _stored(store, entry)
        assert stored is not None and stored.state is CheckpointState.DISCARDING
    assert _keys(client, bucket) == everything

    # gc while S3 still refuses: it retries a few times, reports both and exits 1.
    status, report = _gc(endpoint, bucket)
    assert status == 1
    assert _items(report, "failed") == ["hourly/1", "hourly/2"]
    assert _items(report, "deleted") == []
    assert _keys(client, bucket) == everything

    deletes.allow()
    # Marked for deletion: gc deletes them whatever the owner's liveness (app-once has no
    # record at all); the completed hourly/3 is kept for restore.
    status, report = _gc(endpoint, bucket, "--dry-run")
    assert status == 0
    assert _items(report, "deleted") == ["hourly/1", "hourly/2"]
    assert {row["item"]: row["files"] for row in report["deleted"]} == {
        "hourly/1": PARTS, "hourly/2": PARTS}
    assert _keys(client, bucket) == everything

    status, report = _gc(endpoint, bucket)
    assert status == 0
    assert _items(report, "deleted") == ["hourly/1", "hourly/2"] and report["failed"] == []
    assert _keys(client, bucket) == _object_keys(kept)

    status, report = _gc(endpoint, bucket)
    assert (status, report["deleted"], report["failed"]) == (0, [], [])


_KILLED_APP = textwrap.dedent("""
    import os, signal, sys

    from spark_steward.applications import ApplicationRegistry
    from spark_steward.checkpoint.store import CheckpointStore
    from spark_steward.cleaner import RetryingCleaner
    from spark_steward.lifecycle.retry import RetryStrategy
    from spark_steward.storage import Storage

    endpoint, bucket = sys.argv[1:3]
    storage = Storage.from_url(f"s3://{bucket}/steward", endpoint_url=endpoint,
                               skip_instance_cache=True)
    registry = ApplicationRegistry(storage, heartbeat_timeout=3600)
    app = f"app-killed-{os.getpid()}"
    registry.write(registry.new_record(app, "killed mid-checkpoint"))
    store = CheckpointStore(storage, app, RetryingCleaner(RetryStrategy.no_retry()),
                            is_dead=registry.is_dead)
    entry = store.begin("nightly")
    for j in range(3):
        storage.write_atomic(f"{entry.data}/part-{j:05d}.parquet", b"x" * 100)
    print(app, entry.id, flush=True)
    sys.stdin.readline()  # the test looks at it alive first
    os.kill(os.getpid(), signal.SIGKILL)
    print("still here", flush=True)
""")


def test_gc_deletes_the_pending_checkpoint_of_a_killed_process(
        s3: tuple[str, str, Any, Deletes], tmp_path: Path) -> None:
    endpoint, bucket, client, _ = s3
    script = tmp_path / "killed_app.py"
    script.write_text(_KILLED_APP)
    child = subprocess.Popen([sys.executable, str(script), endpoint, bucket],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert child.stdout is not None and child.stdin is not None
        app, checkpoint = child.stdout.readline().split()
        assert checkpoint == "nightly/1"
        pending = {f"{ROOT}/checkpoints/entries/nightly/0000000001.json"} | {
            f"{ROOT}/checkpoints/data/nightly/0000000001/part-{j:05d}.parquet"
            for j in range(PARTS)}
        record_key = f"{ROOT}/applications/{app}.json"
        assert _keys(client, bucket) == pending | {record_key}

        # Alive: its pending checkpoint is not garbage.
        status, report = _gc(endpoint, bucket, "--dry-run")
        assert (status, report["deleted"]) == (0, [])

        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(30) == -signal.SIGKILL
        assert child.stdout.read() == ""  # it never got past the kill
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)

    storage = _storage(endpoint, bucket)
    registry = ApplicationRegistry(storage, heartbeat_timeout=3600)
    record = registry.read(app)
    assert record is not None and record.pid == child.pid and not record.finished
    # Its heartbeat is fresh; the vanished driver process alone says it is gone.
    assert registry.liveness(record) is Liveness.CRASHED and registry.is_dead(app)
    entry = CheckpointMetadata(storage).read_entry("nightly", 1)
    assert entry is not None and entry.state is CheckpointState.PENDING and entry.app_id == app

    status, report = _gc(endpoint, bucket)
    assert status == 0 and report["failed"] == []
    assert [(row["item"], row["files"]) for row in report["deleted"]] == [("nightly/1", PARTS)]
    assert _keys(client, bucket) == {record_key}
