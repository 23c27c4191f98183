"""An ordinary PySpark job using Spark's own reliable checkpoints; it knows nothing of
spark-steward.

usage: spark_checkpoint_job.py OUT_FILE CHECKPOINT_DIR [--sleep SECONDS]

:func:`spark_checkpoints` is the job's body, which plain_job.py ``--checkpoint-dir`` runs too.
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession, functions as F


def spark_checkpoints(spark, checkpoint_dir):
    """An eager and a lazy ``df.checkpoint()`` and an ``rdd.checkpoint()`` into
    ``checkpoint_dir``; what each read back."""
    sc = spark.sparkContext
    sc.setCheckpointDir(checkpoint_dir)
    df = spark.range(0, 20000, numPartitions=4).withColumn("y", F.col("id") * 3)
    eager = df.checkpoint()                                   # written before it returns
    lazy = df.where("id % 2 = 0").checkpoint(eager=False)     # written by its first action
    rdd = sc.parallelize(range(1000), 3).map(lambda x: x * x)
    rdd.checkpoint()                                          # written by the next action
    return {
        "eager": eager.agg(F.sum("y")).collect()[0][0],
        "lazy": lazy.count(),
        "rdd": rdd.sum(),
        "rdd_checkpointed": rdd.isCheckpointed(),
    }


if __name__ == "__main__":
    out, checkpoint_dir = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("spark-checkpoint-job").getOrCreate()
    sc = spark.sparkContext
    result = {
        "app_id": sc.applicationId, "pid": os.getpid(),
        "jvm_pid": os.getppid(),   # spark-submit runs this script as a child of the driver JVM
        **spark_checkpoints(spark, checkpoint_dir),
    }
    with open(out, "w") as f:
        json.dump(result, f)
    if "--sleep" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
    spark.stop()
