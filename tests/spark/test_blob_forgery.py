"""Issue 21, point 3, as a user meets it: through spark-submit on local-cluster, HA copies of
blobs replaced with other bytes of the same size and crc32c before executors fetched them.
Tasks must never see the forged bytes: they get the true ones from the driver, or a clear error
naming the blob's key when nobody holds them any more; a job reading an untouched blob runs next
to the refused one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf


def test_ha_copies_forged_with_the_same_crc_never_reach_a_task(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    out = tmp_path / "out.json"
    # Executors share the driver's host: no same-host link, so they go to HA, then the server.
    flags = steward_conf(storage, "spark.steward.blob.cache.same-host-link=false",
                         "spark.task.maxFailures=1")
    result = run_spark_submit(SCRIPTS / "blob_forgery_job.py", flags, str(out), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    report = json.loads(out.read_text())
    keys, forged = report["keys"], report["forged_sha256"]
    seen = {outcome[1] for rows in ("a_rows", "b_rows", "good_rows")
            for _, outcome, _ in report[rows] if outcome[0] == "sha256"}
    assert not seen & set(forged.values()), "a task saw forged bytes"

    # A: the forged HA copy is refused, the driver's server sends the true bytes.
    a_rows = report["a_rows"]
    assert [outcome for _, outcome, _ in a_rows] == [["sha256", keys["a"]]] * 4, a_rows
    transfers = {k: sum(delta.get(k, 0) for _, _, delta in a_rows) for k in ("ha", "server")}
    assert transfers == {"ha": 0, "server": 1}, a_rows
    assert report["files"]["a"] == {"driver": keys["a"], "cache": keys["a"]}

    # B: nobody has the true bytes; every read fails naming the key, nothing is kept.
    b_rows = report["b_rows"]
    for _, outcome, _ in b_rows:
        assert outcome[0] == "error" and outcome[1] == "BlobNotFound", b_rows
        assert keys["b"] in outcome[2], outcome
        assert "from ha is not blob" in outcome[2] and "HA copy of blob" in outcome[2], outcome
    assert report["files"]["b"] == {"driver": None, "cache": None}
    job_error = report["b_job_error"]
    assert job_error is not None and "BlobNotFound" in job_error and keys["b"] in job_error, \
        (job_error or "")[-3000:]

    # The untouched blob, read next to B's job, is served.
    good_rows = report["good_rows"]
    assert [outcome for _, outcome, _ in good_rows] == [["sha256", keys["good"]]] * 4, good_rows
    assert hashlib.sha256(b"").hexdigest() not in seen
