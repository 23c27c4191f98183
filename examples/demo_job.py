"""An ordinary PySpark job. It never imports spark-steward: the conf flags that
examples/demo.py passes to spark-submit are all it takes to run under spark-steward."""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

WORDS = ("owner verified identity cleanup retried until it succeeds even after a crash "
         "blob checkpoint cache state executor driver").split()


@F.udf(StringType())
def shout(word):
    return word.upper() + "!"


def main() -> int:
    spark = SparkSession.builder.appName("spark-steward-demo").getOrCreate()
    sc = spark.sparkContext
    counts = (sc.parallelize(range(200_000), 8)
              .map(lambda i: (WORDS[(i * 7919) % len(WORDS)], 1))
              .reduceByKey(lambda a, b: a + b)
              .collect())
    print(f"[demo] {sum(c for _, c in counts)} words, {len(counts)} distinct, "
          f"on {sc.master} as {sc.applicationId}")
    top = (spark.createDataFrame(counts, ["word", "n"]).orderBy(F.desc("n"), "word").limit(3)
           .select(shout("word").alias("word"), "n").collect())
    print("[demo] top words: " + ", ".join(f"{r.word} {r.n}" for r in top))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
