"""A small PySpark job whose driver JVM dumps the classes it loaded (tests/support/class_cache.py):
what the suite's applications do most (SQL with a shuffle, a Python UDF, Parquet and text files,
RDD checkpoints, a cache), so their JVMs find those classes in the archive.

usage: spark-submit warm_jvm.py WORK_DIR
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(work: str) -> None:
    spark = SparkSession.builder.appName("spark-steward-tests-warm-jvm").getOrCreate()
    sc = spark.sparkContext
    sc.setCheckpointDir(f"{work}/checkpoints")
    double = F.udf(lambda v: v * 2, "long")
    df = spark.range(2000).withColumn("g", F.col("id") % 7).withColumn("d", double("id"))
    df.write.parquet(f"{work}/parquet")
    back = spark.read.parquet(f"{work}/parquet").cache()
    back.groupBy("g").agg(F.sum("d"), F.max("id")).orderBy("g").collect()
    back.checkpoint().count()
    rdd = sc.parallelize(range(100), 2).map(lambda x: (x % 3, x)).reduceByKey(lambda a, b: a + b)
    rdd.checkpoint()
    rdd.collect()
    sc.parallelize(["a", "b"], 1).saveAsTextFile(f"{work}/text")
    spark.createDataFrame([(1, "x")], "a int, b string").toPandas() if _has_pandas() else None
    spark.stop()


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main(sys.argv[1])
