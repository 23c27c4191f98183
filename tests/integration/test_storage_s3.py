"""The storage layer against a real S3 API (moto's standalone server on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_steward.config import StewardConf
from spark_steward.errors import RecordCorrupt, StorageError
from spark_steward.storage import Storage


def _storage(endpoint: str, bucket: str) -> Storage:
    conf = StewardConf.from_pairs([
        ("spark.steward.storage.dir", f"s3://{bucket}/steward"),
        ("spark.steward.storage.option.endpoint_url", endpoint),
        ("spark.steward.storage.option.skip_instance_cache", "true"),
    ])
    return Storage.from_url(conf.storage_dir(), **conf.storage_options())


def test_options_from_conf_reach_the_filesystem(moto_endpoint: str, s3_bucket: str) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    assert storage.is_object_store and not storage.is_local
    assert storage.url == f"s3://{s3_bucket}/steward"


def test_records_and_objects_round_trip(moto_endpoint: str, s3_bucket: str) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    storage.write_record("applications/app-1.json", {"app_id": "app-1", "n": 1})
    storage.write_atomic("apps/app-1/blobs/a", b"x" * 1000)
    storage.write_atomic("apps/app-1/blobs/b", b"y" * 10)
    assert storage.read_record("applications/app-1.json") == {"app_id": "app-1", "n": 1}
    assert storage.list_names() == ["applications", "apps"]
    assert storage.list_names("apps/app-1/blobs") == ["a", "b"]
    assert [(e.path, e.size) for e in storage.walk_files("apps")] == [
        ("apps/app-1/blobs/a", 1000), ("apps/app-1/blobs/b", 10)]
    assert storage.usage("apps/app-1") == (2, 1010)


def test_overwrite_is_one_put_readers_see_old_or_new(moto_endpoint: str, s3_bucket: str
                                                     ) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    storage.write_record("r.json", {"v": 1})
    storage.write_record("r.json", {"v": 2})
    assert storage.read_record("r.json") == {"v": 2}
    assert storage.list_names() == ["r.json"]  # no temp objects


def test_corrupt_record_on_s3_is_reported_with_its_url(moto_endpoint: str, s3_bucket: str
                                                       ) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    storage.write_record("r.json", {"v": 1})
    data = bytearray(storage.read_bytes("r.json"))
    data[data.index(b'"v": 1') + 5] = ord("7")
    storage.write_atomic("r.json", bytes(data))
    with pytest.raises(RecordCorrupt, match=f"s3://{s3_bucket}/steward/r.json"):
        storage.read_record("r.json")


def test_recursive_delete_is_idempotent(moto_endpoint: str, s3_bucket: str) -> None:
    storage = _storage(moto_endpoint, s3_bucket)
    for i in range(5):
        storage.write_atomic(f"apps/app-9/x/{i}", b"1")
    assert storage.delete("apps/app-9") is True
    assert storage.delete("apps/app-9") is False
    assert storage.list_names("apps") == []
    with pytest.raises(StorageError, match="refusing to delete the storage root"):
        storage.delete("")


def test_cli_status_reads_s3_with_options(moto_endpoint: str, s3_bucket: str) -> None:
    from spark_steward.applications import ApplicationRegistry

    storage = _storage(moto_endpoint, s3_bucket)
    registry = ApplicationRegistry(storage, heartbeat_timeout=60)
    registry.write(registry.finish(registry.new_record("app-s3", "on-s3")))
    storage.write_atomic("apps/app-s3/blobs/k", b"abc")
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                          f"s3://{s3_bucket}/steward", "--option", f"endpoint_url={moto_endpoint}",
                          "--json"], capture_output=True, text=True, check=True).stdout
    apps = json.loads(out)["applications"]
    assert [(a["app_id"], a["state"], a["owns"]) for a in apps] == [
        ("app-s3", "finished", {"blobs": {"files": 1, "bytes": 3}})]
