"""An ordinary PySpark job. It never imports spark-steward: the conf flags that
examples/demo.py passes to spark-submit are all it takes to run under spark-steward."""

import os
import sys
import tempfile

from pyspark import SparkFiles
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

WORDS = ("owner verified identity cleanup retried until it succeeds even after a crash "
         "blob checkpoint cache state executor driver").split()


@F.udf(StringType())
def shout(word):
    return word.upper() + "!"


def without_stopwords(words):
    # SparkFiles.get as in any Spark job; under spark-steward the file is a verified blob.
    with open(SparkFiles.get("stopwords.txt")) as f:
        stop = set(f.read().split())
    return (w for w in words if w not in stop)


def main() -> int:
    spark = SparkSession.builder.appName("spark-steward-demo").getOrCreate()
    sc = spark.sparkContext
    stopwords = os.path.join(tempfile.mkdtemp(prefix="demo-"), "stopwords.txt")
    with open(stopwords, "w") as f:
        f.write("it even after until\n")
    sc.addFile(stopwords)
    counts = (sc.parallelize(range(200_000), 8)
              .map(lambda i: WORDS[(i * 7919) % len(WORDS)])
              .mapPartitions(without_stopwords)
              .map(lambda w: (w, 1))
              .reduceByKey(lambda a, b: a + b)
              .collect())
    print(f"[demo] {sum(c for _, c in counts)} words, {len(counts)} distinct, "
          f"on {sc.master} as {sc.applicationId}")
    # A reliable checkpoint as in any Spark job; under spark-steward its folder is owned by the
    # checkpoint store and deleted at stop (Spark alone would leave it behind).
    sc.setCheckpointDir(os.path.join(tempfile.mkdtemp(prefix="demo-"), "checkpoints"))
    table = spark.createDataFrame(counts, ["word", "n"]).checkpoint()
    # df.cache() as in any Spark job; with spark.steward.cache.transparent=true the result is
    # written once to the storage dir (verified, survives executor loss) and deleted at stop.
    shouted = table.select(shout("word").alias("word"), "n").cache()
    top = shouted.orderBy(F.desc("n"), "word").limit(3).collect()
    print("[demo] top words: " + ", ".join(f"{r.word} {r.n}" for r in top))
    print(f"[demo] {shouted.filter(F.col('word').endswith('!')).count()} shouted words, "
          "read from the cache")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
