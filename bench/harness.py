"""The multi-host cluster harness (``tests/cluster/harness.py``) from the command line.

    python bench/harness.py up [--workers 3] [--rate-mbit 1000] [--delay-ms D] [--s3]
                               [--worker-cores 1] [--worker-memory 1g] [--no-spark]
    python bench/harness.py sweep

``up`` starts a cluster (driver, master, w1..wN and, with ``--s3``, a moto S3 host, each in its
own namespaces, every link shaped to ``--rate-mbit``/``--delay-ms``), prints its facts as one
JSON object on stdout (master URL, addresses, shared dir, S3 endpoint, how to enter a host, the
start-up timings), then waits until Ctrl-C or SIGTERM and tears everything down. ``sweep``
removes harnesses whose owner died (SIGKILLed runs); live ones are left alone.

Needs root. Bench scripts use ``from tests.cluster.harness import Cluster, Link`` directly.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.harness import (  # noqa: E402
    Cluster, HarnessError, Link, Terminated, leftovers, sweep_stale, unavailable)


def facts(cluster: Cluster) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prefix": cluster.prefix,
        "master_url": cluster.master_url if cluster.spark else None,
        "master_ui": cluster.master_ui if cluster.spark else None,
        "hosts": {h: {"address": cluster.address(h), "hostname": cluster.hostname(h),
                      "enter": f"nsenter -t {cluster.holder_pid(h)} --net --uts --pid --mount "
                               "--wdns=/tmp"}
                  for h in cluster.hosts},
        "workers": list(cluster.workers),
        "gateway": cluster.gateway,
        "shared": str(cluster.shared),
        "root": str(cluster.root),
        "timings": {k: round(v, 3) for k, v in cluster.timings.items()},
    }
    if "s3" in cluster.hosts:
        out["s3_endpoint"] = cluster.s3_endpoint
        out["s3_env"] = cluster.s3_env
    return out


def up(args: argparse.Namespace) -> int:
    link = None
    if args.rate_mbit is not None or args.delay_ms is not None:
        link = Link(rate_mbit=args.rate_mbit, delay_ms=args.delay_ms)
    # A foreground tool: Ctrl-C and SIGTERM stop it even if its parent ignored them (a
    # non-interactive shell's `&` ignores SIGINT). The harness turns SIGTERM into Terminated.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cluster = Cluster(workers=args.workers, link=link, worker_cores=args.worker_cores,
                      worker_memory=args.worker_memory, s3=args.s3, spark=not args.no_spark)
    try:
        with cluster:
            print(json.dumps(facts(cluster), indent=2), flush=True)
            print("up: Ctrl-C or SIGTERM tears it down", file=sys.stderr, flush=True)
            while True:
                signal.pause()
    except HarnessError as e:
        print(f"harness {e}", file=sys.stderr)
        return 1
    except Terminated:
        code = 128 + signal.SIGTERM
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    print(f"down in {cluster.timings.get('close', 0):.2f} s", file=sys.stderr)
    return code


def sweep(_: argparse.Namespace) -> int:
    removed = sweep_stale()
    print(json.dumps({"removed": removed, "left": leftovers()}, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("up", help="start a cluster, print its facts, wait for Ctrl-C")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rate-mbit", type=float, default=None, help="per-host link rate")
    p.add_argument("--delay-ms", type=float, default=None, help="one-way delay per link")
    p.add_argument("--worker-cores", type=int, default=1)
    p.add_argument("--worker-memory", default="1g")
    p.add_argument("--s3", action="store_true", help="a moto S3 server on its own host")
    p.add_argument("--no-spark", action="store_true", help="hosts only, no master/workers")
    p.set_defaults(run=up)
    p = commands.add_parser("sweep", help="remove harnesses whose owner died")
    p.set_defaults(run=sweep)
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        print(f"harness unavailable: {reason}", file=sys.stderr)
        return 2
    began = time.monotonic()
    code = int(args.run(args))
    if args.command == "sweep":
        print(f"swept in {time.monotonic() - began:.2f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
