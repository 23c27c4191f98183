"""Puts a blob and keeps running until killed.

usage: blob_holder.py OUT_FILE
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
    path = spark.sparkContext.parallelize([0], 1).map(
        lambda _: spark_steward.blobs.get(ref)).collect()[0]
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump({"app_id": spark.sparkContext.applicationId, "pid": os.getpid(),
                   "key": ref.key.digest, "cached": path}, f)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
