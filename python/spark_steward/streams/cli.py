"""``spark-steward streams ls|du|drop|unpack`` and the streams ``gc`` collects: the streams
capability's part of the command line, added by its declaration
(:mod:`spark_steward.capabilities`).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from spark_steward.commands import (Collector, ago, human_size, open_registry, plural,
                                    storage_arguments, storage_options)

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress
    from spark_steward.streams.store import StreamStore


def stream_store(args: argparse.Namespace) -> "StreamStore":
    """The stream records of ``--storage``, with ``--drop-grace`` applied when given."""
    from spark_steward.streams.config_keys import (STREAMS_ABANDONED_AFTER, STREAMS_DROP_GRACE,
                                                   STREAMS_TEMP_HORIZON)
    from spark_steward.streams.store import StreamStore

    registry = open_registry(args)
    grace = getattr(args, "drop_grace", None)
    return StreamStore(registry, abandoned_after=STREAMS_ABANDONED_AFTER.default,
                       drop_grace=STREAMS_DROP_GRACE.parse(grace) if grace
                       else STREAMS_DROP_GRACE.default,
                       temp_horizon=STREAMS_TEMP_HORIZON.default,
                       options=storage_options(args.option))


def cmd_streams_ls(args: argparse.Namespace) -> int:
    """``spark-steward streams ls`` (and ``streams du``, which also surveys each location's files).
    """
    store = stream_store(args)
    statuses = store.statuses(survey=args.du)
    if args.json:
        print(json.dumps({"storage": store.apps.storage.url,
                          "streams": [s.to_json() for s in statuses]}, indent=2))
        return 0
    if not statuses:
        print(f"no streaming checkpoint locations recorded in {store.apps.storage.url}")
        return 0
    now = time.time()
    name_w = max(4, *(len(s.record.name or "-") for s in statuses))
    if args.du:
        print(f"{'NAME':<{name_w}}  {'STATE':<9}  {'FILES':>7}  {'SIZE':>10}  {'PACKS':>5}  "
              f"{'PENDING':>7}  {'TEMP':>5}  LOCATION")
    else:
        print(f"{'NAME':<{name_w}}  {'STATE':<9}  {'LAST ACTIVE':<12}  APPLICATION  LOCATION")
    for s in statuses:
        r = s.record
        if args.du:
            if s.survey is None:
                print(f"{r.name or '-':<{name_w}}  {s.state.value:<9}  {'?':>7}  {'?':>10}  "
                      f"{'?':>5}  {'?':>7}  {'?':>5}  {r.location}  ({s.problem})")
                continue
            print(f"{r.name or '-':<{name_w}}  {s.state.value:<9}  {s.survey.files:>7}  "
                  f"{human_size(s.survey.bytes):>10}  {s.survey.packs:>5}  {s.survey.intents:>7}  "
                  f"{len(s.survey.temps):>5}  {r.location}")
        else:
            print(f"{r.name or '-':<{name_w}}  {s.state.value:<9}  "
                  f"{ago(now - r.last_active()):<12}  {r.app_id} ({s.liveness})  {r.location}")
    if args.du:
        known = [s.survey for s in statuses if s.survey is not None]
        print(f"total: {plural(len(statuses), 'location')}, "
              f"{plural(sum(k.files for k in known), 'file')}, "
              f"{human_size(sum(k.bytes for k in known))}, "
              f"{plural(sum(k.intents for k in known), 'delete')} pending")
    return 0


def cmd_streams_drop(args: argparse.Namespace) -> int:
    """``spark-steward streams drop``: removes a location once no run of its query may be active."""
    result = stream_store(args).drop(args.target)
    if args.json:
        print(json.dumps({"query_id": result.query_id, "location": result.location,
                          "files": result.files, "bytes": result.bytes}, indent=2))
    else:
        print(f"dropped {result.location}: {plural(result.files, 'file')}, "
              f"{human_size(result.bytes)}")
    return 0


def cmd_streams_unpack(args: argparse.Namespace) -> int:
    """``spark-steward streams unpack``: writes a stopped location's packed files back as plain
    files."""
    result = stream_store(args).unpack(args.target)
    if args.json:
        print(json.dumps({"query_id": result.query_id, "location": result.location,
                          "files": result.files, "packs": result.packs}, indent=2))
    else:
        print(f"unpacked {result.location}: {plural(result.files, 'file')} written back from "
              f"{plural(result.packs, 'pack')}")
    return 0


def _collect(registry: "ApplicationRegistry", args: argparse.Namespace,
             progress: "Progress | None") -> "GcReport":
    from spark_steward.streams.gc import collect_streams

    return collect_streams(stream_store(args), dry_run=args.dry_run, progress=progress)


#: What ``spark-steward gc`` collects of streams: deletes Spark asked for, sweepable temp files
#: and drops that were recorded but not finished.
COLLECTOR = Collector("streams", _collect, "location")


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Adds ``spark-steward streams ls|du|drop|unpack``."""
    streams = sub.add_parser("streams", help="streaming checkpoint locations in a storage dir")
    streams_sub = streams.add_subparsers(dest="streams_command", required=True)
    sls = streams_sub.add_parser(
        "ls", help="one line per location: name, state, last activity, application, location")
    storage_arguments(sls)
    sls.set_defaults(run=cmd_streams_ls, du=False)
    sdu = streams_sub.add_parser(
        "du", help="one line per location: files, bytes, deletes pending, sweepable temp files "
                   "(lists every location)")
    storage_arguments(sdu)
    sdu.set_defaults(run=cmd_streams_ls, du=True)
    sdrop = streams_sub.add_parser(
        "drop", help="remove a location no run of its query holds, idle for the drop grace")
    storage_arguments(sdrop)
    sdrop.add_argument("target", help="the query's name, id or location")
    sdrop.add_argument("--drop-grace", help="override spark.steward.streams.drop-grace")
    sdrop.set_defaults(run=cmd_streams_drop)
    sunpack = streams_sub.add_parser(
        "unpack", help="write a stopped query's packed files back as plain files (the layout "
                       "Spark reads without spark-steward)")
    storage_arguments(sunpack)
    sunpack.add_argument("target", help="the query's name, id or location")
    sunpack.set_defaults(run=cmd_streams_unpack)
