"""``spark-steward checkpoints ls|du`` and the checkpoints ``gc`` collects: the checkpoint
capability's part of the command line, added by its declaration
(:mod:`spark_steward.capabilities`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from spark_steward.commands import (Collector, human_size, open_registry, plural, ratio,
                                    storage_arguments)

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress


def cmd_checkpoints_ls(args: argparse.Namespace) -> int:
    """``spark-steward checkpoints ls``: one line per checkpoint, then the merged series' space."""
    from spark_steward.checkpoint.gc import list_checkpoints, series_space

    registry = open_registry(args)
    listing, corrupt = list_checkpoints(registry)
    if args.series:
        listing = [c for c in listing if c.entry.series == args.series]
    if args.json:
        print(json.dumps({
            "storage": registry.storage.url,
            "checkpoints": [{"series": c.entry.series, "id": c.entry.number,
                             "state": c.entry.state.value, "kind": c.entry.kind.value,
                             "app_id": c.entry.app_id, "liveness": c.liveness,
                             "created_at": c.entry.created_at,
                             "completed_at": c.entry.completed_at, "rows": c.entry.rows,
                             "files": c.files, "bytes": c.bytes, "data": c.entry.data,
                             "merged": c.entry.merged, "physical": list(c.entry.physical),
                             "discard_reason": c.entry.discard_reason or None}
                            for c in listing],
            "corrupt_entries": corrupt,
        }, indent=2))
        return 0
    for path in corrupt:
        print(f"warning: entry {path} fails verification (left alone)", file=sys.stderr)
    if not listing:
        print(f"no checkpoints in {registry.storage.url}")
        return 0
    series_w = max(6, *(len(c.entry.series) for c in listing))
    print(f"{'SERIES':<{series_w}}  {'ID':>6}  {'STATE':<19}  {'ROWS':>10}  {'SIZE':>10}  "
          "APPLICATION")
    for c in listing:
        rows = "-" if c.entry.rows is None else str(c.entry.rows)
        print(f"{c.entry.series:<{series_w}}  {c.entry.number:>6}  {c.entry.state.value:<19}  "
              f"{rows:>10}  {human_size(c.bytes):>10}  {c.entry.app_id} ({c.liveness})")
    series = len({c.entry.series for c in listing})
    print(f"total: {plural(len(listing), 'checkpoint')} in {series} series, "
          f"{human_size(sum(c.bytes for c in listing))}")
    for space in series_space(registry):
        if space.merged and (not args.series or space.series == args.series):
            print(f"series {space.series}: {plural(space.files, 'physical file')}, "
                  f"{human_size(space.physical_bytes)} for {human_size(space.live_bytes)} live, "
                  f"space amplification {ratio(space.amplification)}")
    return 0


def cmd_checkpoints_du(args: argparse.Namespace) -> int:
    """Physical against live bytes per series: the space amplification file merging bounds."""
    from spark_steward.checkpoint.gc import series_space

    registry = open_registry(args)
    spaces = series_space(registry)
    if args.json:
        print(json.dumps({"storage": registry.storage.url, "series": [
            {"series": s.series, "checkpoints": s.checkpoints, "merged": s.merged,
             "files": s.files, "physical_bytes": s.physical_bytes, "live_bytes": s.live_bytes,
             "space_amplification": None if s.amplification == float("inf")
             else round(s.amplification, 4)} for s in spaces]}, indent=2))
        return 0
    if not spaces:
        print(f"no checkpoints in {registry.storage.url}")
        return 0
    width = max(6, *(len(s.series) for s in spaces))
    print(f"{'SERIES':<{width}}  {'CHECKPOINTS':>11}  {'MERGED':<6}  {'FILES':>6}  "
          f"{'PHYSICAL':>10}  {'LIVE':>10}  AMPLIFICATION")
    for s in spaces:
        print(f"{s.series:<{width}}  {s.checkpoints:>11}  {'yes' if s.merged else 'no':<6}  "
              f"{s.files:>6}  {human_size(s.physical_bytes):>10}  {human_size(s.live_bytes):>10}  "
              f"{ratio(s.amplification)}")
    return 0


def _collect(registry: "ApplicationRegistry", args: argparse.Namespace,
             progress: "Progress | None") -> "GcReport":
    from spark_steward.checkpoint.gc import collect_garbage
    from spark_steward.checkpoint.config_keys import CHECKPOINTS_ORPHAN_GRACE

    grace = (CHECKPOINTS_ORPHAN_GRACE.parse(args.orphan_grace) if args.orphan_grace
             else CHECKPOINTS_ORPHAN_GRACE.default)
    return collect_garbage(registry, dry_run=args.dry_run, orphan_grace=grace,
                           progress=progress)


#: What ``spark-steward gc`` collects of checkpoints: dead applications' and orphaned data.
COLLECTOR = Collector("checkpoints", _collect, "item")


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Adds ``spark-steward checkpoints ls|du``."""
    checkpoints = sub.add_parser("checkpoints", help="checkpoints in a storage dir")
    checkpoints_sub = checkpoints.add_subparsers(dest="checkpoints_command", required=True)
    cls = checkpoints_sub.add_parser(
        "ls", help="one line per checkpoint: series, id, state, rows, size, application")
    storage_arguments(cls)
    cls.add_argument("--series", help="only this series")
    cls.set_defaults(run=cmd_checkpoints_ls)
    cdu = checkpoints_sub.add_parser(
        "du", help="per series: physical files and bytes, live bytes, space amplification")
    storage_arguments(cdu)
    cdu.set_defaults(run=cmd_checkpoints_du)
