"""Blobs, checkpoints and cached tables across hosts: the multi-host harness
(``tests/cluster/harness.py``: a standalone master, ``--workers`` worker hosts and a driver host,
each in its own namespaces, every link shaped to ``--rate-mbit``), each measurement a fresh
application submitted on the driver host, spark-steward and Spark's own peer in the same
application, ``--rounds`` rounds with the order of the variants rotated per round. Reported:
medians and the spread (min..max) over rounds, and the median of the per-round ratios.

* blobs        a ``--size-mib`` file to 8 tasks on the worker hosts: ``spark_steward.blobs.put``
               + ``blobs.get`` (HA off: every byte crosses the driver's link through the blob
               server, as ``addFile``'s do), ``sc.addFile`` + ``SparkFiles.get`` (Spark's own:
               ``spark.steward.blob.transparent=false``), ``sc.broadcast`` of the bytes; first
               job with its set-up (put, addFile, read + broadcast) and the warm job. ``floor``
               reads a copy already on every host (no shipping). With ``--s3``, one more
               application per round ships the file with HA copies in moto's S3 on its own
               host behind its own shaped link (``steward-ha``).
* checkpoints  ``series.save(df)`` (file-merged, zstd: the defaults; ``steward-none`` without
               compression) vs ``df.checkpoint(eager=True)`` at each of ``--partitions``, all
               in the shared dir; then one action over each restored DataFrame; bytes stored.
               With ``--s3``, one more application per round saves both steward variants to
               moto's S3 on its own host behind its own shaped link (``s3-steward``,
               ``s3-steward-none``): the storage behind the link. Spark's own cannot write
               there (no Hadoop S3 connector in pyspark, no Maven Central here to fetch one).
* cache        a cached table's later actions vs the hand-written Parquet copy, both in the
               shared dir (``bench/cache.py``'s join + Python UDF + groupBy workload).
* streams      ``bench/streams_job.py``'s stateful query (rate source, aggregation over 10,000
               keys, ``--stream-partitions`` shuffle partitions, HDFS state store, Spark's
               default retention) for ``--stream-batches`` batches, its location in the shared
               dir, with plain Spark and with spark-steward packing
               (``spark.steward.streams.pack.enabled``), each a fresh application; then a second
               fresh application restarts each query (``start()`` to its first batch). Physical
               files and bytes in the location, batch duration p50 and p95.

The shared dir is a bind mount on every host: it has no link of its own, so only the blob
server, addFile, broadcast, S3 and Spark's shuffle and task traffic cross shaped links.

    python bench/cluster.py [--rounds 3] [--workers 3] [--rate-mbit 1000] [--size-mib 256]
                            [--partitions 200,1000] [--rows 1000000] [--cache-rows 2000000]
                            [--stream-partitions 50] [--stream-batches 110]
                            [--only blobs,checkpoints,cache,streams] [--s3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.harness import Cluster, Link  # noqa: E402

JOB = Path(__file__).with_name("cluster_job.py")
STREAM_JOB = Path(__file__).with_name("streams_job.py")
SHIPPING = ("steward", "addfile", "broadcast", "floor")
SAVES = ("steward", "steward-none", "builtin")
S3_SAVES = ("steward", "steward-none")
CACHES = ("steward", "parquet")
STREAMS = ("spark", "packed")


def steward_flags(storage: str, *extra: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--storage",
                          storage], check=True, capture_output=True, text=True).stdout.split()
    for item in extra:
        out += ["--conf", item]
    return out


BASE_CONF = ("spark.executor.cores=1", "spark.executor.memory=2g", "spark.driver.memory=4g",
             "spark.python.worker.reuse=true", "spark.steward.blob.transparent=false")


def rotate(items: tuple[str, ...], round_no: int) -> list[str]:
    return [items[(i + round_no) % len(items)] for i in range(len(items))]


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(16 << 20, left)
            f.write(os.urandom(n))
            left -= n


def files_and_bytes(folder: Path) -> tuple[int, int]:
    """Files and bytes below ``folder``; a file deleted while it is walked (an executor's state
    store maintenance may still run as its application ends) is not counted."""
    files = size = 0
    for path in folder.rglob("*"):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            files += 1
            size += st.st_size
    return files, size


def variant_copy(src: Path, dest: Path, marker: bytes) -> None:
    shutil.copyfile(src, dest)
    with open(dest, "r+b") as f:
        f.write(marker)


def write_cache_inputs(root: Path, rows: int, dim_rows: int = 10_000, files: int = 8) -> None:
    """``bench/cache.py``'s inputs, written with pyarrow (no Spark, untimed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    groups = max(1, rows // 10)
    (root / "fact").mkdir(parents=True, exist_ok=True)
    (root / "dim").mkdir(parents=True, exist_ok=True)
    per = -(-rows // files)
    for i in range(files):
        ids = range(i * per, min(rows, (i + 1) * per))
        pq.write_table(pa.table({
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([(x * 7919) % dim_rows for x in ids], pa.int64()),
            "g": pa.array([x % groups for x in ids], pa.int64()),
            "v": pa.array([(x * 31) % 1000 for x in ids], pa.int64())}),
            root / "fact" / f"part-{i:05d}.parquet")
    ks = range(dim_rows)
    pq.write_table(pa.table({
        "k": pa.array(ks, pa.int64()),
        "name": pa.array([f"dim-{(k * 13) % 997}" for k in ks]),
        "w": pa.array([k % 7 + 1 for k in ks], pa.int64())}), root / "dim" / "part-0.parquet")


class Bench:
    def __init__(self, cluster: Cluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.args = args
        self.work = cluster.shared / "bench"
        self.work.mkdir(parents=True, exist_ok=True)
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.bucket = "bench-blobs"

    def submit(self, mode: str, conf: list[str], *job_args: str,
               script: Path = JOB) -> dict[str, Any]:
        out = self.work / f"{mode}-{time.monotonic_ns()}.json"
        flags = list(conf)
        for item in BASE_CONF:
            flags += ["--conf", item]
        start = time.perf_counter()
        args = (mode, str(out), *job_args) if script == JOB else (str(out), *job_args)
        result = self.cluster.submit(script, *args, conf=flags, timeout=3600)
        wall = time.perf_counter() - start
        if result.returncode != 0 or not out.exists():
            tail = (result.stdout + result.stderr)[-4000:]
            raise SystemExit(f"FAIL: {mode} application exited {result.returncode}:\n{tail}")
        if self.args.verbose:
            print(result.stderr[-2000:], file=sys.stderr)
        body: dict[str, Any] = json.loads(out.read_text())
        body["submit_wall"] = wall
        return body

    # -- blobs ---------------------------------------------------------------------------------

    def blobs(self, round_no: int) -> None:
        size = self.args.size_mib << 20
        driver_tmp = self.cluster.host_path("driver", "/tmp/bench-blobs")
        base = driver_tmp / "base"
        if not base.exists():
            write_random(base, size)
            floor = "/tmp/bench-blobs-floor"
            for host in self.cluster.workers:
                shutil.copyfile(base, self.cluster.host_path(host, floor))
        files = driver_tmp / f"round-{round_no}"
        files.mkdir(exist_ok=True)
        for i, variant in enumerate(("steward", "addfile", "broadcast", "steward-ha")):
            variant_copy(base, files / variant, f"round {round_no} {i} {time.time_ns()}".encode())
        os.sync()
        order = rotate(SHIPPING, round_no)
        print(f"blobs round {round_no + 1}: {', '.join(order)}", file=sys.stderr, flush=True)
        body = self.submit("blobs", steward_flags((self.work / "storage").as_uri(),
                                                  "spark.steward.blob.ha=false"),
                           "--order", ",".join(order), "--files", f"/tmp/bench-blobs/round-{round_no}",
                           "--floor", "/tmp/bench-blobs-floor", "--size", str(size))
        sample = dict(body["results"])
        if self.args.s3:
            (files / "steward").unlink()
            (files / "steward-ha").rename(files / "steward")
            ha = self.submit("blobs", steward_flags(
                f"s3://{self.bucket}/round-{round_no}",
                f"spark.steward.storage.option.endpoint_url={self.cluster.s3_endpoint}"),
                "--order", "steward", "--files", f"/tmp/bench-blobs/round-{round_no}",
                "--size", str(size))
            sample["steward-ha"] = ha["results"]["steward"]
        shutil.rmtree(files, ignore_errors=True)
        self.samples.setdefault("blobs", []).append(sample)

    # -- checkpoints ---------------------------------------------------------------------------

    def checkpoints(self, round_no: int) -> None:
        for partitions in self.args.partitions:
            order = rotate(SAVES, round_no)
            print(f"checkpoints round {round_no + 1}, {partitions} partitions: "
                  f"{', '.join(order)}", file=sys.stderr, flush=True)
            spark_dir = self.work / f"spark-checkpoints-{round_no}-{partitions}"
            body = self.submit("checkpoints", steward_flags((self.work / "storage").as_uri()),
                               "--order", ",".join(order), "--partitions", str(partitions),
                               "--rows", str(self.args.rows), "--spark-dir", str(spark_dir))
            shutil.rmtree(spark_dir, ignore_errors=True)
            sample = dict(body["results"])
            if self.args.s3:
                remote = self.submit("checkpoints", steward_flags(
                    f"s3://{self.bucket}/checkpoints-{round_no}-{partitions}",
                    f"spark.steward.storage.option.endpoint_url={self.cluster.s3_endpoint}"),
                    "--order", ",".join(rotate(S3_SAVES, round_no)),
                    "--partitions", str(partitions), "--rows", str(self.args.rows))
                sample.update({f"s3-{k}": v for k, v in remote["results"].items()})
            self.samples.setdefault(f"checkpoints-{partitions}", []).append(sample)

    # -- cached tables -------------------------------------------------------------------------

    def cache(self, round_no: int) -> None:
        inputs = self.work / "cache-inputs"
        if not inputs.exists():
            write_cache_inputs(inputs, self.args.cache_rows)
        copy = self.work / f"parquet-copy-{round_no}"
        order = rotate(CACHES, round_no)
        print(f"cache round {round_no + 1}: {', '.join(order)}", file=sys.stderr, flush=True)
        body = self.submit("cache", steward_flags((self.work / "storage").as_uri()),
                           "--order", ",".join(order), "--inputs", str(inputs),
                           "--copy", str(copy))
        shutil.rmtree(copy, ignore_errors=True)
        self.samples.setdefault("cache", []).append(body["results"])


    # -- streaming checkpoint locations -------------------------------------------------------

    def streams(self, round_no: int) -> None:
        order = rotate(STREAMS, round_no)
        print(f"streams round {round_no + 1}: {', '.join(order)}", file=sys.stderr, flush=True)
        sample: dict[str, Any] = {}
        for variant in order:
            location = self.work / f"stream-{variant}-{round_no}"
            conf = ["--conf", f"spark.sql.shuffle.partitions={self.args.stream_partitions}",
                    "--conf", "spark.sql.streaming.numRecentProgressUpdates=100000"]
            if variant == "packed":
                conf += steward_flags((self.work / "storage").as_uri(),
                                      "spark.steward.streams.pack.enabled=true")
            job = self.submit(f"streams-{variant}", conf, str(location), "--batches",
                              str(self.args.stream_batches), script=STREAM_JOB)
            found = files_and_bytes(location)
            restart = self.submit(f"streams-{variant}", conf, str(location), "--batches", "2",
                                  script=STREAM_JOB)
            durations = job["durations_ms"]
            sample[variant] = {
                "files": found[0], "bytes": found[1],
                "p50": statistics.median(durations),
                "p95": sorted(durations)[min(len(durations) - 1,
                                             round(0.95 * (len(durations) - 1)))],
                "restart": restart["first_batch_s"], "first_start": job["first_batch_s"],
                "batches": job["last_batch_id"] - job["first_batch_id"] + 1}
            shutil.rmtree(location, ignore_errors=True)
        self.samples.setdefault("streams", []).append(sample)


# -- the report --------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def ratio(samples: list[dict[str, Any]], ours: str, peer: str, field: str) -> str:
    values = [s[ours][field] / s[peer][field] for s in samples
              if ours in s and peer in s and s[peer][field]]
    return spread(values) if values else "-"


def report(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    if "blobs" in samples:
        rows = samples["blobs"]
        print(f"\nblobs ({len(rows)} rounds): median s (min..max)")
        for variant in (*SHIPPING, "steward-ha"):
            got = [r[variant] for r in rows if variant in r]
            if got:
                print(f"  {variant:<11} first {spread([g['first'] for g in got])}  set-up "
                      f"{spread([g['setup'] for g in got])}  warm {spread([g['warm'] for g in got])}")
        for peer in ("addfile", "broadcast"):
            print(f"  steward/{peer:<9} first {ratio(rows, 'steward', peer, 'first')}  warm "
                  f"{ratio(rows, 'steward', peer, 'warm')}")
        print(f"  steward/floor     warm {ratio(rows, 'steward', 'floor', 'warm')}")
        if any("steward-ha" in r for r in rows):
            print(f"  steward-ha/addfile first {ratio(rows, 'steward-ha', 'addfile', 'first')}")
        summary["blobs"] = rows
    for name in sorted((k for k in samples if k.startswith("checkpoints-")),
                       key=lambda k: int(k.split("-")[1])):
        rows = samples[name]
        print(f"\n{name} ({len(rows)} rounds): median s (min..max)")
        for variant in (*SAVES, *(f"s3-{v}" for v in S3_SAVES)):
            got = [r[variant] for r in rows if variant in r]
            if got:
                print(f"  {variant:<16} save {spread([g['save'] for g in got])}  restore "
                      f"{spread([g['restore'] for g in got])}  MB "
                      f"{statistics.median(g['bytes'] for g in got) / 1e6:.1f}")
        for ours in ("steward", "steward-none"):
            print(f"  {ours}/builtin save {ratio(rows, ours, 'builtin', 'save')}  restore "
                  f"{ratio(rows, ours, 'builtin', 'restore')}  bytes "
                  f"{ratio(rows, ours, 'builtin', 'bytes')}")
        if any("s3-steward" in r for r in rows):
            print(f"  s3 zstd/none save {ratio(rows, 's3-steward', 's3-steward-none', 'save')}"
                  f"  restore {ratio(rows, 's3-steward', 's3-steward-none', 'restore')}")
        summary[name] = rows
    if "cache" in samples:
        rows = samples["cache"]
        print(f"\ncache ({len(rows)} rounds): median s (min..max)")
        for variant in CACHES:
            print(f"  {variant:<8} " + "  ".join(
                f"{field} {spread([r[variant][field] for r in rows])}"
                for field in ("materialize", "count", "aggregate", "top-N")))
        print("  steward/parquet " + "  ".join(
            f"{field} {ratio(rows, 'steward', 'parquet', field)}"
            for field in ("materialize", "count", "aggregate", "top-N")))
        summary["cache"] = rows
    if "streams" in samples:
        rows = samples["streams"]
        print(f"\nstreams ({len(rows)} rounds): median (min..max)")
        for variant in STREAMS:
            print(f"  {variant:<7} " + "  ".join(
                f"{field} {spread([r[variant][field] for r in rows])}"
                for field in ("files", "bytes", "p50", "p95", "restart", "first_start")))
        print("  packed/spark " + "  ".join(
            f"{field} {ratio(rows, 'packed', 'spark', field)}"
            for field in ("files", "bytes", "p50", "p95", "restart", "first_start")))
        summary["streams"] = rows
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rate-mbit", type=float, default=1000.0)
    parser.add_argument("--delay-ms", type=float, default=None)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--partitions", type=lambda s: [int(x) for x in s.split(",")],
                        default=[200, 1000])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cache-rows", type=int, default=2_000_000)
    parser.add_argument("--stream-partitions", type=int, default=50)
    parser.add_argument("--stream-batches", type=int, default=110)
    parser.add_argument("--only", type=lambda s: s.split(","),
                        default=["blobs", "checkpoints", "cache"])
    parser.add_argument("--s3", action="store_true",
                        help="also ship blobs with HA in S3 and save checkpoints to S3")
    parser.add_argument("--json")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    link = Link(rate_mbit=args.rate_mbit, delay_ms=args.delay_ms)
    started = time.perf_counter()
    with Cluster(workers=args.workers, link=link, worker_memory="3g", s3=args.s3) as cluster:
        print(f"cluster up in {time.perf_counter() - started:.1f}s: {args.workers} workers, "
              f"links {args.rate_mbit:g} Mbit/s", file=sys.stderr, flush=True)
        bench = Bench(cluster, args)
        if args.s3:
            import boto3

            env = cluster.s3_env  # moto's made-up credentials, as every host process gets
            boto3.client("s3", endpoint_url=cluster.s3_endpoint, region_name="us-east-1",
                         aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]
                         ).create_bucket(Bucket=bench.bucket)
        for round_no in range(args.rounds):
            for part in args.only:
                getattr(bench, part)(round_no)
        summary = report(bench.samples)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "samples": summary},
                                              indent=1))


if __name__ == "__main__":
    main()
