"""An ordinary PySpark job shipping files with Spark's own API; it knows nothing of
spark-steward.

usage: files_job.py WORK_DIR OUT_FILE
"""

import json
import os
import sys
import zipfile

from pyspark import SparkFiles
from pyspark.sql import SparkSession


def read(_):
    vocab = SparkFiles.get("vocab.txt")
    table = os.path.join(SparkFiles.get("tables.zip"), "t", "a.csv")
    with open(vocab) as v, open(table) as t:
        return vocab, v.read(), t.read()


if __name__ == "__main__":
    work, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(work, "vocab.txt"), "w") as f:
        f.write("hello\n")
    with zipfile.ZipFile(os.path.join(work, "tables.zip"), "w") as zf:
        zf.writestr("t/a.csv", "1,2\n")
    spark = SparkSession.builder.appName("files-job").getOrCreate()
    sc = spark.sparkContext
    sc.addFile(os.path.join(work, "vocab.txt"))
    sc.addArchive(os.path.join(work, "tables.zip"))
    rows = sc.parallelize(range(4), 4).map(read).collect()
    app_id = sc.applicationId
    spark.stop()
    with open(out, "w") as f:
        json.dump({"app_id": app_id, "rows": rows}, f)
