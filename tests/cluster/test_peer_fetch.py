"""Peer fetch between real hosts: a blob one worker host holds is served by its executor JVM to
the other hosts while they also take pieces from the driver and from each other; the serving
host loses power mid-transfer and every other host still ends with the right bytes and no temp
or have-file left (tests/cluster/scripts/peers.py)."""

from __future__ import annotations

from tests.cluster.conftest import StewardApp, steward_setup, wait_until
from tests.cluster.harness import Cluster, Link

SIZE_MIB = 64


def _progress(cluster: Cluster, host: str, local_dir: str, app_id: str) -> int:
    """Verified pieces ``host`` has announced in a have-file of the application (0: none)."""
    folder = cluster.host_path(host, f"{local_dir}/{app_id}/blob-cache/_app")
    best = 0
    for have in folder.glob(".*.tmp-have") if folder.exists() else ():
        try:
            best = max(best, have.read_bytes().split(b"\n", 1)[1].count(b"1"))
        except (OSError, IndexError):
            pass
    return best


def _cache_names(cluster: Cluster, host: str, local_dir: str, app_id: str) -> list[str]:
    folder = cluster.host_path(host, f"{local_dir}/{app_id}/blob-cache/_app")
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_hosts_fill_from_a_peer_that_dies_mid_transfer(cluster: Cluster) -> None:
    seed, others = cluster.workers[0], cluster.workers[1:]
    flags, _, local_dir = steward_setup(cluster, "peers", {
        "spark.steward.blob.ha": "false", "spark.steward.blob.network-timeout": "20s"})
    out = cluster.shared / "peers"
    try:
        with StewardApp(cluster, "peers.py", out, flags, str(SIZE_MIB),
                        cluster.hostname(seed)) as app:
            fanout = app.wait_phase("fanout", timeout=300)
            # Slow links, so the fill takes seconds: the driver's slowest, the seed's fast
            # enough that most pieces would come from it.
            cluster.shape("driver", Link(rate_mbit=40))
            for host in cluster.workers:
                cluster.shape(host, Link(rate_mbit=120))
            app.go("fanout")
            app.wait_phase("fetching", timeout=60)
            wait_until(lambda: any(_progress(cluster, h, local_dir, fanout["app_id"]) >= 3
                                   for h in others), 120, "pieces arriving on another host")
            cluster.kill_host(seed)  # the serving host loses power mid-transfer
            result = app.wait_phase("fetched", timeout=300)
            leftovers = {h: _cache_names(cluster, h, local_dir, fanout["app_id"])
                         for h in others}
            app.go("fetched")
            app.finish(timeout=300)
    finally:
        for host in ("driver", *cluster.workers):
            cluster.shape(host, Link())
        cluster.restart_worker(seed)

    rows = [r for r in result["rows"] if r["host"] != cluster.hostname(seed)]
    assert {r["host"] for r in rows} == {cluster.hostname(h) for h in others}
    assert {r["sha256"] for r in rows} == {result["expected"]}
    fills = [r["swarm"] for r in rows if r.get("swarm")]
    assert len(fills) == len(others), rows  # each host filled once, in pieces
    assert sum(f["from_peers"] for f in fills) > 0, fills
    seed_address = cluster.address(seed)
    assert any(any(p.startswith(f"{seed_address}:") for p in f["dropped"]) for f in fills), \
        fills
    for host, names in leftovers.items():
        assert result["expected"] in names, (host, names)  # the verified copy, by its key
        assert not [n for n in names if ".tmp-" in n], (host, names)  # no temp or have-file
