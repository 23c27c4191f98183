"""An unmodified script using addFile / addArchive / SparkFiles, run with the conf flags alone:
same results, served by the blob service, and nothing of the application left afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.spark.conftest import LOCAL_DIR, SCRIPTS, run_spark_submit, steward_conf


def test_unmodified_add_file_script_runs_through_the_blob_service(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    out = tmp_path / "out.json"
    work = tmp_path / "work"
    work.mkdir()
    result = run_spark_submit(SCRIPTS / "files_job.py", steward_conf(storage), str(work),
                              str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job = json.loads(out.read_text())
    app_id = job["app_id"]
    assert {tuple(r[1:]) for r in job["rows"]} == {("hello\n", "1,2\n")}
    # Served from the application's folder by spark-steward, under Spark's own file name.
    for path, _, _ in job["rows"]:
        assert path.startswith(str(LOCAL_DIR / app_id / "files")), path
        assert Path(path).name == "vocab.txt"
    # After spark.stop(): nothing of the application locally or in the HA storage.
    assert not (LOCAL_DIR / app_id).exists()
    assert not (storage / "apps" / app_id / "blobs").exists()
    assert sorted(p.name for p in (storage / "apps").iterdir()) in ([], [app_id])


@pytest.mark.parametrize("spark_flags, encrypted", [
    (["spark.authenticate=true", "spark.authenticate.secret=tls-test-secret",
      "spark.network.crypto.enabled=true"], True),
    ([], False),
], ids=["spark-encrypts", "spark-clear"])
def test_blob_transfers_are_encrypted_when_sparks_own_are(tmp_path: Path, spark_flags: list[str],
                                                           encrypted: bool) -> None:
    """The executors fetch from the driver's server (no HA copy, no same-host link): with
    Spark's network crypto on they must speak TLS to the pinned certificate, or get nothing."""
    storage, out, work = tmp_path / "storage", tmp_path / "out.json", tmp_path / "work"
    work.mkdir()
    flags = steward_conf(storage, "spark.steward.blob.ha=false",
                         "spark.steward.blob.cache.same-host-link=false", *spark_flags)
    result = run_spark_submit(SCRIPTS / "tls_files_job.py", flags, str(work), str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job = json.loads(out.read_text())
    assert set(job["digests"]) == {job["expected"]}
    assert job["pinned_cert"] is encrypted
    assert job["blobs_served"] >= 1 and job["auth_failures"] == 0
