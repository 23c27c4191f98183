"""Run by spark-submit for tests/spark/test_app_end_cleanup.py and test_platform_conf.py:
host-local state on every executor, then (by mode) an executor ended in the middle of the
application, then ``spark.stop()``. Writes what the application's host-local folder held at
each step.

    app_end_job.py OUT MODE [--driver-removal-off]

MODE: ``end`` (nothing ends early), ``kill`` (``SparkContext.killExecutor``: an orderly stop,
the executor's plugin asks the driver), ``sigkill`` (SIGKILL of an executor JVM: no word from
it; standalone starts a replacement). ``--driver-removal-off`` switches off the driver
service's own removal of the folder, so only the executors can have removed it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession


def put_state(index, it):
    import spark_steward.local

    store = spark_steward.local.state("app-end")
    store.put(f"p{index}", b"value-%d" % index)
    yield os.path.basename(os.getcwd())  # the executor's work dir is named after its id


def read_state(index, it):
    import spark_steward.local

    store = spark_steward.local.state("app-end")
    yield sorted(store.ls()), os.path.basename(os.getcwd())


def executor_pid(app_id, executor_id):
    out = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*--executor-id "
                          f"{executor_id} .*{app_id}"], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split()]
    return pids[0] if pids else None


def wait_for(predicate, timeout=90.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not met within {timeout}s")


def registered_executors(sc):
    return sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver


def listing(folder):
    """The folder's content, less the executors' peer endpoints (``peers/<executor>.json``):
    each JVM's own registration, which comes and goes with it."""
    if not folder.exists():
        return None
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if not (p.parent.name == "peers" and p.suffix == ".json"))


def main():
    out_path, mode = sys.argv[1], sys.argv[2]
    if "--driver-removal-off" in sys.argv[3:]:
        from spark_steward.local.service import LocalService

        LocalService.stop = lambda self, runtime: None
    spark = SparkSession.builder.appName("app-end-job").getOrCreate()
    sc = spark.sparkContext
    app_id = sc.applicationId
    local_dir = Path(sc.getConf().get("spark.steward.local.dir"))
    folder = local_dir / app_id
    report = {"app_id": app_id, "folder": str(folder), "mode": mode}
    executors = int(sc.master.split("[")[1].split(",")[0])  # local-cluster[N,cores,memory]
    wait_for(lambda: registered_executors(sc) == executors, what=f"{executors} executors")
    report["put_on"] = sorted(set(sc.parallelize(range(8), 8)
                                  .mapPartitionsWithIndex(put_state).collect()))
    report["before"] = listing(folder)

    if mode in ("kill", "sigkill"):
        pid = executor_pid(app_id, "1")
        report["killed_pid"] = pid
        if mode == "kill":
            report["kill_acknowledged"] = bool(sc._jsc.sc().killExecutor("1"))
        else:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: executor_pid(app_id, "1") is None, what="executor 1's JVM gone")
        if mode == "kill":
            wait_for(lambda: registered_executors(sc) == 1, what="executor 1 deregistered")
        else:
            wait_for(lambda: registered_executors(sc) == 2 and executor_pid(app_id, "2"),
                     what="a replacement executor")
        # Give an executor that removed the folder in error the time to have done it.
        time.sleep(2)
        report["after_kill"] = listing(folder)
        rows = sc.parallelize(range(4), 4).mapPartitionsWithIndex(read_state).collect()
        report["read_after_kill"] = [keys for keys, _ in rows]
        report["read_on"] = sorted({executor for _, executor in rows})
        report["after_kill_job"] = listing(folder)

    started = time.monotonic()
    spark.stop()
    report["stop_seconds"] = time.monotonic() - started
    report["after_stop"] = listing(folder)
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
