"""Starts Spark with or without the plugin, runs a job, attaches afterwards, runs another job.

usage: late_attach.py OUT_FILE with-plugin|without-plugin|tiny-buffer
Run with SPARK_STEWARD_AUTOLOAD=0 so nothing attaches until attach() is called.

without-plugin then goes on to a failing attach: detaches (every pyspark patch was installed
by the attach), then attaches again with a capability whose start fails after the blob service
started; reports (as ``failed_attach``) the error and what ``sc.addFile`` + ``SparkFiles.get``
do afterwards.
"""

import json
import os
import sys
import tempfile

from pyspark.sql import SparkSession

import spark_steward
from spark_steward.kernel.events import JobStart, TaskEnd
from spark_steward.kernel.runtime import RuntimeService
from spark_steward.kernel.services import register_service


class Recorder(RuntimeService):
    name = "recorder"
    events = []

    def start(self, runtime):
        runtime.dispatcher.subscribe(Recorder.events.append)


class Boom(RuntimeService):
    name = "boom"
    rank = 25  # after the blob service (20), before checkpoints (30)

    def start(self, runtime):
        raise RuntimeError("boom: this capability cannot start")


def failing_attach(spark):
    """After an attach and a detach: an attach that fails, then Spark's own addFile."""
    from pyspark import SparkFiles

    sc = spark.sparkContext
    spark_steward.detach()
    register_service(Boom.name, Boom)
    error = None
    try:
        spark_steward.attach(spark)
    except RuntimeError as exc:
        error = str(exc)
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "hello.txt")
    with open(path, "w") as f:
        f.write("hello from addFile")
    sc.addFile(path)
    read = sc.parallelize([0], 1).map(lambda _: open(SparkFiles.get("hello.txt")).read())
    return {"error": error, "enabled": spark_steward.is_enabled(spark),
            "content": read.collect()[0], "driver_path": SparkFiles.get("hello.txt")}


if __name__ == "__main__":
    out, mode = sys.argv[1], sys.argv[2]
    register_service(Recorder.name, Recorder)
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    if mode in ("with-plugin", "tiny-buffer"):
        builder = (builder.config("spark.plugins", "io.sparksteward.shim.StewardPlugin")
                   .config("spark.jars", spark_steward.jar_path())
                   .config("spark.steward.enabled", "true"))
    if mode == "tiny-buffer":
        builder = builder.config("spark.steward.events.buffer-capacity", "10")
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    sc.setJobGroup("before-attach", "before")
    before_tasks = 20 if mode == "tiny-buffer" else 4  # 20 tasks: ~42 events > capacity 10
    sc.parallelize(range(before_tasks), before_tasks).count()
    runtime = spark_steward.attach(spark)
    sc.setJobGroup("after-attach", "after")
    sc.parallelize(range(3), 3).count()
    assert runtime.flush_events(60)
    groups = [e.job_group for e in Recorder.events if isinstance(e, JobStart)]
    task_ends = sum(1 for e in Recorder.events if isinstance(e, TaskEnd))
    result = {"groups": groups, "task_ends": task_ends, "from_plugin": runtime.bridge.from_plugin,
              "enabled": spark_steward.is_enabled(spark), "dropped": runtime.dispatcher.dropped,
              "gaps": runtime.dispatcher.gaps, "seqs": [e.seq for e in Recorder.events]}
    if mode == "without-plugin":
        result["failed_attach"] = failing_attach(spark)
    spark.stop()
    with open(out, "w") as f:
        json.dump(result, f)
