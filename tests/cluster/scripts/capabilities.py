"""Every capability across hosts in one application (tests/cluster/test_capabilities.py).

usage: capabilities.py OUT_DIR

Run by spark-submit on the harness's driver host with the steward conf (a ``file://`` storage
dir in the shared dir, ``spark.steward.cache.host-replicas=true``) and three single-core
executors, one per worker host. Phases (see xhost.py):

1. blobs through HA: an 8 MiB blob read by 12 tasks (sha-256 and the process's blob cache
   counter delta per task, and where the task ran: pid namespace, /tmp, its host name's
   address, as for the driver) and the driver's blob server counters around the job;
2. blobs through the driver's blob server: a 4 MiB blob whose HA copy is deleted first;
3. ``sc.addFile`` / ``sc.addArchive`` of files in the driver host's private /tmp, read with
   ``SparkFiles.get`` by tasks on every host;
4. ``spark_steward.local.state(...).get_or_create`` in 12 tasks; every build is appended to
   ``OUT_DIR/builds.log``; the value names the host that built it;
5. the blob of 1 and the value of 4 again, from new Python workers (``sc.environment`` changed,
   so every executor starts a new worker factory);
6. a cached table whose rows name the host that computed them (a Python UDF counted by an
   accumulator), read back with a second UDF naming the reading host;
7. three file-merged saves of series ``xhost`` (retained=1, 12 partitions);

then ``pause("inspect")`` with everything so far: the test looks at the hosts' private /tmp and
SIGKILLs the executor JVM of the host it names in ``inspect.go``; then

8. jobs until a task ran on a new executor of that host: blob and local-state reads there;
9. the cached table read again;

and ``phase("result")`` with everything.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from pyspark import SparkFiles
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_steward
import spark_steward.local
import xhost
from spark_steward.blob.service import BlobService
from spark_steward.checkpoint.service import CheckpointService

STATE = "models"


def where() -> dict[str, Any]:
    """Where this process runs, as the harness sees it (tests/cluster/test_capabilities.py's
    harness test): its pid namespace and /tmp (inodes), and the address its host name
    resolves to."""
    return {"pidns": os.stat("/proc/self/ns/pid").st_ino, "tmp": os.stat("/tmp").st_ino,
            "resolved": socket.gethostbyname(socket.gethostname())}


def blob_task(ref: Any) -> Callable[[int], dict[str, Any]]:
    def run(_: int) -> dict[str, Any]:
        from spark_steward.blob.executor import executor_blobs

        stats = executor_blobs().cache.stats
        before = Counter(stats)
        path = spark_steward.blobs.get(ref)
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        delta = Counter(stats)
        delta.subtract(before)
        time.sleep(0.1)  # keep the executor busy so the others take tasks too
        return {**xhost.here(), **where(), "path": path, "sha256": digest,
                "delta": dict(+delta)}

    return run


def files_task(_: int) -> dict[str, Any]:
    from spark_steward.blob.executor import executor_blobs

    stats = executor_blobs().cache.stats
    before = Counter(stats)
    vocab = SparkFiles.get("vocab.txt")
    table = os.path.join(SparkFiles.get("tables.zip"), "t", "a.csv")
    with open(vocab) as v, open(table) as t:
        texts = (v.read(), t.read())
    delta = Counter(stats)
    delta.subtract(before)
    time.sleep(0.1)
    return {**xhost.here(), "vocab_path": vocab, "vocab": texts[0], "table_path": table,
            "table": texts[1], "delta": dict(+delta)}


def state_task(builds: str) -> Callable[[int], dict[str, Any]]:
    def run(_: int) -> dict[str, Any]:
        state = spark_steward.local.state(STATE)
        host = socket.gethostname()

        def build() -> bytes:
            with open(builds, "a") as log:
                log.write(f"{host} {os.getpid()} {os.path.basename(os.getcwd())}\n")
            time.sleep(0.3)
            return f"built-on:{host}:".encode() + b"x" * 100_000

        value = state.get_or_create("ranker", build)
        assert isinstance(value, bytes)
        time.sleep(0.1)
        return {**xhost.here(), "built_on": value.split(b":")[1].decode(),
                "size": len(value), "path": state.path("ranker")}

    return run


def restart_task(ref: Any, builds: str) -> Callable[[int], dict[str, Any]]:
    blob = blob_task(ref)
    state = state_task(builds)

    def run(i: int) -> dict[str, Any]:
        out = blob(i)
        out.update({k: v for k, v in state(i).items() if k in ("built_on", "size")})
        return out

    return run


def rows_of(spark: Any, i: int) -> Any:
    return (spark.range(0, 2000 * i, numPartitions=12).withColumn("i", F.lit(i))
            .withColumn("sq", F.col("id") * F.col("id")))


def table_read(t: Any) -> list[dict[str, Any]]:
    @F.udf("string")
    def reader(_: int) -> str:
        import socket as s

        return s.gethostname()

    rows = (t.withColumn("reader", reader("id")).groupBy("writer", "reader")
            .agg(F.count("*").alias("n"), F.sum("v").alias("v")).collect())
    return [r.asDict() for r in rows]


def main() -> None:
    out = sys.argv[1]
    xhost.init(out)
    xhost.ship_by_value()
    spark = SparkSession.builder.appName("xhost-capabilities").getOrCreate()
    sc = spark.sparkContext
    runtime = spark_steward.runtime(spark)
    app = sc.applicationId
    xhost.wait_for_executors(sc, 3)
    result: dict[str, Any] = {"app_id": app, "driver_host": socket.gethostname(),
                              "local_dir": runtime.conf.local_dir(),
                              "driver": {"hostname": socket.gethostname(), **where()},
                              "spark_driver_host": sc.getConf().get("spark.driver.host"),
                              "marker": sc.getConf().get("spark.harness.marker", "")}
    server = runtime.service(BlobService).server

    # 1. through HA
    data = os.urandom(8 << 20)
    ref = spark_steward.blobs.put(data)
    before = server.stats
    rows = sc.parallelize(range(12), 12).map(blob_task(ref)).collect()
    after = server.stats
    result["ha"] = {"sha256": hashlib.sha256(data).hexdigest(), "key": ref.key.digest,
                    "scope": ref.scope, "size": len(data), "rows": rows,
                    "served": after.blobs_served - before.blobs_served,
                    "ha_copy": runtime.storage.path(f"apps/{app}/blobs/{ref.scope}/{ref.key}")}

    # 2. through the driver's blob server
    data2 = os.urandom(4 << 20)
    ref2 = spark_steward.blobs.put(data2)
    ha_copy = Path(runtime.storage.path(f"apps/{app}/blobs/{ref2.scope}/{ref2.key}"))
    ha_copy.unlink()
    before = server.stats
    rows = sc.parallelize(range(12), 12).map(blob_task(ref2)).collect()
    after = server.stats
    result["server"] = {"sha256": hashlib.sha256(data2).hexdigest(), "key": ref2.key.digest,
                        "size": len(data2), "rows": rows,
                        "served": after.blobs_served - before.blobs_served,
                        "bytes": after.bytes_served - before.bytes_served}

    # 3. transparent files from the driver host's private /tmp
    work = tempfile.mkdtemp(prefix="xhost-files-")
    with open(os.path.join(work, "vocab.txt"), "w") as f:
        f.write("hello from the driver host\n")
    with zipfile.ZipFile(os.path.join(work, "tables.zip"), "w") as zf:
        zf.writestr("t/a.csv", "1,2\n3,4\n")
    sc.addFile(os.path.join(work, "vocab.txt"))
    sc.addArchive(os.path.join(work, "tables.zip"))
    result["files"] = {"source": work,
                       "rows": sc.parallelize(range(9), 9).map(files_task).collect()}

    # 4. local state, built once per host
    builds = os.path.join(out, "builds.log")
    rows = sc.parallelize(range(12), 12).map(state_task(builds)).collect()
    result["state"] = {"rows": rows, "builds": Path(builds).read_text().splitlines()}

    # 5. new Python workers on every host (a new environment is a new worker factory)
    sc.environment["XHOST_WORKERS"] = "second"
    rows = sc.parallelize(range(6), 6).map(restart_task(ref, builds)).collect()
    result["again"] = {"rows": rows, "builds": Path(builds).read_text().splitlines()}

    # 6. a cached table written on every host, read on every host
    calls = sc.accumulator(0)

    @F.udf("string")
    def writer(_: int) -> str:
        import socket as s

        calls.add(1)
        return s.gethostname()

    df = (spark.range(0, 6000, numPartitions=6).withColumn("writer", writer("id"))
          .withColumn("v", F.col("id") * 3))
    t = spark_steward.cache(df)
    count = t.count()
    computed = calls.value
    pairs = table_read(t)
    data = Path(runtime.storage.path(f"tables/data/{t.storage_key}"))
    result["table"] = {"key": t.storage_key, "count": count, "computed": computed,
                       "pairs": pairs, "calls_after_read": calls.value,
                       "files": {str(p.relative_to(data)): hashlib.sha256(p.read_bytes())
                                 .hexdigest() for p in data.rglob("*.parquet")}}

    # 7. file-merged checkpoints written on every host
    store = runtime.service(CheckpointService).require_store()
    series = spark_steward.checkpoints("xhost", retained=1)
    saves = []
    for i in (1, 2, 3):
        number = series.save(rows_of(spark, i))
        entry = store.get_completed("xhost", number)
        saves.append({"id": number, "physical": sorted(entry.physical), "rows": entry.rows})
    idle = store.cleaner.wait_idle(60.0)
    result["checkpoints"] = {"saves": saves, "idle": idle}

    answer = xhost.pause("inspect", **result)
    victim = answer["kill"]

    # 8. the replacement executor on the victim host adopts what its predecessor made
    seen = {r["executor"] for part in ("ha", "server") for r in result[part]["rows"]
            if r["host"] == victim}
    seen |= {r["executor"] for part in ("state", "again") for r in result[part]["rows"]
             if r["host"] == victim}
    began = time.monotonic()
    rounds = []
    while True:
        rows = sc.parallelize(range(6), 6).map(restart_task(ref, builds)).collect()
        rounds.append(rows)
        if any(r["host"] == victim and r["executor"] not in seen for r in rows):
            break
        if time.monotonic() - began > 180:
            raise TimeoutError(f"no task ran on a new executor of {victim} within 180 s")
        time.sleep(0.5)
    result["restart"] = {"victim": victim, "old_executors": sorted(seen), "rounds": rounds,
                         "builds": Path(builds).read_text().splitlines(),
                         "seconds": time.monotonic() - began}

    # 9. the cached table after the executor loss
    result["table_after"] = {"pairs": table_read(t), "calls": calls.value,
                             "key": t.storage_key}
    xhost.phase("result", **result)
    spark.stop()


if __name__ == "__main__":
    main()
