"""Blob HA copies on a real S3 API (moto's standalone server): put, restore, executor-cache
fetch and scope deletion, plus gc of a dead application's blobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_steward.applications import ApplicationRegistry
from spark_steward.blob.cache import BlobCache, BlobSources
from spark_steward.blob.depot import BlobDepot
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore
from spark_steward.storage import Storage

DATA = os.urandom(6 << 20)  # above s3fs's multipart threshold


def _storage(endpoint: str, bucket: str) -> Storage:
    return Storage.from_url(f"s3://{bucket}/steward", endpoint_url=endpoint,
                            skip_instance_cache=True)


def test_put_restore_fetch_and_scope_delete_on_s3(moto_endpoint: str, s3_bucket: str,
                                                  tmp_path: Path) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    depot = BlobDepot(LocalBlobStore(tmp_path / "driver"), HaBlobStore(storage, "app-1"))
    depot.open_scope("job.1")
    ref = depot.put_bytes(DATA, scope="job.1")
    ha_rel = f"apps/app-1/blobs/job.1/{ref.key}"
    assert storage.read_bytes(ha_rel) == DATA
    # The driver lost its local copy: restored from S3.
    depot.local.path(ref.scope, ref.key).unlink()
    assert depot.local_path(ref.key, ref.scope).read_bytes() == DATA
    # An executor on another host: its cache fetches from S3, never from the driver.
    cache = BlobCache(tmp_path / "cache", BlobSources(ha=HaBlobStore(storage, "app-1")))
    assert cache.get(ref, 1).read_bytes() == DATA and cache.stats["ha"] == 1
    depot.close_scope("job.1")
    storage.fs.invalidate_cache()
    assert not storage.exists(ha_rel)
    assert storage.list_names("apps/app-1/blobs") == []


def test_gc_removes_a_dead_applications_blobs_on_s3(moto_endpoint: str, s3_bucket: str) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    # A driver on another host whose last heartbeat was in 2001: stale. (A record naming this
    # very process, alive here, would be live whatever its heartbeat says.)
    registry = ApplicationRegistry(storage, heartbeat_timeout=60, clock=lambda: 1e9,
                                   this_host="far-away")
    registry.write(registry.new_record("dead-1", "old"))
    registry.write(ApplicationRegistry(storage, heartbeat_timeout=60).new_record("live-1", "now"))
    storage.write_atomic("apps/live-1/blobs/_app/" + "b" * 64, b"y" * 100)
    storage.write_atomic("apps/dead-1/blobs/_app/" + "a" * 64, b"x" * 100)
    result = subprocess.run(
        [sys.executable, "-m", "spark_steward.cli", "gc", "--storage", storage.url,
         "--option", f"endpoint_url={moto_endpoint}", "--heartbeat-timeout", "1h"],
        capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    storage.fs.invalidate_cache()
    assert not storage.exists("apps/dead-1/blobs")
    assert storage.read_bytes("apps/live-1/blobs/_app/" + "b" * 64) == b"y" * 100
