"""A Python worker SIGKILLed in the middle of a blob download: no partial file is ever served
under the blob's name, and the retried task gets the verified blob."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from typing import Any, BinaryIO

import crc32c
from pyspark import TaskContext

import spark_steward
from spark_steward.local.working_dir import WorkingDir


def test_worker_killed_mid_download_never_serves_a_partial_file(spark: Any,
                                                                 runtime: Any) -> None:
    data = os.urandom(32 << 20)
    ref = spark_steward.blobs.put(data)
    # Only the driver's server has it, so the download is a real socket transfer.
    runtime.storage.delete(f"apps/{runtime.app_id}/blobs/{ref.scope}/{ref.key}")
    cache_file = (Path(runtime.context.local_dir) / runtime.app_id / "blob-cache" / ref.scope
                  / ref.key.digest)
    marker = Path(runtime.context.local_dir) / f"killed-{ref.key.short}"

    def task(_: int) -> tuple[int, bool, list[str], int, int]:
        from spark_steward.blob.executor import executor_blobs

        blobs = executor_blobs()
        attempt = TaskContext.get().attemptNumber()
        existed_before = cache_file.exists()
        leftovers = sorted(p.name for p in cache_file.parent.glob(f".{ref.key.digest}.tmp-*")) \
            if cache_file.parent.exists() else []
        if not marker.exists():
            fetch = blobs.cache.sources.fetch_from_server
            assert fetch is not None

            def fetch_then_die(r: Any, out: BinaryIO) -> Any:
                class DyingFile:
                    written = 0

                    def write(self, chunk: Any) -> int:
                        n = out.write(chunk)
                        self.written += n
                        if self.written >= (8 << 20):
                            out.flush()
                            marker.touch()
                            os.kill(os.getpid(), signal.SIGKILL)
                        return n

                return fetch(r, DyingFile())  # type: ignore[arg-type]

            blobs.cache.sources = dataclasses.replace(blobs.cache.sources,
                                                      fetch_from_server=fetch_then_die)
        content = Path(spark_steward.blobs.get(ref)).read_bytes()
        return attempt, existed_before, leftovers, crc32c.crc32c(content), len(content)

    [(attempt, existed_before, leftovers, crc, size)] = \
        spark.sparkContext.parallelize([0], 1).map(task).collect()
    assert marker.exists(), "the first attempt must have been killed mid-download"
    assert attempt == 1, "the task succeeded only on its retry"
    assert not existed_before, "the killed download left nothing under the blob's name"
    # A process that starts using the working dir removes the temp file (its writer's lock is
    # free); a worker that started earlier may still see it.
    assert len(leftovers) <= 1, "the killed download's temp file is all that was left"
    assert (crc, size) == (crc32c.crc32c(data), len(data))
    assert cache_file.read_bytes() == data
    WorkingDir(Path(runtime.context.local_dir) / runtime.app_id, runtime.app_id).recover()
    assert not list(cache_file.parent.glob(f".{ref.key.digest}.tmp-*"))
    assert cache_file.read_bytes() == data, "recovery keeps the complete copy"
