"""Where the driver runtime runs when the Connect server is pyspark's own: with
``spark.api.mode=connect`` and a local master, pyspark builds a classic context in the
client's own Python and starts the server in that JVM, so the runtime runs in-process there
and the plugin hosts none. (A PySpark driver with the autoload off is not hosted either: its
early events wait for an explicit attach, tests/spark/test_attach.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.connect.harness import server_flags


def test_api_mode_connect_with_a_local_master_runs_the_runtime_in_process(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    flags = server_flags(storage, tmp_path / "local")
    confs = dict(flag.split("=", 1) for flag in flags if flag != "--conf")
    script = f"""
import json, os
from pyspark.sql import SparkSession
from spark_steward.applications import ApplicationRegistry
from spark_steward.kernel.runtime import current_runtime
from spark_steward.storage import Storage
def ppid(p):
    try:
        return int(open(f'/proc/{{p}}/stat').read().rsplit(')', 1)[1].split()[1])
    except (OSError, ValueError):
        return -1
def hosted_below(root):
    # this process's JVM child, and that JVM's children running the host module
    pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
    jvms = {{p for p in pids if ppid(p) == root}}
    return [p for p in pids if ppid(p) in jvms and 'kernel.host' in
            open(f'/proc/{{p}}/cmdline', 'rb').read().decode(errors='replace')]
b = SparkSession.builder.master("local[1]").config("spark.api.mode", "connect")
for k, v in {confs!r}.items():
    b = b.config(k, v)
b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
b = b.config("spark.connect.grpc.binding.address", "127.0.0.1")
spark = b.getOrCreate()
runtime = current_runtime()
seen = dict(connect=type(spark).__module__, count=spark.range(10).count(),
            in_process=runtime is not None and not runtime.hosted,
            hosted=hosted_below(os.getpid()))
app = runtime.app_id
spark.stop()
reg = ApplicationRegistry(Storage.from_url({storage.as_uri()!r}), heartbeat_timeout=120)
seen["finished"] = reg.read(app).finished_at is not None
print("SEEN=" + json.dumps(seen))
"""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("SEEN=")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-6000:]
    seen = json.loads(lines[0][5:])
    assert seen["connect"].startswith("pyspark.sql.connect") and seen["count"] == 10
    assert seen["in_process"] and seen["hosted"] == [] and seen["finished"]
