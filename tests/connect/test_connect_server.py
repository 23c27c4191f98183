"""spark-steward on a real Spark Connect server (``start-connect-server.sh``, local-cluster
master), with clients in other processes.

One server serves the first tests in file order (each checks several behaviours, one JVM start
for all): the runtime the plugin hosts beside it, its liveness while it is killed and restarted,
client jobs meanwhile, and the application's end. A second server is SIGKILLed, then collected
by ``spark-steward gc``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from spark_steward.applications import ApplicationRegistry
from spark_steward.kernel.remote_wire import Payload, encode
from spark_steward.lifecycle.liveness import Liveness
from spark_steward.storage import Storage
from tests.connect.harness import (ConnectServer, alive, checkpoint_folders, server_flags,
                                   sessions_of, wait_until)

pytestmark = pytest.mark.skipif(
    not (Path(__import__("pyspark").__file__).parent / "sbin" / "start-connect-server.sh")
    .is_file() or __import__("pyspark").__version__ < "4", reason="needs pyspark 4's Connect server")


def registry(storage: Path) -> ApplicationRegistry:
    return ApplicationRegistry(Storage.from_url(storage.as_uri()), heartbeat_timeout=120)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConnectServer, Path, Path]]:
    work = tmp_path_factory.mktemp("connect")
    storage, local = work / "storage", work / "local"
    # Sessions of killed clients expire in seconds, not the default hour.
    # Spark's own folders (artifact store, driver copies) in this test's folder, to look at.
    (work / "jvm-tmp").mkdir()
    server = ConnectServer(work / "server", server_flags(
        storage, local, "spark.connect.session.manager.defaultSessionTimeout=8s",
        "spark.connect.session.manager.maintenanceInterval=1s",
        f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={work / 'jvm-tmp'}",
        f"spark.local.dir={work / 'spark-local'}"))
    (work / "server").mkdir()
    with server:
        yield server, storage, local


def test_runtime_runs_beside_the_server_and_names_its_jvm(served) -> None:
    server, storage, local = served
    app = server.app_id()
    wait_until(lambda: f"attached to {app}" in server.log(), 90, "the runtime's attach")
    pids = server.runtime_pids()
    assert len(pids) == 1, pids
    assert f"runtime pid {pids[0]} beside the driver" in server.log()
    # The record names the driver JVM, not the runtime: the verdict follows the server.
    record = registry(storage).read(app)
    assert record.pid == server.pid and record.finished_at is None
    assert registry(storage).liveness(record) is Liveness.LIVE
    # A client in another process: its job's result is plain Spark's; a blob read outside a
    # task is refused with one line saying where blobs are read.
    got = server.client(
        "from pyspark.sql import functions as F\n"
        "import spark_steward\n"
        "df = spark.range(1000).withColumn('sq', F.col('id') * F.col('id'))\n"
        "try:\n"
        "    spark_steward.blobs.get(spark_steward.blobs.put(b'x'))\n"
        "    refused = None\n"
        "except spark_steward.errors.StewardError as exc:\n"
        "    refused = str(exc)\n"
        "result = [df.count(), df.agg(F.sum('sq')).collect()[0][0], refused]")
    assert got[:2] == [1000, sum(i * i for i in range(1000))]
    assert "inside tasks" in got[2] and "\n" not in got[2], got[2]


def test_the_runtime_s_gateway_refuses_a_neighbour_without_its_secret(served) -> None:
    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
    from py4j.protocol import Py4JError

    server, storage, local = served
    app = server.app_id()
    [runtime] = server.runtime_pids()
    with open(f"/proc/{runtime}/environ", "rb") as f:
        env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    port = int(env[b"PYSPARK_GATEWAY_PORT"])
    secret = env[b"PYSPARK_GATEWAY_SECRET"].decode()

    def neighbour(token: str | None) -> ClientServer:
        return ClientServer(JavaParameters(address="127.0.0.1", port=port, auth_token=token,
                                           auto_field=True), PythonParameters(port=0))

    for token in (None, "", "wrong", secret[:-1] + ("0" if secret[-1] != "0" else "1")):
        hostile = neighbour(token)
        try:
            with pytest.raises(Py4JError):
                hostile.jvm.java.lang.System.exit(1)  # what a hostile caller would try
        finally:
            hostile.close()
    assert alive(server.pid) and server.runtime_pids() == [runtime]
    reg = registry(storage)
    before = reg.read(app).heartbeat_at
    wait_until(lambda: reg.read(app).heartbeat_at > before, 10, "the runtime's heartbeat")
    # The control: the same client with the secret is served, so the refusals above are the
    # secret's doing. It then shuts the gateway down, as a broken neighbour holding the secret
    # might: the runtime notices that the JVM stopped answering, exits, and is started again
    # on a new gateway, the server untouched.
    owner = neighbour(secret)
    assert owner.jvm.java.lang.System.currentTimeMillis() > 0
    owner.shutdown()
    restarted = wait_until(lambda: [p for p in server.runtime_pids() if p != runtime], 60,
                           "a runtime on a new gateway")
    assert "exited with status 6" in server.log() and alive(server.pid)
    with open(f"/proc/{restarted[0]}/environ", "rb") as f:
        assert f"PYSPARK_GATEWAY_PORT={port}\0".encode() not in f.read()
    assert server.client("result = spark.range(5).count()") == 5


def test_a_killed_runtime_restarts_while_the_application_stays_live(served) -> None:
    server, storage, local = served
    app = server.app_id()
    [first] = server.runtime_pids()
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not alive(first), 10, "the killed runtime's exit")
    # Ground truth: the server JVM runs, so the application is live, runtime or not.
    assert alive(server.pid)
    reg = registry(storage)
    assert reg.liveness(reg.read(app)) is Liveness.LIVE
    gc = subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                         storage.as_uri(), "--json"], capture_output=True, text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    # Nothing of the live application is collected; where gc met its files, it says why not.
    for collector in json.loads(gc.stdout)["collectors"]:
        assert app not in json.dumps(collector["deleted"]) + json.dumps(collector["failed"])
        assert all(s["reason"] == "application is live" for s in collector["skipped"]
                   if s.get("app_id") == app), collector
    # A client's job meanwhile is served as before.
    assert server.client("result = spark.range(7).count()") == 7
    second = wait_until(lambda: [p for p in server.runtime_pids() if p != first], 60,
                        "the restarted runtime")
    log = server.log()
    assert "exited with status" in log
    assert "driver runtime started again" in log
    before = reg.read(app).heartbeat_at
    wait_until(lambda: reg.read(app).heartbeat_at > before, 30, "the new runtime's heartbeat")
    assert reg.read(app).pid == server.pid and len(second) == 1
    # Clients' UDFs reach the new runtime's blob server (new port, new token) once executors
    # have refreshed the relayed context: at a task start, at most every 5 s
    # (TaskContextRelay.REFRESH_EVERY_MILLIS).
    time.sleep(5.5)
    assert server.client(
        "import spark_steward\n"
        "from pyspark.sql.functions import udf\n"
        "ref = spark_steward.blobs.put(b'after the restart')\n"
        "read = udf(lambda i: spark_steward.blobs.read_bytes(ref).decode(), 'string')\n"
        "result = sorted({r[0] for r in spark.range(3).select(read('id')).collect()})",
        env=NO_JVM) == ["after the restart"]


def test_each_connect_session_owns_its_checkpoints_until_it_closes(served) -> None:
    server, storage, local = served
    app = server.app_id()
    closed_before = sessions_of(storage)["closed_total"]
    # A client that keeps its session, then is SIGKILLed without releasing anything.
    held, (held_count, held_session) = server.held_client(
        "df = spark.range(50).selectExpr('id * 3 AS x').checkpoint()\n"
        "result = [df.selectExpr('sum(x)').collect()[0][0], spark.client._session_id]")
    assert held_count == 3 * sum(range(50))
    held_folders = wait_until(lambda: checkpoint_folders(storage, app), 20, "the held folder")
    # Another client checkpoints too and releases its session cleanly.
    other_count, other_session = server.client(
        "df = spark.range(20).checkpoint()\n"
        "result = [df.count(), spark.client._session_id]\nspark.stop()")
    assert other_count == 20 and other_session != held_session
    # The released session's folder goes; the held session's stays, and status says whose.
    wait_until(lambda: checkpoint_folders(storage, app) == held_folders, 30,
               "the released session's folder deleted, the other's kept")
    def released() -> dict[str, object] | None:
        found = sessions_of(storage)  # the record of a heartbeat after the release
        listed = [s["session_id"] for s in found["open"]]
        return found if other_session not in listed and held_session in listed \
            and found["closed_total"] > closed_before else None

    sessions = wait_until(released, 10, "the record's sessions after the release")
    [open_session] = [s for s in sessions["open"] if s["session_id"] == held_session]
    files, size = open_session["owns"]["checkpoints"]
    truth = [p for p in (storage / "apps" / app / "spark-checkpoints").rglob("*") if p.is_file()]
    assert files == len(truth) and size == sum(p.stat().st_size for p in truth) and size > 0
    # The killed client's session expires; what it owned goes with it.
    held.kill()
    held.wait(10)
    wait_until(lambda: not checkpoint_folders(storage, app), 60, "the expired session's folder")
    wait_until(lambda: held_session not in [s["session_id"] for s in sessions_of(storage)["open"]],
               10, "the expired session gone from the record")


#: A client with nothing to start a JVM with: the thin client must not need one.
NO_JVM = {"PATH": "/nonexistent", "JAVA_HOME": "/nonexistent", "SPARK_HOME": "/nonexistent"}

#: Commands a hostile or broken client sends straight at the extension: each name, the bytes
#: of the Any's value, and what the refusal says.
def _frame(text: str, extra: bytes | None = None) -> bytes:
    return encode(Payload(text, extra))


HOSTILE = [
    ("truncated varint", b"\x0a\xff", "truncated varint"),
    ("long varint", b"\x0a" + b"\xff" * 6 + b"\x01", "longer than 5 bytes"),
    ("length past the end", b"\x0a\x7fabc", "remain"),
    ("unknown field", b"\x22\x01x", "unexpected field 4"),
    ("no request text", b"", "no text field"),
    ("text not UTF-8", b"\x0a\x01\xff", "not UTF-8"),
    ("not JSON", _frame("{{{"), "not JSON"),
    ("unknown op", _frame('{"op":"x.y","args":{}}'), "no command 'x.y'"),
    ("an id that is no int", _frame(json.dumps(
        {"op": "checkpoints.restore", "args": {"series": "t", "id": True}})), "expected int"),
    ("a relation of garbage", _frame(json.dumps(
        {"op": "checkpoints.save", "args": {"series": "t"}}), b"\xff\xff\xff"),
     "not a valid relation"),
]


#: Plans cached through Spark's own df.cache() by two sessions (the same text in every client).
MINE = "spark.range(777).selectExpr('id * 5 AS z')"
THEIRS = "spark.range(888).selectExpr('id AS w')"


def _blob_files(storage: Path, local: Path, digest: str) -> list[Path]:
    """Ground truth: the driver's files of a blob, by its digest, in the local and storage
    dirs. Executors' cached copies (``blob-cache``) are not among them: those go by the
    cache's staged cleanup, as any unreferenced copy does (FLIP-19)."""
    return [p for root in (storage, local) for p in root.rglob(f"*{digest}*")
            if p.is_file() and "blob-cache" not in str(p)]


def _artifact_copies(server: ConnectServer, name: str) -> dict[str, list[Path]]:
    """Ground truth: Spark's copies of artifact ``name``, by where they are."""
    work = server.work.parent
    return {"store": list((work / "jvm-tmp").glob(f"artifacts-*/*/files/{name}")),
            "driver": list((work / "spark-local").glob(f"spark-*/userFiles-*/*/{name}")),
            "executors": list((server.home / "work" / server.app_id()).glob(f"*/*/{name}"))}


def _table_files(storage: Path, key: str) -> list[Path]:
    """Ground truth: a cached table's data files in the storage dir."""
    return [p for p in (storage / "tables" / "data" / key).rglob("*") if p.is_file()]


def test_the_thin_client_runs_spark_steward_s_api_in_its_own_session(served) -> None:
    server, storage, local = served
    app = server.app_id()
    # Checkpoints and a cached table from a client process that has no JVM to start.
    got = server.client(
        "import spark_steward\n"
        "from spark_steward.errors import StewardError\n"
        "df = spark.range(5000).selectExpr('id', 'id % 7 AS k', 'id * 3 AS x')\n"
        "cp = spark_steward.checkpoints('thin', retained=2)\n"
        "first = cp.save(df)\n"
        "second = cp.save(df.where('k = 1'))\n"
        "ids = [i.id for i in cp.ls() if i.state == 'completed']\n"
        "restored = cp.restore(first).selectExpr('sum(x)', 'count(*)').collect()[0]\n"
        "latest = cp.latest().selectExpr('sum(x)', 'count(*)').collect()[0]\n"
        "t = spark_steward.cache(df.where('k < 3'))\n"
        "before = t.is_materialized\n"
        "agg = sorted(tuple(r) for r in t.groupBy('k').count().collect())\n"
        "again = t.selectExpr('sum(x)').collect()[0][0]\n"
        "key = t.storage_key\n"
        # A blob and an offloaded payload read in UDFs, host-local state kept by a UDF.
        "from pyspark.sql.functions import udf\n"
        "ref = spark_steward.blobs.put(b'thin blob ' * 1000, name='b.txt')\n"
        "off = spark_steward.blobs.offload({'answer': 42}, receivers=2)\n"
        "@udf('string')\n"
        "def read(i):\n"
        "    import spark_steward\n"
        "    return spark_steward.blobs.read_bytes(ref)[:9].decode() + str(off.load()['answer'])\n"
        "@udf('long')\n"
        "def bump(i):\n"
        "    import spark_steward\n"
        "    state = spark_steward.local.state('thin')\n"
        "    n = int(state.get('n') or b'0') + 1\n"
        "    state.put('n', str(n).encode())\n"
        "    return n\n"
        "reads = spark.range(4).repartition(2).select(read('id'))\n"
        "blob_reads = sorted(r[0] for r in reads.collect())\n"
        "bumps = sorted(r[0] for r in spark.range(3).coalesce(1).select(bump('id')).collect())\n"
        "blobs = [r.key.digest for r in spark_steward.blobs.ls()]\n"
        # A streaming query started here is recorded as in classic.
        "import time\n"
        "q = (spark.readStream.format('rate').option('rowsPerSecond', 20).load()\n"
        "     .writeStream.format('noop')\n"
        f"     .option('checkpointLocation', {str(storage.parent / 'q1')!r})\n"
        "     .queryName('thin_q').start())\n"
        "while q.lastProgress is None:\n"
        "    time.sleep(0.2)\n"
        "running = [(s.record.name, s.state.value, s.record.location)\n"
        "           for s in spark_steward.streams.ls()]\n"
        "q.stop()\n"
        "try:\n"
        "    spark_steward.streams.drop('thin_q')\n"
        "    dropped = 'dropped'\n"
        "except spark_steward.errors.StreamActive as exc:\n"
        "    dropped = str(exc)\n"
        "result = dict(first=first, second=second, ids=ids, restored=list(restored),\n"
        "              latest=list(latest), before=before, agg=agg, again=again, key=key,\n"
        "              materialized=t.is_materialized, table=t.table_id,\n"
        "              session=spark.client._session_id, blob_reads=blob_reads, bumps=bumps,\n"
        "              blob=ref.key.digest, blobs=blobs, running=running, dropped=dropped)",
        env=NO_JVM)
    rows = range(5000)
    assert got["ids"] == [got["first"], got["second"]]
    assert got["restored"] == [3 * sum(rows), 5000]
    ones = [i for i in rows if i % 7 == 1]
    assert got["latest"] == [3 * sum(ones), len(ones)]
    assert not got["before"] and got["materialized"]
    assert got["agg"] == [[k, sum(1 for i in rows if i % 7 == k)] for k in range(3)]
    assert got["again"] == 3 * sum(i for i in rows if i % 7 < 3)
    # ls lists this session's blobs: the put one, and the offloaded one until its receivers
    # have read it.
    assert got["blob_reads"] == ["thin blob42"] * 4 and got["blob"] in got["blobs"]
    assert len(got["blobs"]) <= 2
    assert got["bumps"] == [1, 2, 3]  # one executor, one store: each row saw the last
    assert _blob_files(storage, local, got["blob"]), "the blob is not where the server keeps it"
    assert got["running"] == [["thin_q", "running", (storage.parent / "q1").as_uri()
                               .replace("file:///", "file:/")]]
    assert got["dropped"].startswith("refusing to drop")  # running, or stopped within the grace
    # The client's session ended with the process: its table's files go with it.
    wait_until(lambda: not _table_files(storage, got["key"]), 60,
               "the ended session's cached table released")
    wait_until(lambda: not _blob_files(storage, local, got["blob"]), 30,
               "the ended session's blob deleted")

    # One client holds a table; another session cannot reach it; hostile commands are refused
    # with one line each while the good client is served.
    # The held client also caches and locally checkpoints through Spark's own API; a second
    # held session caches a plan of its own.
    # It adds an artifact its UDFs read (so executors fetch it) before caching: Spark's cache
    # clones the session, and the clone adds the artifact again.
    work = server.work.parent
    mine_file, theirs_file = work / "held-artifact.txt", work / "neighbour-artifact.txt"
    mine_file.write_text("held artifact\n" * 500)
    theirs_file.write_text("neighbour artifact\n" * 300)
    held, mine = server.held_client(
        "import spark_steward\n"
        "from pyspark.sql.functions import udf\n"
        f"spark.addArtifacts({str(mine_file)!r}, file=True)\n"
        "@udf('string')\n"
        "def peek(i):\n"
        "    from pyspark import SparkFiles\n"
        "    return open(SparkFiles.get('held-artifact.txt')).read(13)\n"
        "peeks = [r[0] for r in spark.range(2).repartition(2).select(peek('id')).collect()]\n"
        # Host-local state under a name the neighbour uses too.
        "@udf('string')\n"
        "def mark(i):\n"
        "    import spark_steward\n"
        "    state = spark_steward.local.state('shared')\n"
        "    state.put('who', b'held')\n"
        "    return state.get('who').decode()\n"
        "marked = spark.range(1).select(mark('id')).collect()[0][0]\n"
        "t = spark_steward.cache(spark.range(300).selectExpr('id * 2 AS y'))\n"
        f"c = {MINE}\n"
        "c.cache()\n"
        "lc = spark.range(555).selectExpr('id + 1 AS v').localCheckpoint()\n"
        "arts = [(r.name, r.key.digest) for r in spark_steward.blobs.ls()]\n"
        "from pyspark.sql.functions import spark_partition_id as pid\n"
        "parts = sum(d.select(pid()).distinct().count() for d in (c, lc))\n"
        "result = [t.selectExpr('sum(y)').collect()[0][0], t.table_id, t.storage_key,\n"
        "          spark.client._session_id, c.count(), lc.count(), peeks, parts, marked]",
        env=NO_JVM)
    total, table_id, key, held_session, cached_rows, local_rows, peeks, parts, marked = mine
    assert marked == "held"
    assert total == 2 * sum(range(300)) and _table_files(storage, key)
    assert (cached_rows, local_rows) == (777, 555)
    assert peeks == ["held artifact"] * 2
    # Spark's copies: the artifact store, the driver's, the executors' (session and clone).
    copies = _artifact_copies(server, "held-artifact.txt")
    assert copies["store"] and copies["driver"] and copies["executors"], copies
    # The artifact is a blob of the session too: content-addressed, listed, verified.
    digest = hashlib.sha256(mine_file.read_bytes()).hexdigest()
    wait_until(lambda: _blob_files(storage, local, digest), 15, "the artifact kept as a blob")
    neighbour, theirs = server.held_client(
        f"spark.addArtifacts({str(theirs_file)!r}, file=True)\n"
        f"t = {THEIRS}\nt.cache()\n"
        "from pyspark.sql.functions import spark_partition_id as pid, udf\n"
        "@udf('string')\n"
        "def seen(i):  # the held session's store of the same name is not this one\n"
        "    import spark_steward\n"
        "    state = spark_steward.local.state('shared')\n"
        "    before = state.get('who')\n"
        "    state.put('who', b'neighbour')\n"
        "    return repr(before)\n"
        "result = [t.count(), t.select(pid()).distinct().count(),\n"
        "          spark.range(1).select(seen('id')).collect()[0][0],\n"
        "          spark.client._session_id]\n"
        "import threading\n"
        "def keep():  # a request every 2 s: the idle session never expires\n"
        "    while True:\n"
        "        spark.conf.get('spark.app.name')\n"
        "        time.sleep(2)\n"
        "threading.Thread(target=keep, daemon=True).start()")
    theirs, their_parts, their_before, their_session = theirs
    assert theirs == 888 and their_before == "None"
    removed_before = server.log().count("from persistence list")
    hostile = server.client(
        "import spark_steward\n"
        "from pyspark.sql.connect import proto\n"
        "from spark_steward.kernel import remote_client\n"
        "from spark_steward.tables import remote\n"
        f"cases = {[(name, value) for name, value, _ in HOSTILE]!r}\n"
        "said = {}\n"
        "for name, value in cases:\n"
        "    command = proto.Command()\n"
        "    command.extension.type_url = 'type.googleapis.com/spark_steward.Command'\n"
        "    command.extension.value = value\n"
        "    try:\n"
        "        _, props, _ = spark.client.execute_command(command)\n"
        "        from spark_steward.kernel.remote_wire import decode\n"
        "        said[name] = decode(props['sql_command_result'].extension.value).text\n"
        "    except Exception as exc:\n"
        "        said[name] = str(exc)\n"
        f"other = remote._table(spark.range(1), {table_id!r})\n"
        "try:\n"
        "    other.invalidate()\n"
        "    said['other'] = 'invalidated'\n"
        "except spark_steward.errors.StewardError as exc:\n"
        "    said['other'] = type(exc).__name__ + ': ' + str(exc)\n"
        "said['good'] = spark_steward.checkpoints('thin').latest().count()\n"
        f"said['levels'] = [{MINE}.storageLevel.useMemory, {THEIRS}.storageLevel.useMemory]\n"
        "result = said", env=NO_JVM)
    for name, _, fragment in HOSTILE:
        assert fragment in hostile[name], (name, hostile[name])
    assert hostile["other"].startswith("CacheError: no cached table"), hostile["other"]
    assert hostile["good"] == len(ones)
    assert _table_files(storage, key), "another session's table was touched"
    assert hostile["levels"] == [True, True]  # both plans in Spark's cache manager
    # While it is open, status lists the held session with its cached table.
    def listed() -> dict[str, object] | None:
        found = [s for s in sessions_of(storage)["open"] if s["session_id"] == held_session]
        return found[0] if found and "cached tables" in found[0]["owns"] \
            and "artifacts" in found[0]["owns"] else None

    entry = wait_until(listed, 15, "the held session's table in the record")
    # Its df.cache() and localCheckpoint() blocks (a block per partition, Spark's count), apart
    # from the neighbour's.
    assert entry["owns"]["spark caches"][0] == parts and entry["owns"]["spark caches"][1] > 0
    others = [s["owns"]["spark caches"][0] for s in sessions_of(storage)["open"]
              if s["session_id"] != held_session and "spark caches" in s["owns"]]
    assert others == [their_parts], others
    files = _table_files(storage, key)
    assert entry["owns"]["artifacts"] == [1, mine_file.stat().st_size]
    assert entry["owns"]["cached tables"] == [len([p for p in files if p.suffix == ".parquet"]),
                                              sum(p.stat().st_size for p in files
                                                  if p.suffix == ".parquet")]
    # SIGKILLed: its session expires and the table goes with it.
    held.kill()
    held.wait(10)
    wait_until(lambda: not _table_files(storage, key), 60, "the killed client's table released")
    # What it cached and locally checkpointed through Spark's API goes too (Spark's own
    # "Removing RDD n from persistence list", once for each); the neighbour's cache stays.
    wait_until(lambda: server.log().count("from persistence list") >= removed_before + 2, 30,
               "the killed session's cached and locally checkpointed RDDs unpersisted")
    assert f"1 cached DataFrame(s) and 1 locally checkpointed RDD(s) of Connect session " \
        f"{held_session}" in server.log()
    levels = server.client(f"result = [{MINE}.storageLevel.useMemory, "
                           f"{THEIRS}.storageLevel.useMemory]")
    assert levels == [False, True]
    # Its local state goes at the next use of local state on that executor; the neighbour's
    # store of the same name stays.
    def stores(session: str) -> list[Path]:
        return list(local.rglob(f"state/.connect/{session}/shared"))

    assert stores(held_session) and stores(their_session)

    def swept() -> bool:
        server.client("from pyspark.sql.functions import udf\n"
                      "@udf('long')\n"
                      "def touch(i):\n"
                      "    import spark_steward\n"
                      "    spark_steward.local.state('other').put('k', b'v')\n"
                      "    return i\n"
                      "result = len(spark.range(2).select(touch('id')).collect())")
        return not stores(held_session)

    wait_until(swept, 40, "the expired session's local state removed", step=5)
    assert stores(their_session)
    # Every copy of its artifact goes (the clone's and the executors' too); the neighbour's stay.
    wait_until(lambda: not any(_artifact_copies(server, "held-artifact.txt").values()), 30,
               "the killed session's artifact copies deleted")
    wait_until(lambda: not _blob_files(storage, local, digest), 15, "its artifact blob deleted")
    theirs_copies = _artifact_copies(server, "neighbour-artifact.txt")
    assert theirs_copies["store"] and theirs_copies["driver"], theirs_copies
    neighbour.kill()
    neighbour.wait(10)
    assert f"attached to {app}" in server.log()


#: Queries over a cached DataFrame ``d`` (and its source ``s``): each kind of plan a cached
#: fragment can sit in, compared with the same queries in a session without the cache.
TRANSPARENT_QUERIES = (
    "sorted(tuple(r) for r in d.collect())",
    "d.count()",
    "sorted(tuple(r) for r in d.groupBy('k').agg({'x': 'sum'}).collect())",
    "d.where('k = 3').selectExpr('sum(x)').collect()[0][0]",
    "d.alias('a').join(d.alias('b'), 'id').selectExpr('count(*)', 'sum(a.x + b.k)')"
    ".collect()[0][:]",
    "d.union(d.where('k < 2')).count()",
    "s.selectExpr('id', 'id % 7 AS k', 'id * 3 AS x').where('x > 100').count()",
)


def test_transparent_caching_on_connect_reads_cached_tables_and_never_changes_a_result(
        served) -> None:
    server, storage, local = served
    queries = "[" + ", ".join(TRANSPARENT_QUERIES) + "]"
    setup = ("s = spark.range(6000)\n"
             "d = s.selectExpr('id', 'id % 7 AS k', 'id * 3 AS x')\n")
    # Ground truth: the same queries in a session with nothing cached.
    truth = server.client(setup + f"result = {queries}")
    tables = storage / "tables" / "data"
    held, got = server.held_client(
        "import glob\n"
        "spark.conf.set('spark.steward.cache.transparent', 'true')\n" + setup +
        "d.cache()\n"
        "level = str(d.storageLevel)\n"
        f"first = {queries}\n"
        f"files = len(glob.glob({str(tables)!r} + '/*/*/*.parquet'))\n"
        f"again = {queries}\n"
        "d.unpersist()\n"
        f"gone = len(glob.glob({str(tables)!r} + '/*/*/*.parquet'))\n"
        f"after = {queries}\n"
        # One left cached: it goes with the session.
        "kept = s.selectExpr('id * 2 AS y')\n"
        "kept.cache()\n"
        "kept_sum = kept.selectExpr('sum(y)').collect()[0][0]\n"
        f"kept_files = len(glob.glob({str(tables)!r} + '/*/*/*.parquet'))\n"
        "result = [first, again, after, level, files, gone, str(d.storageLevel), kept_sum,\n"
        "          kept_files, spark.client._session_id]\n")
    first, again, after, level, files, gone, level_after, kept_sum, kept_files, session = got
    for i, query in enumerate(TRANSPARENT_QUERIES):
        assert first[i] == truth[i] and again[i] == truth[i] and after[i] == truth[i], query
    # It reads a cached table (materialized at the first query), reports Spark's storage level,
    # and unpersist() deletes the table's files, as cache()/unpersist() do in classic.
    assert level == "Disk Memory Deserialized 1x Replicated" and files > 0
    assert gone == 0 and level_after == "Serialized 1x Replicated"
    assert "cache() reads cached table" in server.log()
    assert kept_sum == 2 * sum(range(6000)) and kept_files > 0
    # The session holds its table, and nothing in Spark's in-memory cache: the blocks the
    # table's materialization computed through Spark's entry were dropped once it was ready.
    def owns() -> dict[str, object] | None:
        found = [s["owns"] for s in sessions_of(storage)["open"] if s["session_id"] == session]
        return found[0] if found and "cached tables" in found[0] else None

    time.sleep(2.5)  # records of heartbeats (1 s) after the client's last query
    assert "spark caches" not in wait_until(owns, 15, "the session's table in the record")
    held.kill()
    held.wait(10)
    wait_until(lambda: not list(tables.glob("*/*/*.parquet")), 60,
               "the ended session's transparently cached table released")


def test_the_application_end_stops_the_runtime_and_finishes_its_record(served) -> None:
    server, storage, local = served
    app = server.app_id()
    [runtime] = server.runtime_pids()
    server.stop()
    assert not alive(runtime)
    record = registry(storage).read(app)
    assert record is not None and record.finished_at is not None
    assert "spark-steward detached from " + app in server.log()


def test_a_killed_server_leaves_its_runtime_exiting_and_gc_collects(tmp_path: Path) -> None:
    storage, local = tmp_path / "storage", tmp_path / "local"
    (tmp_path / "server").mkdir()
    (tmp_path / "jvm-tmp").mkdir()
    artifact = tmp_path / "crash-artifact.txt"
    artifact.write_text("left by a crash\n" * 100)
    flags = server_flags(storage, local,
                         f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={tmp_path / 'jvm-tmp'}",
                         f"spark.local.dir={tmp_path / 'spark-local'}")
    with ConnectServer(tmp_path / "server", flags, master="local[1]") as server:
        app = server.app_id()
        reg = registry(storage)
        wait_until(lambda: f"attached to {app}" in server.log(), 90, "the runtime's attach")
        [runtime] = server.runtime_pids()
        # A client's checkpoint and artifact, then the server dies with the session open.
        assert server.client(f"spark.addArtifacts({str(artifact)!r}, file=True)\n"
                             "result = spark.range(30).checkpoint().count()") == 30
        assert checkpoint_folders(storage, app)
        spark_folders = lambda: [p for p in [*(tmp_path / "jvm-tmp").glob("artifacts-*"),
                                             *(tmp_path / "spark-local").glob("*/userFiles-*")]
                                 if list(p.rglob(artifact.name))]
        wait_until(lambda: len(spark_folders()) == 2, 10, "the artifact in Spark's folders")
        wait_until(lambda: (storage / "apps" / app / "connect" / "spark-folders.json").is_file(),
                   10, "Spark's artifact folders named for gc")
        server.kill()
        # Its lifeline closed: the runtime exits without touching the JVM that is gone.
        wait_until(lambda: not alive(runtime), 15, "the orphaned runtime's exit")
        record = reg.read(app)
        assert record.finished_at is None and reg.liveness(record) is Liveness.CRASHED
        gc = subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                             storage.as_uri()], capture_output=True, text=True, timeout=120)
        assert gc.returncode == 0, gc.stdout + gc.stderr
        status = json.loads(subprocess.run(
            [sys.executable, "-m", "spark_steward.cli", "status", "--storage", storage.as_uri(),
             "--json"], capture_output=True, text=True, check=True).stdout)
        assert [a for a in status["applications"] if a["app_id"] == app
                and a["state"] == "live"] == []
        # What the dead server's sessions owned is gone with it: checkpoints, and Spark's
        # artifact store and driver copies (which Spark's shutdown hook never got to delete).
        assert not checkpoint_folders(storage, app)
        assert spark_folders() == [], gc.stdout
        assert not (storage / "apps" / app / "connect").exists()
