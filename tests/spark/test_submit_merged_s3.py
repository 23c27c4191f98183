"""File-merged checkpoints on an object store: a spark-submit job on local-cluster[2,1,1024]
with its storage dir in moto's S3. Each save is a few objects (one per executor core, not one
per partition), restores by ranged GETs, and subsumed checkpoints' objects are deleted."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf


def test_merged_checkpoints_on_s3_are_few_objects_and_cleaned(
        tmp_path: Path, moto_endpoint: str, s3_bucket: str) -> None:
    flags = steward_conf(tmp_path / "unused", f"spark.steward.storage.option.endpoint_url="
                                              f"{moto_endpoint}")
    flags = [f.replace((tmp_path / "unused").as_uri(), f"s3://{s3_bucket}/steward")
             for f in flags]
    assert any(f"s3://{s3_bucket}/steward" in f for f in flags)
    out = tmp_path / "out.json"
    result = run_spark_submit(SCRIPTS / "merged_s3_job.py", flags, str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    saves = json.loads(out.read_text())["saves"]
    for i, save in enumerate(saves, start=1):
        rows = 4000 * i
        assert (save["rows"], save["sum"], save["partitions"]) == (rows, rows * (rows - 1) // 2,
                                                                    40)
        # 40 partitions coalesced into one task per core (2): a few objects, not 40
        assert 1 <= len(save["physical"]) <= 4, save
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    listed = s3.list_objects_v2(Bucket=s3_bucket, Prefix="steward/checkpoints/merged/")
    objects = sorted(o["Key"] for o in listed.get("Contents", []))
    # subsumed checkpoints 1 and 2 left nothing; the retained one is exactly its own objects
    assert objects == sorted(f"steward/{p}" for p in saves[-1]["physical"])
