"""The ``spark-steward`` command: ``jar``, ``conf``, ``status``, ``blobs``, ``gc``, ``version``.

The library prints nothing; this module is where output happens. Errors print one line
(``error: ...``) and exit with status 2; ``gc`` exits with 1 when some delete failed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, TextIO

from spark_steward._version import __version__
from spark_steward.config import ENABLED, LOCAL_DIR, STORAGE_DIR, render_markdown_table
from spark_steward.errors import StewardError, StorageError

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress
    from spark_steward.streams.store import StreamStore


def _jar() -> str:
    from spark_steward.kernel.shim import jar_path

    return str(jar_path())


def cmd_jar(args: argparse.Namespace) -> int:
    """``spark-steward jar``: prints the shim jar's path."""
    print(_jar())
    return 0


def conf_pairs(storage: str | None, local_dir: str | None) -> list[tuple[str, str]]:
    """The keys that enable spark-steward. No ``spark.plugins`` or ``spark.jars``: a value given
    with ``--conf`` would replace the platform's own (spark-defaults.conf, ``--jars``); the
    driver adds the plugin and the jar after them as its context starts
    (:mod:`spark_steward.kernel.autoload`)."""
    pairs = [(ENABLED.name, "true")]
    if storage:
        pairs.append((STORAGE_DIR.name, storage))
    if local_dir:
        pairs.append((LOCAL_DIR.name, local_dir))
    return pairs


def check_storage_url(url: str) -> None:
    """Raises a one-line StorageError when ``url`` could not serve as the storage dir: an
    unknown protocol, a backend that is not installed (naming its ``pip install``), or a local
    dir this user cannot write. A job given such a URL would run as plain Spark."""
    from spark_steward.storage import Storage, check_protocol

    if check_protocol(url) in ("file", "local"):
        try:
            Storage.from_url(url).require_writable()
        except StorageError as exc:
            raise StorageError(f"{exc} (--no-check prints the flags anyway, for a dir that "
                               "exists only where the driver runs)") from exc


def cmd_conf(args: argparse.Namespace) -> int:
    """``spark-steward conf``: prints the flags that enable spark-steward, after checking the
    storage URL."""
    if args.markdown:
        print(render_markdown_table())
        return 0
    if args.storage and not args.no_check:
        check_storage_url(args.storage)
    pairs = conf_pairs(args.storage, args.local_dir)
    if args.format == "properties":
        width = max(len(k) for k, _ in pairs)
        for key, value in pairs:
            print(f"{key.ljust(width)}  {value}")
    else:
        print(" ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in pairs))
    return 0


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min ago"
    return f"{seconds / 3600:.1f}h ago"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def open_registry(args: argparse.Namespace) -> "ApplicationRegistry":
    """The registry of ``--storage`` with ``--option`` and ``--heartbeat-timeout`` applied."""
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.config import HEARTBEAT_TIMEOUT
    from spark_steward.storage import Storage

    storage = Storage.from_url(args.storage, **storage_options(args.option))
    timeout = HEARTBEAT_TIMEOUT.parse(args.heartbeat_timeout) if args.heartbeat_timeout \
        else HEARTBEAT_TIMEOUT.default
    return ApplicationRegistry(storage, heartbeat_timeout=timeout)


def cmd_status(args: argparse.Namespace) -> int:
    """``spark-steward status``: every application recorded in the storage dir, its liveness and
    cleanup backlog."""
    registry = open_registry(args)
    storage = registry.storage
    if not storage.is_object_store and not storage.exists(""):  # a prefix exists on demand
        raise StorageError(f"storage dir {storage.url} does not exist; check --storage (an "
                           "application creates it when it first attaches)")
    rows: list[dict[str, Any]] = []
    for record in sorted(registry.all(), key=lambda r: r.started_at):
        owned = registry.owned_usage(record.app_id)
        rows.append({
            "app_id": record.app_id, "name": record.app_name,
            "state": registry.liveness(record).value, "host": record.host, "pid": record.pid,
            "boot_id": record.boot_id, "pid_ns": record.pid_ns,
            "started_at": record.started_at, "heartbeat_at": record.heartbeat_at,
            "finished_at": record.finished_at,
            "owns": {k: {"files": f, "bytes": b} for k, (f, b) in owned.items()},
            "cleanup": None if record.cleanup is None else asdict(record.cleanup),
        })
    if args.json:
        print(json.dumps({"storage": storage.url, "applications": rows}, indent=2))
        return 0
    if not rows:
        print(f"no applications recorded in {storage.url}")
        return 0
    now = time.time()
    print(f"{'APPLICATION':<28} {'STATE':<9} {'HOST':<16} {'STARTED':<12} {'HEARTBEAT':<12} OWNS")
    for row in rows:
        owns = ", ".join(f"{k}: {v['files']} files, {_size(v['bytes'])}"
                         for k, v in row["owns"].items()) or "nothing"
        print(f"{row['app_id']:<28} {row['state']:<9} {row['host'][:16]:<16} "
              f"{_ago(now - row['started_at']):<12} {_ago(now - row['heartbeat_at']):<12} {owns}")
        for line in _cleanup_lines(row["cleanup"], now):
            print(f"  {line}")
    return 0


def _cleanup_lines(backlog: dict[str, Any] | None, now: float) -> list[str]:
    """What cleanup an application still owed at its last heartbeat (or its stop)."""
    if not backlog:
        return []
    given_up = backlog["given_up_total"]  # records are read bounded: it counts the listed too
    if not (backlog["pending"] or backlog["retries"] or given_up):
        return []
    oldest = backlog["oldest_pending_at"]
    pending = _plural(backlog["pending"], "deletion") + " pending" + (
        f" (oldest asked {_ago(now - oldest)})" if backlog["pending"] and oldest else "")
    retries = backlog["retries"]
    lines = [f"cleanup: {pending}, {retries} {'retry' if retries == 1 else 'retries'}, "
             f"{given_up} given up"]
    lines += [f"  given up: {g['what']}: {g['error']}" for g in backlog["given_up"]]
    if given_up > len(backlog["given_up"]):
        lines.append(f"  ... and {given_up - len(backlog['given_up'])} more given up "
                     "(the record lists the first ones)")
    return lines


# -- blobs -----------------------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


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
    temps = (f" ({_plural(len(scan.temp_files), 'temp file')} not listed)"
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
              f"{_size(b.size):>10}  {states[b.app_id]}")
    print(f"total: {_plural(len(scan.blobs), 'blob')} in {_plural(scopes, 'scope')} of "
          f"{_plural(len(states), 'application')}, {_size(total)}{temps}")
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
              f"{_size(u.bytes):>10}  {u.temp_files:>5}")
    print(f"{'total':<{app_w}}  {'':<8}  {totals['scopes']:>6}  {totals['blobs']:>7}  "
          f"{_size(totals['bytes']):>10}  {totals['temp_files']:>5}")
    return 0


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
              f"{rows:>10}  {_size(c.bytes):>10}  {c.entry.app_id} ({c.liveness})")
    series = len({c.entry.series for c in listing})
    print(f"total: {_plural(len(listing), 'checkpoint')} in {series} series, "
          f"{_size(sum(c.bytes for c in listing))}")
    for space in series_space(registry):
        if space.merged and (not args.series or space.series == args.series):
            print(f"series {space.series}: {_plural(space.files, 'physical file')}, "
                  f"{_size(space.physical_bytes)} for {_size(space.live_bytes)} live, space "
                  f"amplification {_ratio(space.amplification)}")
    return 0


def _stream_store(args: argparse.Namespace) -> "StreamStore":
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
    store = _stream_store(args)
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
                  f"{_size(s.survey.bytes):>10}  {s.survey.packs:>5}  {s.survey.intents:>7}  "
                  f"{len(s.survey.temps):>5}  {r.location}")
        else:
            print(f"{r.name or '-':<{name_w}}  {s.state.value:<9}  "
                  f"{_ago(now - r.last_active()):<12}  {r.app_id} ({s.liveness})  {r.location}")
    if args.du:
        known = [s.survey for s in statuses if s.survey is not None]
        print(f"total: {_plural(len(statuses), 'location')}, "
              f"{_plural(sum(k.files for k in known), 'file')}, "
              f"{_size(sum(k.bytes for k in known))}, "
              f"{_plural(sum(k.intents for k in known), 'delete')} pending")
    return 0


def cmd_streams_drop(args: argparse.Namespace) -> int:
    """``spark-steward streams drop``: removes a location once no run of its query may be active."""
    result = _stream_store(args).drop(args.target)
    if args.json:
        print(json.dumps({"query_id": result.query_id, "location": result.location,
                          "files": result.files, "bytes": result.bytes}, indent=2))
    else:
        print(f"dropped {result.location}: {_plural(result.files, 'file')}, "
              f"{_size(result.bytes)}")
    return 0


def cmd_streams_unpack(args: argparse.Namespace) -> int:
    """``spark-steward streams unpack``: writes a stopped location's packed files back as plain
    files."""
    result = _stream_store(args).unpack(args.target)
    if args.json:
        print(json.dumps({"query_id": result.query_id, "location": result.location,
                          "files": result.files, "packs": result.packs}, indent=2))
    else:
        print(f"unpacked {result.location}: {_plural(result.files, 'file')} written back from "
              f"{_plural(result.packs, 'pack')}")
    return 0


def _ratio(value: float) -> str:
    return "-" if value == float("inf") else f"{value:.2f}"


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
              f"{s.files:>6}  {_size(s.physical_bytes):>10}  {_size(s.live_bytes):>10}  "
              f"{_ratio(s.amplification)}")
    return 0


# -- cache -----------------------------------------------------------------------------------


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
              f"{e.rows:>10}  {t.files:>5}  {_size(t.bytes):>10}  "
              f"{_ago(now - e.created_at):<12}  {owner:<{owner_w}}  {users}  "
              f"{e.description or '-'}")
    print(f"total: {_plural(len(listing), 'table')}, {_size(sum(t.bytes for t in listing))}")
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
        print(f"{state:<19}  {n:>6}  {_size(size):>10}")
    if found.by_application:
        app_w = max(11, *(len(a.app_id) for a in found.by_application))
        print(f"\n{'APPLICATION':<{app_w}}  {'STATE':<8}  {'TABLES':>6}  {'SIZE':>10}")
        for a in found.by_application:
            print(f"{a.app_id:<{app_w}}  {a.liveness:<8}  {a.tables:>6}  {_size(a.bytes):>10}")
    print(f"\ntotal: {_plural(totals['tables'], 'table')}, {_size(totals['bytes'])} "
          f"(live {_size(totals['live_bytes'])}, dead {_size(dead)}, unknown "
          f"{_size(totals['unknown_bytes'])}); orphaned: "
          f"{_plural(found.orphan_files, 'file')}, {_size(found.orphan_bytes)}")
    return 0


# -- gc --------------------------------------------------------------------------------------


class ProgressBar:
    """``[#####.....] 12/40 apps/app-x/blobs/_app`` on a TTY, redrawn in place with ``\\r``.

    Draws nothing when the stream is not a TTY or the run has fewer than ``min_items`` items;
    :meth:`close` ends a drawn bar with a newline.
    """

    def __init__(self, stream: TextIO, *, width: int = 20, min_items: int = 4) -> None:
        isatty = getattr(stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.stream = stream
        self.width = width
        self.min_items = min_items
        self.drawn = 0  # length of the last line drawn, 0 when nothing is on screen

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            return 80

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled or total < self.min_items:
            return
        filled = self.width * done // total if total else self.width
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} "
        room = max(8, self._columns() - 1 - len(line))
        line += label if len(label) <= room else "..." + label[-(room - 3):]
        self.stream.write("\r" + line.ljust(self.drawn))
        self.stream.flush()
        self.drawn = len(line)

    def close(self) -> None:
        """Ends the bar's line, if one was drawn."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = 0


@dataclass(frozen=True)
class Collector:
    """One kind of garbage ``spark-steward gc`` collects, run in :data:`GC_COLLECTORS` order."""

    name: str
    run: Callable[["ApplicationRegistry", argparse.Namespace, "Progress | None"], "GcReport"]
    #: What one deleted item is, for the summary line.
    noun: str = "application"


def _collect_blobs(registry: "ApplicationRegistry", args: argparse.Namespace,
                   progress: "Progress | None") -> "GcReport":
    from spark_steward.blob.gc import collect_garbage

    return collect_garbage(registry, dry_run=args.dry_run, progress=progress)


def _collect_checkpoints(registry: "ApplicationRegistry", args: argparse.Namespace,
                         progress: "Progress | None") -> "GcReport":
    from spark_steward.checkpoint.gc import collect_garbage
    from spark_steward.checkpoint.config_keys import CHECKPOINTS_ORPHAN_GRACE

    grace = (CHECKPOINTS_ORPHAN_GRACE.parse(args.orphan_grace) if args.orphan_grace
             else CHECKPOINTS_ORPHAN_GRACE.default)
    return collect_garbage(registry, dry_run=args.dry_run, orphan_grace=grace,
                           progress=progress)


def _collect_caches(registry: "ApplicationRegistry", args: argparse.Namespace,
                    progress: "Progress | None") -> "GcReport":
    from spark_steward.tables.config_keys import CACHE_ORPHAN_GRACE, CACHE_SHARED_RETENTION
    from spark_steward.tables.gc import collect_garbage

    grace = (CACHE_ORPHAN_GRACE.parse(args.orphan_grace) if args.orphan_grace
             else CACHE_ORPHAN_GRACE.default)
    retention = (CACHE_SHARED_RETENTION.parse(args.shared_retention) if args.shared_retention
                 else CACHE_SHARED_RETENTION.default)
    return collect_garbage(registry, dry_run=args.dry_run, orphan_grace=grace,
                           progress=progress, shared_retention=retention)


def _collect_local(registry: "ApplicationRegistry", args: argparse.Namespace,
                   progress: "Progress | None") -> "GcReport":
    from spark_steward.local.gc import collect_garbage

    return collect_garbage(args.local_dir, registry, dry_run=args.dry_run, progress=progress)


def _collect_streams(registry: "ApplicationRegistry", args: argparse.Namespace,
                     progress: "Progress | None") -> "GcReport":
    from spark_steward.streams.gc import collect_streams

    return collect_streams(_stream_store(args), dry_run=args.dry_run, progress=progress)


#: What ``gc`` collects, in order.
GC_COLLECTORS: list[Collector] = [Collector("blobs", _collect_blobs),
                                  Collector("checkpoints", _collect_checkpoints, "item"),
                                  Collector("caches", _collect_caches, "item"),
                                  Collector("streams", _collect_streams, "location")]
#: Collected too when ``--local-dir`` names this host's working dir.
LOCAL_COLLECTOR = Collector("local", _collect_local)


def _gc_json(name: str, report: "GcReport", noun: str) -> dict[str, Any]:
    what = "app_id" if noun == "application" else noun
    return {"name": name,
            "deleted": [{what: d.app_id, "files": d.files, "bytes": d.bytes}
                        for d in report.deleted],
            "skipped": [{what: s.app_id, "reason": s.reason} for s in report.skipped],
            "failed": [{"path": f.path, "message": f.message} for f in report.failed]}


def _print_gc_summary(name: str, report: "GcReport", noun: str) -> None:
    verb = "would delete" if report.dry_run else "deleted"
    if report.deleted:
        print(f"{name}: {verb} {_plural(report.files, 'file')}, {_size(report.bytes)} of "
              f"{_plural(len(report.deleted), noun)}")
        for d in report.deleted:
            print(f"  {verb} {d.app_id}: {_plural(d.files, 'file')}, {_size(d.bytes)}")
    else:
        print(f"{name}: nothing to delete")
    for s in report.skipped:
        print(f"  skipped {s.app_id}: {s.reason}")
    for f in report.failed:
        print(f"  FAILED {f.path}: {f.message}")


def cmd_gc(args: argparse.Namespace) -> int:
    """``spark-steward gc``: deletes what applications that are no longer alive left, and reports
    it."""
    registry = open_registry(args)
    reports: list[tuple[str, GcReport]] = []
    collectors = GC_COLLECTORS + ([LOCAL_COLLECTOR] if args.local_dir else [])
    for collector in collectors:
        bar = ProgressBar(sys.stderr)
        try:
            reports.append((collector.name, collector.run(registry, args, bar)))
        finally:
            bar.close()
    ok = all(report.ok for _, report in reports)
    nouns = {c.name: c.noun for c in collectors}
    if args.json:
        print(json.dumps({"storage": registry.storage.url, "dry_run": args.dry_run, "ok": ok,
                          "collectors": [_gc_json(n, r, nouns.get(n, "item"))
                                         for n, r in reports]}, indent=2))
    else:
        for name, report in reports:
            _print_gc_summary(name, report, nouns.get(name, "item"))
        if not ok:
            failed = sum(len(r.failed) for _, r in reports)
            print(f"{_plural(failed, 'delete')} failed; run gc again to retry")
    return 0 if ok else 1


def storage_options(items: list[str] | None) -> dict[str, object]:
    """``NAME=VALUE`` items of ``--option`` as fsspec keyword arguments."""
    from spark_steward.config import STORAGE_OPTION_PREFIX, parse_storage_option

    options: dict[str, object] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise StewardError(f"--option {item!r} is not NAME=VALUE (the part after "
                               f"{STORAGE_OPTION_PREFIX})")
        options[name] = parse_storage_option(value)
    return options


def cmd_version(args: argparse.Namespace) -> int:
    """``spark-steward version``: prints the version."""
    print(f"spark-steward {__version__}")
    return 0


def _storage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", required=True, help="storage URL to inspect")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--option", action="append", metavar="NAME=VALUE",
                        help="fsspec option for the storage, as spark.steward.storage.option.NAME")
    parser.add_argument("--heartbeat-timeout", help="override spark.steward.heartbeat.timeout")


def build_parser() -> argparse.ArgumentParser:
    """The command line's argument parser, every subcommand bound to its ``cmd_*`` function."""
    parser = argparse.ArgumentParser(prog="spark-steward", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("jar", help="print the path of the JVM shim jar").set_defaults(run=cmd_jar)

    conf = sub.add_parser("conf", help="print the spark-submit flags that enable spark-steward")
    conf.add_argument("--storage", help="durable storage URL (spark.steward.storage.dir)")
    conf.add_argument("--local-dir", help="host-local working dir (spark.steward.local.dir)")
    conf.add_argument("--format", choices=("flags", "properties"), default="flags",
                      help="--conf flags (default) or spark-defaults.conf lines")
    conf.add_argument("--markdown", action="store_true",
                      help="print the table of every spark.steward.* key instead")
    conf.add_argument("--no-check", action="store_true",
                      help="do not check that --storage is usable from here (its protocol is "
                           "known and installed, a local dir writable by this user)")
    conf.set_defaults(run=cmd_conf)

    status = sub.add_parser("status", help="applications recorded in a storage dir")
    _storage_arguments(status)
    status.set_defaults(run=cmd_status)

    blobs = sub.add_parser("blobs", help="blobs in the HA storage dir")
    blobs_sub = blobs.add_subparsers(dest="blobs_command", required=True)
    ls = blobs_sub.add_parser("ls", help="one line per blob: application, scope, key, size, "
                                         "liveness of its application")
    _storage_arguments(ls)
    ls.add_argument("--app", metavar="APP_ID", help="only the blobs of this application")
    ls.set_defaults(run=cmd_blobs_ls)
    du = blobs_sub.add_parser("du", help="per application: liveness, scopes, blobs, bytes, "
                                         "temp files")
    _storage_arguments(du)
    du.set_defaults(run=cmd_blobs_du)

    gc = sub.add_parser(
        "gc", help="delete what applications that are no longer alive left in a storage dir",
        description="Deletes, in order, what dead applications left behind: "
                    + ", ".join(c.name for c in GC_COLLECTORS) + ". "
                    "An application is dead when its record says finished, its heartbeat is "
                    "older than spark.steward.heartbeat.timeout, or its driver process vanished "
                    "on this host; its leftovers are deleted at once. Live applications and "
                    "ones without a readable record are never touched. Exit 1 when a delete "
                    "failed (run again to retry).")
    _storage_arguments(gc)
    gc.add_argument("--dry-run", action="store_true",
                    help="delete nothing; list what would be deleted")
    gc.add_argument("--orphan-grace", metavar="DURATION",
                    help="checkpoint and cached-table data no entry owns is deleted once "
                         "this old (default: spark.steward.checkpoints.orphan-grace and "
                         "spark.steward.cache.orphan-grace, 1h)")
    gc.add_argument("--local-dir", metavar="PATH",
                    help="also remove the folders of dead applications in this host's "
                         "working dir (spark.steward.local.dir)")
    gc.add_argument("--shared-retention", metavar="DURATION",
                    help="shared cached tables no application uses are deleted once released "
                         "this long ago (default: spark.steward.cache.shared-retention, 1h)")
    gc.set_defaults(run=cmd_gc)

    checkpoints = sub.add_parser("checkpoints", help="checkpoints in a storage dir")
    checkpoints_sub = checkpoints.add_subparsers(dest="checkpoints_command", required=True)
    cls = checkpoints_sub.add_parser(
        "ls", help="one line per checkpoint: series, id, state, rows, size, application")
    _storage_arguments(cls)
    cls.add_argument("--series", help="only this series")
    cls.set_defaults(run=cmd_checkpoints_ls)
    cdu = checkpoints_sub.add_parser(
        "du", help="per series: physical files and bytes, live bytes, space amplification")
    _storage_arguments(cdu)
    cdu.set_defaults(run=cmd_checkpoints_du)

    cache = sub.add_parser("cache", help="cached tables in a storage dir")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    tls = cache_sub.add_parser(
        "ls", help="one line per cached table: key, state, shared, rows, files, size, created, "
                   "application and its liveness, users, description")
    _storage_arguments(tls)
    tls.set_defaults(run=cmd_cache_ls)
    tdu = cache_sub.add_parser(
        "du", help="bytes per state and per application, live vs dead, orphaned bytes")
    _storage_arguments(tdu)
    tdu.set_defaults(run=cmd_cache_du)

    streams = sub.add_parser("streams", help="streaming checkpoint locations in a storage dir")
    streams_sub = streams.add_subparsers(dest="streams_command", required=True)
    sls = streams_sub.add_parser(
        "ls", help="one line per location: name, state, last activity, application, location")
    _storage_arguments(sls)
    sls.set_defaults(run=cmd_streams_ls, du=False)
    sdu = streams_sub.add_parser(
        "du", help="one line per location: files, bytes, deletes pending, sweepable temp files "
                   "(lists every location)")
    _storage_arguments(sdu)
    sdu.set_defaults(run=cmd_streams_ls, du=True)
    sdrop = streams_sub.add_parser(
        "drop", help="remove a location no run of its query holds, idle for the drop grace")
    _storage_arguments(sdrop)
    sdrop.add_argument("target", help="the query's name, id or location")
    sdrop.add_argument("--drop-grace", help="override spark.steward.streams.drop-grace")
    sdrop.set_defaults(run=cmd_streams_drop)
    sunpack = streams_sub.add_parser(
        "unpack", help="write a stopped query's packed files back as plain files (the layout "
                       "Spark reads without spark-steward)")
    _storage_arguments(sunpack)
    sunpack.add_argument("target", help="the query's name, id or location")
    sunpack.set_defaults(run=cmd_streams_unpack)

    sub.add_parser("version", help="print the version").set_defaults(run=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; an error spark-steward raises is printed as one line with exit status
    1."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StewardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
