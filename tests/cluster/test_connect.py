"""A Spark Connect server on the driver host of the multi-host harness, its executors on the
worker hosts, its clients on other hosts: the runtime the plugin hosts beside the server, and
each session's df.checkpoint() folders in the shared storage, released when the session closes
(a client on one host releases cleanly) or expires (a client on another host is SIGKILLed)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from spark_steward.kernel.jvm import CONNECT_EXTENSIONS
from tests.cluster.conftest import steward_setup
from tests.cluster.harness import Cluster, HostProcess
from tests.connect.harness import wait_until

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PORT = 15002
_APP_ID = re.compile(r"\bapp-\d{14}-\d{4}\b")


def client_script(url: str, code: str, hold: bool) -> str:
    """A client's script; a held one then keeps its session alive (a request every 2 s: idle,
    it would expire with the test's 8 s timeout) until it is killed."""
    return ("import json, time\nfrom pyspark.sql import SparkSession\n"
            f"spark = SparkSession.builder.remote({url!r}).getOrCreate()\n" + code +
            "\nprint('RESULT=' + json.dumps(result), flush=True)\n" +
            ("while True:\n    spark.conf.get('spark.app.name')\n    time.sleep(2)\n"
             if hold else ""))


def result_of(lines: Any) -> Any:
    for line in lines:
        if line.startswith("RESULT="):
            return json.loads(line[len("RESULT="):])
    return None


def test_a_connect_server_serves_sessions_from_other_hosts(cluster: Cluster,
                                                           tmp_path: Path) -> None:
    flags, storage, _ = steward_setup(cluster, "connect", {
        "spark.connect.grpc.binding.address": cluster.address("driver"),
        "spark.connect.grpc.binding.port": str(PORT),
        "spark.connect.session.manager.defaultSessionTimeout": "8s",
        "spark.connect.session.manager.maintenanceInterval": "1s",
        "spark.executor.cores": "1"})
    jar = subprocess.run([sys.executable, "-m", "spark_steward.cli", "jar"], check=True,
                         capture_output=True, text=True).stdout.strip()
    extensions = [item for key, cls in CONNECT_EXTENSIONS for item in ("--conf", f"{key}={cls}")]
    server_flags = [*flags, "--conf", f"spark.jars={jar}",
                    "--conf", "spark.plugins=io.sparksteward.shim.StewardPlugin", *extensions,
                    "--class", SERVER_CLASS]
    log_path = tmp_path / "server.log"
    url = f"sc://{cluster.address('driver')}:{PORT}"
    held: HostProcess | None = None
    with open(log_path, "w") as log:
        server = cluster.submit_background("spark-internal", conf=server_flags, stdout=log,
                                           stderr=subprocess.STDOUT)
        try:
            def text() -> str:
                return log_path.read_text(errors="replace")

            app = wait_until(lambda: (m := _APP_ID.search(text())) and m.group(0), 120,
                             "the server's application")
            wait_until(lambda: f"attached to {app}" in text(), 120, "the runtime's attach")
            assert "beside the driver" in text()
            def folders() -> set[str]:  # ground truth: the rdd-<id> folders in storage
                return {p.name for p in (storage / "apps" / app / "spark-checkpoints")
                        .glob("*/rdd-*")}

            # A client on w1 keeps its session; its checkpoint is written by executors on the
            # worker hosts into the shared storage.
            held = cluster.popen("w1", [sys.executable, "-u", "-c", client_script(
                url, "import socket\ndf = spark.range(60).repartition(3).checkpoint()\n"
                     "result = [df.count(), socket.gethostname(), "
                     "spark.client._session_id]", hold=True)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert held.stdout is not None
            result = result_of(held.stdout)
            assert result is not None, (held.stderr.read() if held.stderr else "")[-3000:]
            count, host, session = result
            assert count == 60 and host == cluster.hostname("w1")
            kept = wait_until(folders, 30, "the held session's folder")
            # A client on w2 checkpoints and releases its session: only its folder goes. It
            # also uses the thin client: a named series, a cached table, and a blob its UDF
            # reads on the worker hosts from the driver host's blob server.
            done = cluster.run("w2", [sys.executable, "-c", client_script(
                url, "import socket, spark_steward\n"
                     "from pyspark.sql.functions import udf\n"
                     "df = spark.range(30).checkpoint()\n"
                     "cp = spark_steward.checkpoints('hosts')\n"
                     "cp.save(spark.range(40).repartition(2))\n"
                     "t = spark_steward.cache(spark.range(50).selectExpr('id * 2 AS y'))\n"
                     "ref = spark_steward.blobs.put(b'from w2')\n"
                     "@udf('string')\n"
                     "def read(i):\n"
                     "    import socket, spark_steward\n"
                     "    return spark_steward.blobs.read_bytes(ref).decode() + '@' + "
                     "socket.gethostname()\n"
                     "reads = sorted({r[0] for r in spark.range(6).repartition(3)"
                     ".select(read('id')).collect()})\n"
                     # An artifact its UDF reads on the worker hosts (Spark's own copies).
                     "open('/tmp/w2-artifact.txt', 'w').write('w2 artifact')\n"
                     "spark.addArtifacts('/tmp/w2-artifact.txt', file=True)\n"
                     "@udf('string')\n"
                     "def peek(i):\n"
                     "    from pyspark import SparkFiles\n"
                     "    path = SparkFiles.get('w2-artifact.txt')\n"
                     "    return open(path).read() + '|' + path\n"
                     "peeks = {r[0] for r in spark.range(6).repartition(3)"
                     ".select(peek('id')).collect()}\n"
                     "result = [df.count(), cp.latest().count(), "
                     "t.selectExpr('sum(y)').collect()[0][0], t.storage_key, reads, "
                     "sorted(peeks)]\n"
                     "spark.stop()", hold=False)], timeout=180)
            got = result_of(done.stdout.splitlines())
            assert got is not None, done.stderr[-3000:]
            count, latest, total, key, reads, peeks = got
            assert (count, latest, total) == (30, 40, 2 * sum(range(50)))
            # Read from Spark's copies in the worker hosts' work dirs.
            assert {p.split("|")[0] for p in peeks} == {"w2 artifact"}
            assert all(p.split("|")[1].startswith("/tmp/spark-work/") for p in peeks), peeks
            assert reads and {r.split("@")[0] for r in reads} == {"from w2"}
            # Read by executors on worker hosts, none on the driver's.
            assert cluster.hostname("driver") not in {r.split("@")[1] for r in reads}
            wait_until(lambda: folders() == kept, 60, "the released session's folder gone")

            def artifact_copies() -> list[str]:  # ground truth: each worker host's work dirs
                return [line for worker in ("w1", "w2", "w3") for line in cluster.run(
                    worker, ["find", "/tmp/spark-work", "-name", "w2-artifact.txt"],
                    timeout=30).stdout.split()]

            # The executors on the worker hosts evict the ended session: their copies go.
            wait_until(lambda: not artifact_copies(), 30, "the workers' artifact copies gone")
            wait_until(lambda: not list((storage / "tables" / "data" / key).rglob("*.parquet")),
                       60, "the released session's cached table gone")
            status = json.loads(subprocess.run(
                [sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                 storage.as_uri(), "--json"], check=True, capture_output=True,
                text=True).stdout)
            [record] = [a for a in status["applications"] if a["app_id"] == app]
            assert record["state"] == "live"
            assert session in [s["session_id"] for s in record["sessions"]["open"]]
            # The client on w1 dies without a word; its session expires, its folder goes.
            held.send_signal(signal.SIGKILL)
            held.wait(30)
            wait_until(lambda: not folders(), 90, "the expired session's folder gone")
        finally:
            if held is not None and held.poll() is None:
                held.kill()
            server.send_signal(signal.SIGTERM)  # as stop-connect-server.sh does
            try:
                server.wait(90)
            finally:
                if server.poll() is None:
                    server.kill()
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "spark_steward.cli", "status", "--storage", storage.as_uri(),
         "--json"], check=True, capture_output=True, text=True).stdout)
    assert [a["state"] for a in status["applications"] if a["app_id"] == app] == ["finished"]
