"""``spark-steward cache ls|du`` and the cached tables ``gc`` collects: the cached-table
capability's part of the command line, added by its declaration
(:mod:`spark_steward.capabilities`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from spark_steward.commands import (Collector, ago, human_size, open_registry, plural,
                                    storage_arguments)

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress


def cmd_cache_ls(args: argparse.Namespace) -> int:
    """``spark-steward cache ls``: one line per cached table."""
    from spark_steward.tables.gc import list_tables

    registry = open_registry(args)
    listing, corrupt = list_tables(registry)
    if args.json:
        print(json.dumps({
            "storage": registry.storage.url,
            "tables": [{"key": t.entry.key, "state": t.entry.state.value,
                        "shared": t.entry.shared, "app_id": t.entry.app_id,
                        "liveness": t.liveness, "attempt": t.entry.attempt,
                        "users": [{"app_id": u, "liveness": lv} for u, lv in t.users],
                        "rows": t.entry.rows, "files": t.files, "bytes": t.bytes,
                        "created_at": t.entry.created_at,
                        "description": t.entry.description,
                        "released_at": t.entry.released_at,
                        "discard_reason": t.entry.discard_reason or None} for t in listing],
            "corrupt_entries": corrupt,
        }, indent=2))
        return 0
    for path in corrupt:
        print(f"warning: entry {path} fails verification (left alone)", file=sys.stderr)
    if not listing:
        print(f"no cached tables in {registry.storage.url}")
        return 0
    now = time.time()
    key_w = max(3, *(len(t.entry.key) for t in listing))
    owner_w = max(11, *(len(t.entry.app_id) + len(t.liveness) + 3 for t in listing))
    print(f"{'KEY':<{key_w}}  {'STATE':<19}  {'SHARED':<6}  {'ROWS':>10}  {'FILES':>5}  "
          f"{'SIZE':>10}  {'CREATED':<12}  {'APPLICATION':<{owner_w}}  USERS  DESCRIPTION")
    for t in listing:
        e = t.entry
        owner = f"{e.app_id} ({t.liveness})"
        users = ",".join(u for u, _ in t.users) or "-"
        print(f"{e.key:<{key_w}}  {e.state.value:<19}  {'yes' if e.shared else 'no':<6}  "
              f"{e.rows:>10}  {t.files:>5}  {human_size(t.bytes):>10}  "
              f"{ago(now - e.created_at):<12}  {owner:<{owner_w}}  {users}  "
              f"{e.description or '-'}")
    print(f"total: {plural(len(listing), 'table')}, {human_size(sum(t.bytes for t in listing))}")
    return 0


def cmd_cache_du(args: argparse.Namespace) -> int:
    """``spark-steward cache du``: cached-table bytes per state and application, and orphans."""
    from spark_steward.tables.gc import space

    registry = open_registry(args)
    found = space(registry)
    dead = sum(b for lv, b in found.by_liveness.items() if lv in ("finished", "crashed"))
    totals = {"tables": sum(n for n, _ in found.by_state.values()),
              "bytes": sum(b for _, b in found.by_state.values()),
              "live_bytes": found.by_liveness.get("live", 0), "dead_bytes": dead,
              "unknown_bytes": found.by_liveness.get("unknown", 0),
              "orphan_files": found.orphan_files, "orphan_bytes": found.orphan_bytes}
    if args.json:
        print(json.dumps({
            "storage": registry.storage.url,
            "states": {s: {"tables": n, "bytes": b} for s, (n, b) in found.by_state.items()},
            "applications": [{"app_id": a.app_id, "liveness": a.liveness, "tables": a.tables,
                              "bytes": a.bytes} for a in found.by_application],
            "totals": totals,
            "corrupt_entries": found.corrupt,
        }, indent=2))
        return 0
    for path in found.corrupt:
        print(f"warning: entry {path} fails verification (left alone)", file=sys.stderr)
    if not totals["tables"] and not found.orphan_files:
        print(f"no cached tables in {registry.storage.url}")
        return 0
    print(f"{'STATE':<19}  {'TABLES':>6}  {'SIZE':>10}")
    for state, (n, size) in found.by_state.items():
        print(f"{state:<19}  {n:>6}  {human_size(size):>10}")
    if found.by_application:
        app_w = max(11, *(len(a.app_id) for a in found.by_application))
        print(f"\n{'APPLICATION':<{app_w}}  {'STATE':<8}  {'TABLES':>6}  {'SIZE':>10}")
        for a in found.by_application:
            print(f"{a.app_id:<{app_w}}  {a.liveness:<8}  {a.tables:>6}  {human_size(a.bytes):>10}")
    print(f"\ntotal: {plural(totals['tables'], 'table')}, {human_size(totals['bytes'])} "
          f"(live {human_size(totals['live_bytes'])}, dead {human_size(dead)}, unknown "
          f"{human_size(totals['unknown_bytes'])}); orphaned: "
          f"{plural(found.orphan_files, 'file')}, {human_size(found.orphan_bytes)}")
    return 0


def _collect(registry: "ApplicationRegistry", args: argparse.Namespace,
             progress: "Progress | None") -> "GcReport":
    from spark_steward.tables.config_keys import CACHE_ORPHAN_GRACE, CACHE_SHARED_RETENTION
    from spark_steward.tables.gc import collect_garbage

    grace = (CACHE_ORPHAN_GRACE.parse(args.orphan_grace) if args.orphan_grace
             else CACHE_ORPHAN_GRACE.default)
    retention = (CACHE_SHARED_RETENTION.parse(args.shared_retention) if args.shared_retention
                 else CACHE_SHARED_RETENTION.default)
    return collect_garbage(registry, dry_run=args.dry_run, orphan_grace=grace,
                           progress=progress, shared_retention=retention)


#: What ``spark-steward gc`` collects of cached tables: dead applications', released shared
#: ones past their retention, and orphaned data.
COLLECTOR = Collector("caches", _collect, "item")


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Adds ``spark-steward cache ls|du``."""
    cache = sub.add_parser("cache", help="cached tables in a storage dir")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    tls = cache_sub.add_parser(
        "ls", help="one line per cached table: key, state, shared, rows, files, size, created, "
                   "application and its liveness, users, description")
    storage_arguments(tls)
    tls.set_defaults(run=cmd_cache_ls)
    tdu = cache_sub.add_parser(
        "du", help="bytes per state and per application, live vs dead, orphaned bytes")
    storage_arguments(tdu)
    tdu.set_defaults(run=cmd_cache_du)
