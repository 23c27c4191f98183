"""The multi-host harness itself: hosts are separate, Spark spans them, links are shaped,
failures name their step, and nothing outlives a harness however its owner ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import wait_until
from tests.cluster.harness import (Cluster, HarnessError, Link, delay_unavailable, kept_paths,
                                   leftovers, unavailable)

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(autouse=True)
def _needs_harness() -> None:
    reason = unavailable()
    if reason:
        pytest.skip(f"cluster harness unavailable: {reason}")


# -- hosts are separate machines ---------------------------------------------------------------

def test_hosts_have_their_own_network_names_tmp_and_processes(cluster: Cluster) -> None:
    k = cluster.prefix[len("sst"):]
    for host in cluster.hosts:
        addr = cluster.address(host)
        assert addr.startswith(f"198.18.{k}.")
        def out(*argv: str) -> str:
            return cluster.run(host, argv, check=True).stdout.strip()  # noqa: B023

        name, addrs = out("hostname"), out("ip", "-o", "-4", "addr", "show")
        routes, v6 = out("ip", "-4", "route", "show"), out("ip", "-6", "-o", "addr", "show")
        assert name == f"sst-{host}"
        assert sorted(line.split()[3] for line in addrs.splitlines()) == \
            sorted(["127.0.0.1/8", f"{addr}/24"])
        # Only the harness /24, no default route: a host reaches nothing else.
        assert [line.split()[0] for line in routes.splitlines()] == [f"198.18.{k}.0/24"]
        assert v6 == ""
    # Every host resolves every host name (and its short alias) to its harness address.
    names = [f"sst-{h}" for h in cluster.hosts] + list(cluster.hosts)
    done = cluster.run("w1", [sys.executable, "-c",
                              "import socket, sys; print(' '.join(socket.gethostbyname(n) "
                              "for n in sys.argv[1:]))", *names], check=True)
    assert done.stdout.split() == [cluster.address(h) for h in cluster.hosts] * 2


def test_loopback_tmp_and_pids_are_per_host_the_shared_dir_is_shared(cluster: Cluster) -> None:
    # Loopback: a listener on w1's 127.0.0.1 is not on w2's.
    listener = cluster.popen("w1", [sys.executable, str(SCRIPTS / "transfer.py"), "recv",
                                    "9100"], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "listening"
        probe = ("import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', 9100), 5)"
                 ".close(); print('open')\nexcept ConnectionRefusedError: print('refused')")
        assert cluster.run("w2", [sys.executable, "-c", probe]).stdout.strip() == "refused"
        assert cluster.run("w1", [sys.executable, "-c", probe]).stdout.strip() == "open"
    finally:
        listener.kill()
        listener.wait(10)

    # /tmp: private per host, and host_path finds it from here.
    cluster.run("w1", ["sh", "-c", "echo w1 > /tmp/only-w1"], check=True)
    assert cluster.host_path("w1", "/tmp/only-w1").read_text() == "w1\n"
    assert not cluster.host_path("w2", "/tmp/only-w1").exists()
    assert cluster.run("w2", ["test", "-e", "/tmp/only-w1"]).returncode == 1
    assert not Path("/tmp/only-w1").exists()
    # Other hosts' private dirs are hidden under the harness root.
    assert cluster.run("w1", ["ls", "-A", str(cluster.root / "hosts")]).stdout == ""

    # The shared dir: the same path and the same files on every host and here.
    (cluster.shared / "from-test").write_text("test")
    cluster.run("w2", ["sh", "-c", f"cat {cluster.shared}/from-test > {cluster.shared}/from-w2"],
                check=True)
    assert (cluster.shared / "from-w2").read_text() == "test"
    assert cluster.run("w3", ["cat", str(cluster.shared / "from-w2")]).stdout == "test"

    # PIDs: a host sees its own processes only, its init is the holder.
    done = cluster.run("w1", ["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc"],
                       check=True)
    init, listing = done.stdout.split("\n", 1)
    assert "holder.py" in init
    pids = sorted(int(p) for p in listing.split() if p.isdigit())
    assert len(pids) < 20 and 1 in pids, pids  # holder, worker JVM, this sh: not the machine's


# -- Spark across hosts ------------------------------------------------------------------------

# A job from the driver host runs on every worker host, each task in that host's PID namespace
# and private /tmp: test_capabilities.py's test_spark_job_from_the_driver_host_runs_on_every_
# worker_host, from the tasks of the capabilities application (no application of its own).


def test_kill_host_kills_every_process_restart_worker_brings_it_back(cluster: Cluster) -> None:
    marker = cluster.host_path("w3", "/tmp/survives-restart")
    marker.write_text("disk")
    holder = cluster.holder_pid("w3")
    pidns = os.stat(f"/proc/{holder}/ns/pid").st_ino
    cluster.kill_host("w3")
    assert not Path(f"/proc/{holder}").exists() or \
        Path(f"/proc/{holder}/stat").read_text().split(") ")[1][0] == "Z"
    in_ns = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/pid").st_ino == pidns:
                in_ns.append(pid)
        except OSError:
            pass
    assert in_ns == []
    with pytest.raises(HarnessError, match=r"^host w3: is down"):
        cluster.run("w3", ["true"])
    wait_until(lambda: "w3" not in cluster.alive_workers(), 60,
               "the master dropping w3")

    cluster.restart_worker("w3")
    assert cluster.alive_workers() == list(cluster.workers)
    assert cluster.run("w3", ["cat", "/tmp/survives-restart"]).stdout == "disk"
    assert cluster.holder_pid("w3") != holder


def test_s3_host_serves_the_test_process_and_every_host(cluster: Cluster) -> None:
    import boto3

    env = cluster.s3_env
    s3 = boto3.client("s3", endpoint_url=cluster.s3_endpoint, region_name="us-east-1",
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    s3.create_bucket(Bucket="harness")
    s3.put_object(Bucket="harness", Key="hello", Body=b"from the test process")
    assert cluster.s3_endpoint.startswith(f"http://198.18.{cluster.prefix[3:]}.")
    read = ("import boto3; print(boto3.client('s3').get_object(Bucket='harness', Key='hello')"
            "['Body'].read().decode())")
    for host in ("driver", "w2"):
        done = cluster.run(host, [sys.executable, "-c", read], timeout=120)
        assert done.stdout.strip() == "from the test process", done.stderr[-2000:]


# -- shaping -----------------------------------------------------------------------------------

def transfer(cluster: Cluster, src: str, dst: str, mib: int, port: int) -> dict[str, float]:
    receiver = cluster.popen(dst, [sys.executable, str(SCRIPTS / "transfer.py"), "recv",
                                   str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().strip() == "listening"
        sent = cluster.run(src, [sys.executable, str(SCRIPTS / "transfer.py"), "send",
                                 f"sst-{dst}", str(port), str(mib)], timeout=120, check=True)
        received = json.loads(receiver.stdout.readline())
        assert received["bytes"] == mib << 20
        return {**json.loads(sent.stdout), "received": received["seconds"]}
    finally:
        receiver.kill()
        receiver.wait(10)


def test_a_checkout_or_venv_under_tmp_stays_visible_on_every_host() -> None:
    """A clone and a venv made in /tmp (as a new user does) are still seen by each host, whose
    own /tmp is private: before, every worker failed with ClassNotFoundException (pyspark's jars
    hidden). Only what the hosts load code from is kept; the rest of /tmp stays private."""
    kept = Path(tempfile.mkdtemp(prefix="sst-keep-", dir="/tmp"))
    hidden = Path(tempfile.mkdtemp(prefix="sst-hidden-", dir="/tmp"))
    try:
        (kept / "code.py").write_text("print('kept')\n")
        with Cluster(workers=1, spark=False, keep=[kept]) as cluster:
            for host in ("driver", "w1"):
                done = cluster.run(host, [sys.executable, str(kept / "code.py")], check=True)
                assert done.stdout == "kept\n", host
                assert cluster.run(host, ["test", "-e", str(hidden)]).returncode == 1, host
            cluster.run("w1", ["sh", "-c", f"echo w1 > {kept}/from-w1"], check=True)
            assert (kept / "from-w1").read_text() == "w1\n", "the same folder, not a copy"
            prefix = cluster.prefix
        assert leftovers(prefix) == []
    finally:
        shutil.rmtree(kept, ignore_errors=True)
        shutil.rmtree(hidden, ignore_errors=True)


def test_kept_paths_are_the_existing_ones_under_tmp_outermost_first(tmp_path: Path) -> None:
    inner = tmp_path / "venv" / "lib"
    inner.mkdir(parents=True)
    assert str(tmp_path).startswith("/tmp/"), "pytest's temp dirs are under /tmp here"
    assert kept_paths([inner, tmp_path / "venv", Path("/usr/lib"), tmp_path / "missing",
                       Path("/tmp")]) == [tmp_path / "venv"]


def test_links_are_shaped_in_both_directions() -> None:
    mib, mbit = 8, 100.0
    expected = mib * 8 * 1.048576 / mbit  # seconds of payload at the link rate
    with Cluster(workers=2, spark=False, link=Link(rate_mbit=mbit)) as cluster:
        forward = transfer(cluster, "w1", "w2", mib, 9200)
        backward = transfer(cluster, "w2", "w1", mib, 9201)
        from_driver = transfer(cluster, "driver", "w1", mib, 9202)
        for measured in (forward, backward, from_driver):
            assert 0.85 * expected < measured["seconds"] < 2.5 * expected, (expected, measured)
        # Only w1 shaped: w2 -> w1 is still capped by w1's inbound (bridge-side) qdisc.
        for host in cluster.hosts:
            cluster.shape(host, Link())
        cluster.shape("w1", Link(rate_mbit=mbit))
        inbound = transfer(cluster, "w2", "w1", mib, 9203)
        assert 0.85 * expected < inbound["seconds"] < 2.5 * expected, (expected, inbound)
        # Unshaped, the same transfer is far quicker: the rate above was the qdiscs'.
        cluster.shape("w1", Link())
        free = transfer(cluster, "w1", "w2", mib, 9204)
        assert free["seconds"] < 0.5 * expected, (expected, free)
        prefix = cluster.prefix
    assert leftovers(prefix) == []


def test_link_delay_adds_round_trip_time() -> None:
    reason = delay_unavailable()
    if reason:
        with Cluster(workers=1, spark=False) as cluster:  # says so in one line, leaves nothing
            with pytest.raises(HarnessError, match=r"^link: delay_ms needs the netem qdisc"):
                cluster.shape("w1", Link(delay_ms=20))
        pytest.skip(f"link delays unavailable: {reason}")
    with Cluster(workers=2, spark=False, link=Link(delay_ms=20)) as cluster:
        # 20 ms one way on each of two links: an 80 ms round trip (one TCP connect).
        delayed = transfer(cluster, "w1", "w2", 1, 9205)
        assert 0.075 < delayed["connect"] < 0.2, delayed
        cluster.shape("w1", Link(rate_mbit=100, delay_ms=5))  # both together also apply
        qdiscs = subprocess.run(["tc", "qdisc", "show", "dev", f"{cluster.prefix}-w1"],
                                capture_output=True, text=True, check=True).stdout
        assert "netem" in qdiscs and "tbf" in qdiscs, qdiscs


# -- failures name their step ------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "step", "says"), [
    ({"java": "/nonexistent/bin/java"}, "master: ", "/nonexistent/bin/java"),
    ({"worker_memory": "0"}, "worker w1: ", "Memory is below 1MB"),
], ids=["bad-java", "impossible-worker-memory"])
def test_a_harness_that_cannot_start_names_its_step_in_one_line(
        kwargs: dict[str, Any], step: str, says: str) -> None:
    cluster = Cluster(workers=1, **kwargs)
    with pytest.raises(HarnessError) as failed:
        cluster.start()
    message = str(failed.value)
    assert message.startswith(step) and says in message, message
    assert "\n" not in message
    assert failed.value.log  # the log tail, for a human
    assert leftovers(cluster.prefix) == []


# -- teardown leaves nothing -------------------------------------------------------------------

def start_child(mode: str) -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen([sys.executable, str(SCRIPTS / "teardown_child.py"), mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line.startswith("READY "):
        child.kill()
        raise AssertionError(f"child did not start: {line!r} {child.communicate()[1][-2000:]}")
    prefix = line.split()[1]
    assert any(item.startswith("namespace ") for item in leftovers(prefix))
    return child, prefix


@pytest.mark.parametrize("mode", ["exit", "error", "atexit"])
def test_teardown_leaves_nothing_when_the_owner_ends(mode: str) -> None:
    child, prefix = start_child(mode)
    _, err = child.communicate(timeout=60)
    assert child.returncode == (1 if mode == "error" else 0), err[-2000:]
    if mode == "error":
        assert "boom in the body" in err
    assert leftovers(prefix) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_teardown_leaves_nothing_when_the_owner_is_signalled(sig: signal.Signals) -> None:
    child, prefix = start_child("wait")
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode != 0
    assert ("Terminated: SIGTERM" if sig == signal.SIGTERM else "KeyboardInterrupt") in err, \
        err[-2000:]
    assert leftovers(prefix) == []


def test_a_sigkilled_owner_is_swept_by_the_next_harness(cluster: Cluster) -> None:
    child, prefix = start_child("wait")
    child.kill()
    child.wait(30)
    # Its holders saw their lifeline close and took their hosts down with them ...
    wait_until(lambda: not any(item.startswith("process ") for item in leftovers(prefix)), 30,
               "the killed owner's processes ending")
    # ... but namespaces, links and its dir stay until a sweep.
    assert any(item.startswith("namespace ") for item in leftovers(prefix))
    with Cluster(workers=1, spark=False) as other:
        assert other.prefix != cluster.prefix
        # Swept: either its k is free again and the new harness took it, or nothing is left.
        assert other.prefix == prefix or leftovers(prefix) == []
    assert leftovers(prefix) == []
    # The live session cluster (another owner's, here this process's) was not touched.
    assert cluster.run("w1", ["true"]).returncode == 0
    assert cluster.alive_workers() == list(cluster.workers)
