"""A driver that executors reach through NAT, with a storage dir the hosts do not share
(tests/cluster/test_capabilities.py).

usage: nat.py OUT_DIR

Run with ``spark.driver.host`` set to the address executors reach the driver at (a forwarder on
another host) and ``spark.driver.bindAddress`` to the driver host's own address, as with bridged
container networking; blob HA off, so blobs come from the driver's blob server; and
``spark.steward.storage.dir`` a ``file://`` dir in /tmp, which every host has privately (a
local disk mistaken for a shared one). Runs a plain Spark job, a blob and an ``sc.addFile`` file
read on every worker host, then a cached table counted and a checkpoint saved and restored, and
writes ``phase("result")`` with what each returned or raised (errors are reported, not raised).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import traceback
from typing import Any

from pyspark import SparkFiles
from pyspark.sql import SparkSession

import xhost


def read_blob(ref: Any) -> Any:
    def run(_: int) -> dict[str, Any]:
        import spark_steward

        with open(spark_steward.blobs.get(ref), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(SparkFiles.get("nat.txt")) as f:
            text = f.read()
        return {**xhost.here(), "sha256": digest, "file": text}

    return run


def main() -> None:
    out = sys.argv[1]
    xhost.init(out)
    xhost.ship_by_value()
    result: dict[str, Any] = {}
    try:
        spark = SparkSession.builder.appName("xhost-nat").getOrCreate()
    except Exception:
        xhost.phase("result", start_error=traceback.format_exc()[-3000:])
        raise
    sc = spark.sparkContext
    xhost.wait_for_executors(sc, 3)
    result["app_id"] = sc.applicationId
    result["spark"] = sc.parallelize(range(6), 6).map(lambda x: x * x).sum()
    try:
        import spark_steward

        result["enabled"] = spark_steward.is_enabled(spark)
        data = os.urandom(1 << 20)
        ref = spark_steward.blobs.put(data)
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "nat.txt"), "w") as f:
            f.write("through the forwarder\n")
        sc.addFile(os.path.join(folder, "nat.txt"))
        result["sha256"] = hashlib.sha256(data).hexdigest()
        result["rows"] = sc.parallelize(range(6), 6).map(read_blob(ref)).collect()
    except Exception:
        result["error"] = traceback.format_exc()[-3000:]
    result["storage"] = xhost.table_and_checkpoint(spark, "unshared")
    xhost.phase("result", **result)
    spark.stop()


if __name__ == "__main__":
    main()
