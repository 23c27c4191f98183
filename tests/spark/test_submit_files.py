"""Files shipped with Spark's own ``sc.addFile`` through the blob service, encrypted when Spark's
own traffic is.

An unmodified script using addFile / addArchive / SparkFiles with the conf flags alone (same
results, served by the blob service, nothing of the application left afterwards) is checked in
the plain job's application test_submit.py already runs
(test_unmodified_add_file_script_runs_through_the_blob_service there)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.spark.conftest import ONE_EXECUTOR, SCRIPTS, run_spark_submit, steward_conf


def test_blob_transfers_are_encrypted_when_sparks_own_are(tmp_path: Path) -> None:
    """The executors fetch from the driver's server (no HA copy, no same-host link): with
    Spark's network crypto on they must speak TLS to the pinned certificate, or get nothing.
    One executor fetching shows it (local-cluster[1,1,1024]). Spark's crypto off (no pinned
    certificate, the server's transfers in the clear) is the shared session's:
    test_blobs.test_ha_copy_missing_falls_back_to_the_driver_server."""
    spark_flags = ["spark.authenticate=true", "spark.authenticate.secret=tls-test-secret",
                   "spark.network.crypto.enabled=true"]
    storage, out, work = tmp_path / "storage", tmp_path / "out.json", tmp_path / "work"
    work.mkdir()
    flags = steward_conf(storage, "spark.steward.blob.ha=false",
                         "spark.steward.blob.cache.same-host-link=false", *spark_flags)
    result = run_spark_submit(SCRIPTS / "tls_files_job.py", flags, str(work), str(out),
                              master=ONE_EXECUTOR)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job = json.loads(out.read_text())
    assert set(job["digests"]) == {job["expected"]}
    assert job["pinned_cert"] is True
    assert job["blobs_served"] >= 1 and job["auth_failures"] == 0
