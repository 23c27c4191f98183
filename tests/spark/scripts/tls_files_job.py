"""Ships a file with Spark's own ``sc.addFile`` on a cluster whose Spark traffic is encrypted,
and reports what the tasks read and how the blob server served it.

usage: tls_files_job.py WORK_DIR OUT_FILE
"""

import hashlib
import json
import os
import sys

from pyspark import SparkFiles
from pyspark.sql import SparkSession


def read(_):
    with open(SparkFiles.get("payload.bin"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


if __name__ == "__main__":
    work, out = sys.argv[1], sys.argv[2]
    data = os.urandom(3 << 20)
    with open(os.path.join(work, "payload.bin"), "wb") as f:
        f.write(data)
    spark = SparkSession.builder.appName("tls-files-job").getOrCreate()
    sc = spark.sparkContext
    sc.addFile(os.path.join(work, "payload.bin"))
    digests = sc.parallelize(range(4), 4).map(read).collect()

    import spark_steward
    from spark_steward.blob.service import BlobService

    runtime = spark_steward.runtime(spark)
    server = runtime.service(BlobService).server
    report = {"digests": digests, "expected": hashlib.sha256(data).hexdigest(),
              "pinned_cert": bool(runtime.context.server_cert),
              "blobs_served": server.stats.blobs_served,
              "auth_failures": server.stats.auth_failures}
    spark.stop()
    with open(out, "w") as f:
        json.dump(report, f)
