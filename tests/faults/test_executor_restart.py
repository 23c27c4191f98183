"""Host-local state across executor and worker deaths on the shared local-cluster[2,1,1024].

An executor JVM is SIGKILLed after its tasks cached a 64 MiB blob and built a ``get_or_create``
value; tasks on the replacement executor get both with zero transfers and zero builds (counted
per task from the blob cache's counters and a build log). A blob file corrupted while an
executor is down is detected and fetched again, once for the host. A Python worker SIGKILLed in
the middle of a put never leaves a value that ``get`` returns.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import crc32c
from pyspark import TaskContext

import spark_steward
from spark_steward.local.working_dir import WorkingDir
from tests.spark.conftest import executor_pids, wait_for_executors

TRANSFERS = ("server", "ha", "linked", "peers", "streamed")


def _executor_jvm() -> int:
    """The executor JVM this Python worker belongs to (worker -> pyspark daemon -> JVM)."""
    with open(f"/proc/{os.getppid()}/stat") as f:
        daemon_parent = int(f.read().rsplit(")", 1)[1].split()[1])
    return daemon_parent


def _task(ref: Any, store: str, builds: Path) -> Callable[[int], dict[str, Any]]:
    def run(_: int) -> dict[str, Any]:
        import spark_steward.local
        from spark_steward.blob.executor import executor_blobs

        stats = executor_blobs().cache.stats
        before = Counter(stats)
        data = Path(spark_steward.blobs.get(ref)).read_bytes()

        def build() -> bytes:
            with open(builds, "a") as log:
                log.write(f"{os.getpid()}\n")
            return b"model" * 20_000

        value = spark_steward.local.state(store).get_or_create("ranker", build)
        delta = Counter(stats)
        delta.subtract(before)
        return {"jvm": _executor_jvm(), "crc": crc32c.crc32c(data), "size": len(data),
                "value_ok": value == b"model" * 20_000,
                "transfers": sum(delta[k] for k in TRANSFERS), "adopted": delta["verified"],
                "attempt": TaskContext.get().attemptNumber()}

    return run


def _run_until_on(sc: Any, task: Callable[[int], dict[str, Any]], jvms: set[int],
                  tasks: int = 8) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Runs ``tasks`` tasks until some ran on one of ``jvms``; returns (all, those)."""
    for _ in range(4):
        results = sc.parallelize(range(tasks), tasks).map(task).collect()
        on = [r for r in results if r["jvm"] in jvms]
        if on:
            return results, on
    raise AssertionError(f"no task ran on executors {jvms}")


def _kill_one_executor(sc: Any, victim: int) -> set[int]:
    before = set(executor_pids(sc))
    assert victim in before
    os.kill(victim, signal.SIGKILL)
    wait_for_executors(sc, exclude=victim)
    return set(executor_pids(sc)) - before


def test_a_replacement_executor_adopts_cached_blobs_and_built_values(
        spark: Any, runtime: Any, tmp_path: Path) -> None:
    sc = spark.sparkContext
    data = os.urandom(64 << 20)
    expected = (crc32c.crc32c(data), len(data))
    ref = spark_steward.blobs.put(data)
    builds = tmp_path / "builds.log"
    task = _task(ref, f"restart-{uuid.uuid4().hex[:8]}", builds)

    first = sc.parallelize(range(4), 4).map(task).collect()
    assert all((r["crc"], r["size"]) == expected and r["value_ok"] for r in first)
    assert len(builds.read_text().split()) == 1, "built once for the host"
    assert sum(r["transfers"] for r in first) == 1, "fetched once for the host"

    replacement = _kill_one_executor(sc, first[0]["jvm"])
    results, on_new = _run_until_on(sc, task, replacement)
    assert all((r["crc"], r["size"]) == expected and r["value_ok"] for r in results)
    assert [r["transfers"] for r in on_new] == [0] * len(on_new), "no transfer after restart"
    assert sum(r["adopted"] for r in on_new) >= 1, "the replacement verified and adopted it"
    assert len(builds.read_text().split()) == 1, "no build after restart"

    # Corrupted while an executor is down: detected at first use, fetched again, once.
    cached = (Path(runtime.context.local_dir) / runtime.app_id / "blob-cache" / ref.scope
              / ref.key.digest)
    victim = on_new[0]["jvm"]
    before = set(executor_pids(sc))
    os.kill(victim, signal.SIGKILL)
    raw = bytearray(cached.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    cached.write_bytes(bytes(raw))
    wait_for_executors(sc, exclude=victim)
    newest = set(executor_pids(sc)) - before
    results, on_newest = _run_until_on(sc, task, newest)
    assert all((r["crc"], r["size"]) == expected for r in results), "never the corrupt copy"
    assert sum(r["transfers"] for r in results) == 1, "fetched again, once for the host"
    assert cached.read_bytes() == data


def test_a_worker_killed_mid_put_never_leaves_a_value_get_returns(
        spark: Any, runtime: Any, tmp_path: Path) -> None:
    store = f"killed-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "killed"
    old, new = b"o" * 10_000, os.urandom(4 << 20)

    def task(_: int) -> tuple[int, bytes | None, bytes | None]:
        import spark_steward.local
        from spark_steward.local.executor import executor_working_dir

        state = spark_steward.local.state(store)
        if not marker.exists():
            state.put("k", old)
            fs = executor_working_dir().work.fs
            write_new = fs.write_new

            def dying(path: Path, chunks: Any) -> Any:
                def half_then_die() -> Any:
                    for chunk in chunks:
                        yield chunk[: len(chunk) // 2]
                        marker.touch()
                        os.kill(os.getpid(), signal.SIGKILL)
                return write_new(path, half_then_die())

            fs.write_new = dying  # type: ignore[method-assign]
            state.put("k", new)
        seen = state.get("k")
        state.put("k", new)
        return TaskContext.get().attemptNumber(), seen, state.get("k")

    [(attempt, seen, after)] = spark.sparkContext.parallelize([0], 1).map(task).collect()
    assert marker.exists() and attempt >= 1, "the first attempt was killed mid-put"
    assert seen == old, "the killed put left the previous complete value, nothing torn"
    assert after == new
    work = WorkingDir(Path(runtime.context.local_dir) / runtime.app_id, runtime.app_id)
    work.recover()
    folder = work.root / "state" / store
    assert not [p for p in folder.iterdir() if ".tmp-" in p.name], "recovery removed the temp"
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == \
        [Path(work.record("state/" + store + "/k").file).name]  # type: ignore[union-attr]
