"""Someone who can write the HA storage replaces blobs' copies there with other bytes of the same
size and crc32c, before any executor fetched them (issue 21, point 3).

Blob A: its HA copy is forged, the driver's own copy is intact: executors must refuse the HA
copy and take A from the driver's server. Blob B: its HA copy is forged and the driver's own
copy is gone: nobody holds the true bytes, so reads of B must fail with an error naming B's
key, never return the forged bytes (once with the error caught in the task, once failing the
job). A job reading an untouched blob runs next to B's. Tasks report the SHA-256 of what
``spark_steward.blobs.get`` gave them.

usage: blob_forgery_job.py OUT_FILE
"""

import hashlib
import json
import os
import sys
import threading
from pathlib import Path

import crc32c
from pyspark.sql import SparkSession

import spark_steward
from crc32c_forge import forged_twin


def reader(ref):
    def task(_):
        import hashlib
        import os
        from collections import Counter
        from pathlib import Path

        import spark_steward
        from spark_steward.blob.executor import executor_blobs

        cache = executor_blobs().cache
        before = Counter(cache.stats)
        try:
            data = Path(spark_steward.blobs.get(ref)).read_bytes()
            outcome = ["sha256", hashlib.sha256(data).hexdigest()]
        except Exception as e:  # reported, so every task's outcome is seen
            outcome = ["error", type(e).__name__, str(e)[:4000]]
        delta = Counter(cache.stats)
        delta.subtract(before)
        yield [os.getpid(), outcome, dict(+delta)]

    return task


def strict_reader(ref):
    def task(_):
        from pathlib import Path

        import spark_steward

        yield Path(spark_steward.blobs.get(ref)).read_bytes()[:0]

    return task


if __name__ == "__main__":
    out = sys.argv[1]
    spark = SparkSession.builder.appName("blob-forgery").getOrCreate()
    sc = spark.sparkContext
    runtime = spark_steward.runtime(spark)
    app_id = sc.applicationId
    data = {name: os.urandom(size) for name, size in
            (("a", 3 << 20), ("b", 2 << 20), ("good", 1 << 20))}
    refs = {name: spark_steward.blobs.put(value) for name, value in data.items()}

    def ha_file(ref):
        return Path(runtime.storage.path(f"apps/{app_id}/blobs/{ref.scope}/{ref.key}"))

    def driver_file(ref):
        return Path(runtime.context.local_dir) / app_id / "blobs" / ref.scope / ref.key.digest

    def cache_file(ref):
        return (Path(runtime.context.local_dir) / app_id / "blob-cache" / ref.scope
                / ref.key.digest)

    forged = {}
    for name in ("a", "b"):
        forged[name] = forged_twin(data[name])
        assert crc32c.crc32c(forged[name]) == refs[name].crc32c
        ha_file(refs[name]).write_bytes(forged[name])
    driver_file(refs["b"]).unlink()

    report = {"app_id": app_id,
              "keys": {name: ref.key.digest for name, ref in refs.items()},
              "forged_sha256": {name: hashlib.sha256(v).hexdigest() for name, v in forged.items()}}
    report["a_rows"] = sc.parallelize(range(4), 4).mapPartitions(reader(refs["a"])).collect()

    # B (nobody has its true bytes) next to a job reading an untouched blob.
    good_rows = []
    good_job = threading.Thread(target=lambda: good_rows.extend(
        sc.parallelize(range(4), 4).mapPartitions(reader(refs["good"])).collect()))
    good_job.start()
    report["b_rows"] = sc.parallelize(range(4), 4).mapPartitions(reader(refs["b"])).collect()
    good_job.join(120)
    report["good_rows"] = good_rows
    try:
        sc.parallelize(range(2), 2).mapPartitions(strict_reader(refs["b"])).collect()
        report["b_job_error"] = None
    except Exception as e:
        report["b_job_error"] = str(e)[-20000:]
    files = {}
    for name, ref in refs.items():
        files[name] = {
            where: (hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None)
            for where, path in (("driver", driver_file(ref)), ("cache", cache_file(ref)))}
    report["files"] = files
    spark.stop()
    with open(out + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(out + ".tmp", out)
