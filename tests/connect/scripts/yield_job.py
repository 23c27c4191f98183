"""A classic driver with the autoload off: the plugin hosts the runtime, then an explicit
attach in this process takes the application over. Writes what it saw as JSON to argv[1]."""

import json
import os
import sys
import time

from pyspark.sql import SparkSession

from spark_steward.applications import ApplicationRegistry
from spark_steward.kernel import jvm
from spark_steward.storage import Storage

out, storage_url = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.getOrCreate()
sc = spark.sparkContext
app = sc.applicationId
registry = ApplicationRegistry(Storage.from_url(storage_url), heartbeat_timeout=120)
deadline = time.monotonic() + 90
while registry.read(app) is None and time.monotonic() < deadline:
    time.sleep(0.1)
hosted_pid = jvm.hosted_runtime_pid(sc)
before = registry.read(app)
seen = {"hosted_pid": hosted_pid, "record_pid_hosted": before.pid if before else None,
        "jvm_pid": int(sc._jvm.java.lang.ProcessHandle.current().pid()),
        "python_pid": os.getpid()}

import spark_steward  # noqa: E402
from spark_steward.kernel.runtime import current_runtime  # noqa: E402

spark_steward.attach(spark)
runtime = current_runtime()
after = registry.read(app)
seen.update(in_process=runtime is not None and not runtime.hosted,
            hosted_pid_after=jvm.hosted_runtime_pid(sc),
            hosted_alive_after=os.path.exists(f"/proc/{hosted_pid}") and
            open(f"/proc/{hosted_pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z",
            record_pid_after=after.pid, finished_after=after.finished_at,
            result=spark.range(100).selectExpr("sum(id)").collect()[0][0])
spark.stop()
seen["finished_at_end"] = registry.read(app).finished_at is not None
with open(out, "w") as f:
    json.dump(seen, f)
