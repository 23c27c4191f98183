"""Run by spark-submit for tests/spark/test_degraded_start.py with spark.steward.enabled=true
and a storage dir that fails at start: what spark-steward makes transparent (addFile,
df.cache(), df.checkpoint()) must behave as Spark's own, explicit calls must raise one clear
error.

    degraded_job.py OUT WORK_DIR
"""

import json
import os
import sys

from pyspark import SparkFiles
from pyspark.sql import SparkSession

import spark_steward

out, work = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.appName("degraded-job").getOrCreate()
sc = spark.sparkContext
with open(os.path.join(work, "vocab.txt"), "w") as f:
    f.write("hello\n")
sc.addFile(os.path.join(work, "vocab.txt"))
read = sc.parallelize(range(2), 2).map(
    lambda _: open(SparkFiles.get("vocab.txt")).read()).collect()
cached = spark.range(0, 1000, numPartitions=2).cache()
cached_sum = cached.selectExpr("sum(id)").collect()[0][0]
sc.setCheckpointDir(os.path.join(work, "spark-checkpoints"))
checkpointed = spark.range(0, 100, numPartitions=2).checkpoint()
errors = {}
for name, call in [("blobs.put", lambda: spark_steward.blobs.put(b"x")),
                   ("runtime", lambda: spark_steward.runtime(spark)),
                   ("cache", lambda: spark_steward.cache(spark.range(3)))]:
    try:
        call()
        errors[name] = None
    except Exception as exc:  # noqa: BLE001 - the test asserts on the class and message
        errors[name] = [type(exc).__name__, str(exc)]
result = {"read": read, "cached_sum": cached_sum, "checkpointed": checkpointed.count(),
          "spark_checkpoint_files": sorted(os.listdir(os.path.join(work, "spark-checkpoints"))),
          "errors": errors, "storage_used": cached.storageLevel.useMemory}
with open(out, "w") as f:
    json.dump(result, f)
spark.stop()
