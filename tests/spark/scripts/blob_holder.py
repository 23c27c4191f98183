"""Puts a blob and a host-local state value, then keeps running until killed (or stops
cleanly with --stop).

usage: blob_holder.py OUT_FILE [--stop]
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession

import spark_steward

if __name__ == "__main__":
    spark = SparkSession.builder.appName("blob-holder").getOrCreate()
    ref = spark_steward.blobs.put(os.urandom(1 << 20))

    def use(_):
        import spark_steward.local

        state = spark_steward.local.state("holder")
        state.put("value", b"held" * 1000)
        return spark_steward.blobs.get(ref), state.path("value")

    path, state_path = spark.sparkContext.parallelize([0], 1).map(use).collect()[0]
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump({"app_id": spark.sparkContext.applicationId, "pid": os.getpid(),
                   "key": ref.key.digest, "cached": path, "state": state_path}, f)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    if "--stop" in sys.argv:
        spark.stop()
    else:
        time.sleep(600)
