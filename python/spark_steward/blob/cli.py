"""``spark-steward blobs ls|du`` and the blobs ``gc`` collects: the blob capability's part of the
command line, added by its declaration (:mod:`spark_steward.capabilities`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from spark_steward.commands import Collector, human_size, open_registry, plural, storage_arguments

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress


def cmd_blobs_ls(args: argparse.Namespace) -> int:
    """``spark-steward blobs ls``: one line per blob kept in the storage dir."""
    from spark_steward.applications import validate_app_id
    from spark_steward.blob.gc import scan_blobs
    from spark_steward.gc import application_liveness

    registry = open_registry(args)
    storage = registry.storage
    app_filter = validate_app_id(args.app) if args.app else None
    scan = scan_blobs(storage, app_filter)
    states = {app: application_liveness(registry, app)
              for app in sorted({b.app_id for b in scan.blobs})}
    total = sum(b.size for b in scan.blobs)
    scopes = len({(b.app_id, b.scope) for b in scan.blobs})
    if args.json:
        print(json.dumps({
            "storage": storage.url,
            "blobs": [{"app_id": b.app_id, "scope": b.scope, "key": b.key, "size": b.size,
                       "path": b.path, "liveness": states[b.app_id]} for b in scan.blobs],
            "totals": {"applications": len(states), "scopes": scopes, "blobs": len(scan.blobs),
                       "bytes": total, "temp_files": len(scan.temp_files)},
        }, indent=2))
        return 0
    temps = (f" ({plural(len(scan.temp_files), 'temp file')} not listed)"
             if scan.temp_files else "")
    if not scan.blobs:
        where = f" of {app_filter}" if app_filter else ""
        print(f"no blobs{where} in {storage.url}{temps}")
        return 0
    app_w = max(11, *(len(b.app_id) for b in scan.blobs))
    scope_w = max(5, *(len(b.scope) for b in scan.blobs))
    print(f"{'APPLICATION':<{app_w}}  {'SCOPE':<{scope_w}}  {'KEY':<12}  {'SIZE':>10}  STATE")
    for b in scan.blobs:
        print(f"{b.app_id:<{app_w}}  {b.scope:<{scope_w}}  {b.key[:12]:<12}  "
              f"{human_size(b.size):>10}  {states[b.app_id]}")
    print(f"total: {plural(len(scan.blobs), 'blob')} in {plural(scopes, 'scope')} of "
          f"{plural(len(states), 'application')}, {human_size(total)}{temps}")
    return 0


def cmd_blobs_du(args: argparse.Namespace) -> int:
    """``spark-steward blobs du``: blob usage per application."""
    from spark_steward.blob.gc import usage_by_application

    registry = open_registry(args)
    usage = usage_by_application(registry)
    totals = {"applications": len(usage), "scopes": sum(u.scopes for u in usage),
              "blobs": sum(u.blobs for u in usage), "bytes": sum(u.bytes for u in usage),
              "temp_files": sum(u.temp_files for u in usage),
              "temp_bytes": sum(u.temp_bytes for u in usage)}
    if args.json:
        print(json.dumps({
            "storage": registry.storage.url,
            "applications": [{"app_id": u.app_id, "liveness": u.liveness, "scopes": u.scopes,
                              "blobs": u.blobs, "bytes": u.bytes, "temp_files": u.temp_files,
                              "temp_bytes": u.temp_bytes} for u in usage],
            "totals": totals,
        }, indent=2))
        return 0
    if not usage:
        print(f"no blobs in {registry.storage.url}")
        return 0
    app_w = max(11, *(len(u.app_id) for u in usage))
    print(f"{'APPLICATION':<{app_w}}  {'STATE':<8}  {'SCOPES':>6}  {'BLOBS':>7}  {'SIZE':>10}  "
          f"{'TEMP':>5}")
    for u in usage:
        print(f"{u.app_id:<{app_w}}  {u.liveness:<8}  {u.scopes:>6}  {u.blobs:>7}  "
              f"{human_size(u.bytes):>10}  {u.temp_files:>5}")
    print(f"{'total':<{app_w}}  {'':<8}  {totals['scopes']:>6}  {totals['blobs']:>7}  "
          f"{human_size(totals['bytes']):>10}  {totals['temp_files']:>5}")
    return 0


def _collect(registry: "ApplicationRegistry", args: argparse.Namespace,
             progress: "Progress | None") -> "GcReport":
    from spark_steward.blob.connect_gc import collect_spark_folders
    from spark_steward.blob.gc import collect_garbage

    report = collect_garbage(registry, dry_run=args.dry_run, progress=progress)
    folders = collect_spark_folders(registry, dry_run=args.dry_run, progress=progress)
    report.deleted += folders.deleted
    report.skipped += folders.skipped
    report.failed += folders.failed
    return report


#: What ``spark-steward gc`` collects of blobs: the HA copies dead applications left, and what
#: crashed Connect servers on this host left of their sessions' artifacts.
COLLECTOR = Collector("blobs", _collect)


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Adds ``spark-steward blobs ls|du``."""
    blobs = sub.add_parser("blobs", help="blobs in the HA storage dir")
    blobs_sub = blobs.add_subparsers(dest="blobs_command", required=True)
    ls = blobs_sub.add_parser("ls", help="one line per blob: application, scope, key, size, "
                                         "liveness of its application")
    storage_arguments(ls)
    ls.add_argument("--app", metavar="APP_ID", help="only the blobs of this application")
    ls.set_defaults(run=cmd_blobs_ls)
    du = blobs_sub.add_parser("du", help="per application: liveness, scopes, blobs, bytes, "
                                         "temp files")
    storage_arguments(du)
    du.set_defaults(run=cmd_blobs_du)
