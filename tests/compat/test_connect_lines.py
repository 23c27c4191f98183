"""spark-steward on each supported line's Spark Connect server (4.0 and later): the line's own
server (``start-connect-server.sh`` where its pip package has it, else the ``spark-submit
--class`` that script runs) with the flags of ``spark-steward conf --server``, a client of the
same line in another process. Spark 3.5's pip package has no Connect server: there the client
API's refusal is checked on 3.5's own Connect session class.

Plain ``pytest`` asks for 3.5 (and 3.4); ``SPARK_STEWARD_COMPAT_LINES=4.0,4.1,4.2`` runs the
servers (4.3, the installed line, is tests/connect).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.harness import install
from tests.compat.lines import LINES, requested_lines
from tests.connect.harness import (ConnectServer, checkpoint_folders, server_flags,
                                   sessions_of, wait_until)

pytestmark = pytest.mark.spark

CONNECT_LINES = [line for line in requested_lines() if line in LINES and line >= "4.0"] or [
    pytest.param(None, marks=pytest.mark.skip(reason="no 4.x line asked for "
                                                     "(python -m tests.compat.run --lines 4.0)"))]
#: A plan cached with Spark's own df.cache() (the same text in every client).
CACHED = "spark.range(6).selectExpr('id + 100 AS c')"
OLD_LINES = [line for line in requested_lines() if line in LINES and line < "4.0"] or [
    pytest.param(None, marks=pytest.mark.skip(reason="no 3.x line asked for"))]


@pytest.mark.parametrize("line_name", OLD_LINES)
def test_a_connect_session_is_refused_with_one_line_on_spark_3(line_name: str) -> None:
    line = install(line_name)
    code = ("import pyspark\n"
            "from pyspark.sql.connect.session import SparkSession\n"
            "import spark_steward\n"
            "session = object.__new__(SparkSession)  # 3.5's own class; no server to reach\n"
            "try:\n"
            "    spark_steward.checkpoints('x', spark=session)\n"
            "except spark_steward.errors.SetupError as exc:\n"
            "    print('REFUSED=' + str(exc))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, **line.env()))
    refused = [ln for ln in done.stdout.splitlines() if ln.startswith("REFUSED=")]
    assert done.returncode == 0 and len(refused) == 1, done.stdout + done.stderr[-3000:]
    assert f"pyspark {line.version}" in refused[0] and "Spark 4.0" in refused[0]


@pytest.mark.parametrize("line_name", CONNECT_LINES)
def test_the_line_s_connect_server_hosts_the_runtime_and_sessions_own_checkpoints(
        line_name: str, tmp_path: Path) -> None:
    line = install(line_name)
    storage = tmp_path / "storage"
    (tmp_path / "server").mkdir()
    env = line.env()
    (tmp_path / "jvm-tmp").mkdir()
    flags = server_flags(storage, tmp_path / "local",
                         "spark.connect.session.manager.defaultSessionTimeout=8s",
                         "spark.connect.session.manager.maintenanceInterval=1s",
                         f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={tmp_path / 'jvm-tmp'}",
                         f"spark.local.dir={tmp_path / 'spark-local'}")
    artifact = tmp_path / "line-artifact.txt"
    artifact.write_text("line artifact\n" * 100)
    with ConnectServer(tmp_path / "server", flags, env=env, spark_home=line.home) as server:
        app = server.app_id()
        wait_until(lambda: f"attached to {app}" in server.log(), 120, "the runtime's attach")
        assert len(server.runtime_pids()) == 1
        # One session keeps its checkpoint until its client is killed and it expires.
        # It also uses the thin client (a checkpoint series, a cached table), Spark's own
        # df.cache() and an artifact its UDF reads, which go with the session too.
        held, (count, version, session, saved, table_sum, cached, peek) = server.held_client(
            "import pyspark\n"
            "import spark_steward\n"
            "from pyspark.sql.functions import udf\n"
            f"spark.addArtifacts({str(artifact)!r}, file=True)\n"
            "@udf('string')\n"
            "def peek(i):\n"
            "    from pyspark import SparkFiles\n"
            "    return open(SparkFiles.get('line-artifact.txt')).read(13)\n"
            "peeked = spark.range(1).select(peek('id')).collect()[0][0]\n"
            "df = spark.range(40).checkpoint()\n"
            "cp = spark_steward.checkpoints('line')\n"
            "saved = cp.save(spark.range(30)) and cp.latest().count()\n"
            "t = spark_steward.cache(spark.range(20).selectExpr('id * 2 AS y'))\n"
            f"c = {CACHED}\n"
            "c.cache()\n"
            "result = [df.count(), pyspark.__version__, spark.client._session_id, saved,\n"
            "          t.selectExpr('sum(y)').collect()[0][0], c.count(), peeked]\n",
            env=env)
        assert (count, version, saved, table_sum, cached) == (40, line.version, 30, 380, 6)
        assert peek == "line artifact"

        def copies() -> list[Path]:  # Spark's: the store's, the driver's, the executors'
            return [*(tmp_path / "jvm-tmp").glob(f"artifacts-*/*/files/{artifact.name}"),
                    *(tmp_path / "spark-local").glob(f"spark-*/userFiles-*/*/{artifact.name}"),
                    *(line.home / "work" / app).glob(f"*/*/{artifact.name}")]

        assert len(copies()) >= 3
        assert list((storage / "tables" / "data").glob("*/*/*.parquet"))
        wait_until(lambda: session in [s["session_id"] for s in sessions_of(storage)["open"]],
                   20, "the session in the record")
        assert checkpoint_folders(storage, app)
        held.kill()
        wait_until(lambda: not checkpoint_folders(storage, app), 60, "the expired session's folder")
        wait_until(lambda: not list((storage / "tables" / "data").glob("*/*/*.parquet")), 30,
                   "the expired session's cached table")
        assert server.client(f"result = {CACHED}.storageLevel.useMemory", env=env) is False
        wait_until(lambda: not copies(), 30, "the expired session's artifact copies")
        # Another session's checkpoint is the application's to release at its end. It also
        # caches transparently: a cached table of the session, results unchanged.
        tables = storage / "tables" / "data"
        assert server.client(
            "import glob\n"
            "result = spark.range(9).checkpoint().count()\n"
            "spark.conf.set('spark.steward.cache.transparent', 'true')\n"
            "d = spark.range(300).selectExpr('id % 5 AS k')\n"
            "d.cache()\n"
            "agg = sorted(tuple(r) for r in d.groupBy('k').count().collect())\n"
            f"files = len(glob.glob({str(tables)!r} + '/*/*/*.parquet'))\n"
            "result = [result, agg, files > 0]", env=env) == [9, [[k, 60] for k in range(5)],
                                                            True]
        server.stop()
        record = json.loads(subprocess.run(
            [sys.executable, "-m", "spark_steward.cli", "status", "--storage", storage.as_uri(),
             "--json"], capture_output=True, text=True, check=True).stdout)["applications"]
        assert [a["state"] for a in record] == ["finished"]
        assert not checkpoint_folders(storage, app)
