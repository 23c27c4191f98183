"""Fan-out: one ``--size-mib`` file (256 MiB) shipped to one task on each of 1, 3 and 6 worker
hosts, on the multi-host harness (``tests/cluster/harness.py``: a standalone master, one
worker host per executor and a driver host, every link including the driver's shaped to
``--rate-mbit`` both ways). One cluster of max(``--hosts``) workers for the whole run; each
(variant, hosts, round) is a fresh application submitted on the driver host with the
``spark-steward conf`` flags, ``spark.cores.max=<hosts>`` and ``spark.executor.cores=1`` (one
executor on each of <hosts> distinct workers), copying its own file from one random base file
on the driver host's /tmp, with a distinct marker so no host has it cached.
``bench/fanout_job.py`` waits until every executor is registered and runs an untimed job, then
times the set-up plus one job of <hosts> tasks that read the whole file (each task checks the
byte count, the hosts must all differ):

* peer       ``spark_steward.blobs.put`` + ``blobs.get``, ``spark.steward.blob.peer.enabled=true``:
             hosts exchange verified pieces;
* server     the same with ``peer.enabled=false``: every host fetches the whole blob from the
             driver's blob server;
* addfile    ``sc.addFile`` + ``SparkFiles.get`` (Spark's own: ``blob.transparent=false``);
* broadcast  reading the file + ``sc.broadcast`` of its bytes; tasks take ``len(bc.value)``.

Blob HA is off (``spark.steward.blob.ha=false``), so every byte crosses links, not the shared
dir. Variants run in an order rotated per round. Reported: per variant and host count the median
total seconds (set-up included) with min..max over rounds, and the medians of the per-round
ratios peer N/1 and server N/1 hosts, peer/server, peer/addfile and peer/broadcast.
``--json FILE`` gets ``{"variant": {"hosts": median seconds}}``; every sample (set-up, job, per
task seconds, hosts and, with peer fetch, where each host's pieces came from; the timed window on
the system's monotonic clock, for a CPU profile of just that) goes to ``FILE.samples.json``.

    python bench/fanout.py --hosts 1,3,6 --json FILE [--rounds 3] [--size-mib 256]
                           [--rate-mbit 1000] [--variants peer,server,addfile,broadcast]
                           [--settle SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster import rotate, steward_flags, variant_copy, write_random  # noqa: E402 (bench/)
from tests.cluster.harness import Cluster, Link  # noqa: E402

JOB = Path(__file__).with_name("fanout_job.py")
VARIANTS = ("peer", "server", "addfile", "broadcast")
BASE_CONF = ("spark.executor.cores=1", "spark.executor.memory=2g", "spark.driver.memory=4g",
             "spark.python.worker.reuse=true", "spark.steward.blob.transparent=false",
             "spark.steward.blob.ha=false")
VARIANT_CONF = {"peer": ("spark.steward.blob.peer.enabled=true",),
                "server": ("spark.steward.blob.peer.enabled=false",)}
DRIVER_DIR = "/tmp/bench-fanout"  # on the driver host


class Bench:
    def __init__(self, cluster: Cluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.args = args
        self.work = cluster.shared / "bench-fanout"
        self.work.mkdir(parents=True, exist_ok=True)
        self.storage = (self.work / "storage").as_uri()
        self.files = cluster.host_path("driver", DRIVER_DIR)
        self.base = self.files / "base"
        write_random(self.base, args.size_mib << 20)
        self.samples: list[dict[str, Any]] = []

    def measure(self, variant: str, hosts: int, round_no: int) -> dict[str, Any]:
        name = f"{variant}-{hosts}-r{round_no}-{time.time_ns()}"
        variant_copy(self.base, self.files / name, f"fanout {name}".encode())
        os.sync()
        out = self.work / f"{name}.json"
        flags = steward_flags(self.storage, *BASE_CONF, *VARIANT_CONF.get(variant, ()),
                              f"spark.cores.max={hosts}")
        start = time.perf_counter()
        try:
            result = self.cluster.submit(JOB, variant, str(out), "--file", f"{DRIVER_DIR}/{name}",
                                         "--hosts", str(hosts), "--settle",
                                         str(self.args.settle), conf=flags, timeout=1800)
        finally:
            (self.files / name).unlink(missing_ok=True)
        wall = time.perf_counter() - start
        if result.returncode != 0 or not out.exists():
            tail = (result.stdout + result.stderr)[-4000:]
            raise SystemExit(f"FAIL: {variant} on {hosts} hosts exited {result.returncode}:\n"
                             f"{tail}")
        if self.args.verbose:
            print(result.stderr[-2000:], file=sys.stderr)
        body: dict[str, Any] = json.loads(out.read_text())
        body.update(round=round_no, submit_wall=wall)
        print(f"  {variant:<9} {hosts} hosts: {body['total']:.3f}s (set-up {body['setup']:.3f}s, "
              f"job {body['job']:.3f}s; application {wall:.1f}s)", file=sys.stderr, flush=True)
        return body

    def round(self, round_no: int) -> None:
        order = rotate(tuple(self.args.variants), round_no)
        print(f"round {round_no + 1}: {', '.join(order)}", file=sys.stderr, flush=True)
        for hosts in self.args.hosts:
            for variant in order:
                self.samples.append(self.measure(variant, hosts, round_no))


# -- the report --------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def by_key(samples: list[dict[str, Any]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    return {(s["variant"], s["hosts"], s["round"]): s for s in samples}


def ratios(samples: list[dict[str, Any]], a: tuple[str, int], b: tuple[str, int]
           ) -> list[float]:
    """Per-round total(a) / total(b); a and b are (variant, hosts)."""
    keyed = by_key(samples)
    rounds = sorted({s["round"] for s in samples})
    return [keyed[(*a, r)]["total"] / keyed[(*b, r)]["total"] for r in rounds
            if (*a, r) in keyed and (*b, r) in keyed]


def report(samples: list[dict[str, Any]], variants: list[str], hosts: list[int]
           ) -> dict[str, dict[str, float]]:
    rounds = len({s["round"] for s in samples})
    medians: dict[str, dict[str, float]] = {}
    width = 25
    print(f"\nfan-out ({rounds} rounds): set-up + job, median s (min..max)")
    print(f"  {'':<10}" + "".join(f"{f'{h} hosts':<{width}}" for h in hosts))
    for field in ("total", "setup", "job"):
        if field != "total":
            print(f"  {field}:")
        for variant in variants:
            cells = []
            for h in hosts:
                got = [s[field] for s in samples if s["variant"] == variant and s["hosts"] == h]
                cells.append(spread(got) if got else "-")
                if got and field == "total":
                    medians.setdefault(variant, {})[str(h)] = statistics.median(got)
            print(f"  {variant:<10}" + "".join(f"{c:<{width}}" for c in cells))
    print("\nratios, medians of per-round ratios (min..max):")
    lowest = min(hosts)
    for variant in ("peer", "server"):
        for h in hosts:
            if h != lowest and variant in variants:
                got = ratios(samples, (variant, h), (variant, lowest))
                if got:
                    print(f"  {variant} {h}/{lowest} hosts".ljust(26) + spread(got))
    for other in ("server", "addfile", "broadcast"):
        if "peer" in variants and other in variants:
            for h in hosts:
                got = ratios(samples, ("peer", h), (other, h))
                if got:
                    print(f"  peer/{other} {h} hosts".ljust(26) + spread(got))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 3, 6])
    parser.add_argument("--json", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rate-mbit", type=float, default=1000.0)
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    parser.add_argument("--settle", type=float, default=0.0,
                        help="untimed seconds between the warm-up job and the set-up")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if unknown := set(args.variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    if not args.hosts or min(args.hosts) < 1:
        parser.error("--hosts takes host counts of at least 1, e.g. 1,3,6")
    started = time.perf_counter()
    workers = max(args.hosts)
    with Cluster(workers=workers, link=Link(rate_mbit=args.rate_mbit),
                 worker_memory="3g") as cluster:
        print(f"cluster up in {time.perf_counter() - started:.1f}s: {workers} workers, links "
              f"{args.rate_mbit:g} Mbit/s", file=sys.stderr, flush=True)
        bench = Bench(cluster, args)
        for round_no in range(args.rounds):
            bench.round(round_no)
        medians = report(bench.samples, args.variants, args.hosts)
    print(f"\nwhole run {time.perf_counter() - started:.0f}s", file=sys.stderr)
    Path(args.json).write_text(json.dumps(medians, indent=1))
    Path(args.json + ".samples.json").write_text(json.dumps(
        {"args": vars(args), "samples": bench.samples}, indent=1))


if __name__ == "__main__":
    main()
