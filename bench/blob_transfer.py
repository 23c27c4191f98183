"""The blob server's transfer rate in clear and over TLS, against an in-kernel file copy.

One process, loopback, one random file (``--size-mib``, 256 by default) in the page cache. Per
round, in a rotated order, each variant moves the whole file once into a fresh file:

* copyfile  ``shutil.copyfile``: what moving the bytes costs without a network;
* clear     a BlobClient fetching from a BlobServer (splice into the file, crc32c and SHA-256
            computed behind it, as executors do);
* tls       the same with ``spark.steward.blob.encryption`` on: TLS 1.3 to the pinned
            certificate (AES-GCM both ways, no splice: the client decrypts in user space).

Each fetch is a new connection (handshake included, TLS's too), as an executor's first fetch
is. Also, once: SHA-256 and crc32c over the same bytes in memory, the floor of verification.
Medians of ``--rounds`` with their spread; ratios are of medians.

    python bench/blob_transfer.py [--size-mib 256] [--rounds 7] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from spark_steward.blob import tls  # noqa: E402
from spark_steward.blob.client import BlobClient  # noqa: E402
from spark_steward.blob.keys import BlobKey  # noqa: E402
from spark_steward.blob.server import BlobServer, LocatedBlob  # noqa: E402

SECRET = "bench-secret"
VARIANTS = ("copyfile", "clear", "tls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    size = args.size_mib << 20
    work = Path(tempfile.mkdtemp(prefix="steward-transfer-"))
    try:
        data = os.urandom(size)
        source = work / "blob.bin"
        source.write_bytes(data)
        key = BlobKey(hashlib.sha256(data).hexdigest())
        crc = crc32c.crc32c(data)
        started = time.perf_counter()
        hashlib.sha256(data).digest()
        sha_s = time.perf_counter() - started
        started = time.perf_counter()
        crc32c.crc32c(data)
        crc_s = time.perf_counter() - started
        del data

        identity = tls.new_identity()
        servers = {
            name: BlobServer(host="127.0.0.1", port=0, secret=SECRET,
                             locate=lambda k, s: LocatedBlob(open(source, "rb"), size, crc),
                             on_message=lambda op, request: {},
                             tls=tls.server_context(identity) if name == "tls" else None)
            for name in ("clear", "tls")}
        addresses = {name: server.start() for name, server in servers.items()}
        client_tls = tls.client_context(identity.cert_pem)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for round_ in range(args.rounds):
            order = VARIANTS[round_ % 3:] + VARIANTS[:round_ % 3]
            for variant in order:
                target = work / f"out-{variant}.bin"
                target.unlink(missing_ok=True)
                os.sync()
                started = time.perf_counter()
                if variant == "copyfile":
                    shutil.copyfile(source, target)
                else:
                    with BlobClient(*addresses[variant], SECRET,
                                    tls=client_tls if variant == "tls" else None) as client, \
                            open(target, "wb") as out:
                        received = client.fetch(key, "_app", out)
                    assert received.sha256 == key.digest
                times[variant].append(time.perf_counter() - started)
            print(f"round {round_ + 1}: " + ", ".join(
                f"{v} {times[v][-1]:.3f}s" for v in VARIANTS), flush=True)
        for server in servers.values():
            server.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mib = size / (1 << 20)
    figures: dict[str, object] = {"size_mib": mib, "rounds": args.rounds,
                                  "load_average": os.getloadavg()[0]}
    print(f"\n{mib:.0f} MiB, {args.rounds} rounds, medians (min-max):")
    for variant in VARIANTS:
        values = times[variant]
        median = statistics.median(values)
        figures[variant] = {"median_s": median, "min_s": min(values), "max_s": max(values),
                            "mib_per_s": mib / median}
        print(f"  {variant:9s} {median:.3f} s ({min(values):.3f}-{max(values):.3f}), "
              f"{mib / median:.0f} MiB/s")
    med = {v: statistics.median(times[v]) for v in VARIANTS}
    ratios = {"clear_rate_vs_copyfile": med["copyfile"] / med["clear"],
              "tls_rate_vs_clear": med["clear"] / med["tls"],
              "tls_rate_vs_copyfile": med["copyfile"] / med["tls"]}
    figures["ratios"] = ratios
    figures["in_memory"] = {"sha256_mib_per_s": mib / sha_s, "crc32c_mib_per_s": mib / crc_s}
    print(f"  rate clear / copyfile {ratios['clear_rate_vs_copyfile']:.2f}x, "
          f"tls / clear {ratios['tls_rate_vs_clear']:.2f}x, "
          f"tls / copyfile {ratios['tls_rate_vs_copyfile']:.2f}x")
    print(f"  in memory: SHA-256 {mib / sha_s:.0f} MiB/s, crc32c {mib / crc_s:.0f} MiB/s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
