"""The ``spark-steward`` command: ``jar``, ``conf``, ``status``, ``blobs``, ``gc``, ``version``.

This module holds the kernel's commands (``jar``, ``conf``, ``status``, ``gc``, ``version``) and
assembles the rest from the declared capabilities (:mod:`spark_steward.capabilities`): each adds
its command group (``blobs``, ``checkpoints``, ``cache``, ``streams``) and its ``gc`` collector
from its own folder, exactly as a third party's would. What they share is
:mod:`spark_steward.commands`.

The library prints nothing; the command line is where output happens. Errors print one line
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
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Sequence, TextIO

from spark_steward import capabilities
from spark_steward._version import __version__
from spark_steward.commands import (Collector, ago, human_size, open_registry, plural,
                                    storage_arguments)
from spark_steward.config import ENABLED, LOCAL_DIR, STORAGE_DIR, render_markdown_table
from spark_steward.errors import StewardError, StorageError

if TYPE_CHECKING:
    from spark_steward.gc import GcReport


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
    if args.server:
        # No Python of ours adds these where no PySpark builds the context (kernel/autoload).
        from spark_steward.kernel.jvm import CONNECT_EXTENSIONS, PLUGIN_CLASS
        from spark_steward.kernel.shim import jar_has_class, jar_path

        jar = jar_path("")
        # The Connect extensions where the jar was built against a Spark line with Connect.
        extensions = [(k, c) for k, c in CONNECT_EXTENSIONS if jar_has_class(jar, c)]
        pairs = [("spark.jars", str(jar)), ("spark.plugins", PLUGIN_CLASS), *extensions,
                 *pairs]
    if args.format == "properties":
        width = max(len(k) for k, _ in pairs)
        for key, value in pairs:
            print(f"{key.ljust(width)}  {value}")
    else:
        print(" ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in pairs))
    return 0


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
            "sessions": None if record.sessions is None else asdict(record.sessions),
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
        owns = ", ".join(f"{k}: {v['files']} files, {human_size(v['bytes'])}"
                         for k, v in row["owns"].items()) or "nothing"
        print(f"{row['app_id']:<28} {row['state']:<9} {row['host'][:16]:<16} "
              f"{ago(now - row['started_at']):<12} {ago(now - row['heartbeat_at']):<12} {owns}")
        for line in _cleanup_lines(row["cleanup"], now) + _session_lines(row["sessions"], now):
            print(f"  {line}")
    return 0


def _session_lines(sessions: dict[str, Any] | None, now: float) -> list[str]:
    """A Connect server's open sessions at its last heartbeat, each with what it owns."""
    if not sessions:
        return []
    lines = [f"Connect sessions: {sessions['open_total']} open, {sessions['closed_total']} "
             "closed (what a session owned was released when it closed)"]
    for s in sessions["open"]:
        # Spark's caches count blocks in block managers; everything else counts files.
        owns = ", ".join(f"{k}: {plural(n, 'block' if k == 'spark caches' else 'file')}, "
                         f"{human_size(size)}" for k, (n, size) in s["owns"].items()) or "nothing"
        lines.append(f"  session {s['session_id']} of {s['user_id']}, opened "
                     f"{ago(now - s['started_at'])}: {owns}")
    if sessions["open_total"] > len(sessions["open"]):
        lines.append(f"  ... and {sessions['open_total'] - len(sessions['open'])} more "
                     "(the record lists the first ones)")
    return lines


def _cleanup_lines(backlog: dict[str, Any] | None, now: float) -> list[str]:
    """What cleanup an application still owed at its last heartbeat (or its stop)."""
    if not backlog:
        return []
    given_up = backlog["given_up_total"]  # records are read bounded: it counts the listed too
    if not (backlog["pending"] or backlog["retries"] or given_up):
        return []
    oldest = backlog["oldest_pending_at"]
    pending = plural(backlog["pending"], "deletion") + " pending" + (
        f" (oldest asked {ago(now - oldest)})" if backlog["pending"] and oldest else "")
    retries = backlog["retries"]
    lines = [f"cleanup: {pending}, {retries} {'retry' if retries == 1 else 'retries'}, "
             f"{given_up} given up"]
    lines += [f"  given up: {g['what']}: {g['error']}" for g in backlog["given_up"]]
    if given_up > len(backlog["given_up"]):
        lines.append(f"  ... and {given_up - len(backlog['given_up'])} more given up "
                     "(the record lists the first ones)")
    return lines


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
        print(f"{name}: {verb} {plural(report.files, 'file')}, {human_size(report.bytes)} of "
              f"{plural(len(report.deleted), noun)}")
        for d in report.deleted:
            print(f"  {verb} {d.app_id}: {plural(d.files, 'file')}, {human_size(d.bytes)}")
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
    collectors = [c for c in gc_collectors()
                  if c.only_with is None or getattr(args, c.only_with, None)]
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
            print(f"{plural(failed, 'delete')} failed; run gc again to retry")
    return 0 if ok else 1


def gc_collectors() -> list[Collector]:
    """What ``gc`` collects, in order: each declared capability's collector, those that run
    only with an option (``local``: ``--local-dir``) last."""
    found = [collector for _, collector in capabilities.loaded("gc")]
    return sorted(found, key=lambda c: c.only_with is not None)


def cmd_version(args: argparse.Namespace) -> int:
    """``spark-steward version``: prints the version."""
    print(f"spark-steward {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line's argument parser, every subcommand bound to its ``cmd_*`` function:
    the kernel's, then each declared capability's group."""
    parser = argparse.ArgumentParser(prog="spark-steward", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("jar", help="print the path of the JVM shim jar").set_defaults(run=cmd_jar)

    conf = sub.add_parser("conf", help="print the spark-submit flags that enable spark-steward")
    conf.add_argument("--storage", help="durable storage URL (spark.steward.storage.dir)")
    conf.add_argument("--local-dir", help="host-local working dir (spark.steward.local.dir)")
    conf.add_argument("--format", choices=("flags", "properties"), default="flags",
                      help="--conf flags (default) or spark-defaults.conf lines")
    conf.add_argument("--server", action="store_true",
                      help="for a driver no PySpark starts (a Spark Connect server, "
                           "spark-submit --class): add the shim jar and plugin, which spark-steward "
                           "then uses to run its driver runtime beside that driver (append them to "
                           "spark.jars and spark.plugins your platform sets already)")
    conf.add_argument("--markdown", action="store_true",
                      help="print the table of every spark.steward.* key instead")
    conf.add_argument("--no-check", action="store_true",
                      help="do not check that --storage is usable from here (its protocol is "
                           "known and installed, a local dir writable by this user)")
    conf.set_defaults(run=cmd_conf)

    status = sub.add_parser("status", help="applications recorded in a storage dir")
    storage_arguments(status)
    status.set_defaults(run=cmd_status)

    gc = sub.add_parser(
        "gc", help="delete what applications that are no longer alive left in a storage dir",
        description="Deletes, in order, what dead applications left behind: "
                    + ", ".join(c.name for c in gc_collectors() if c.only_with is None) + ". "
                    "An application is dead when its record says finished, its heartbeat is "
                    "older than spark.steward.heartbeat.timeout, or its driver process vanished "
                    "on this host; its leftovers are deleted at once. Live applications and "
                    "ones without a readable record are never touched. Exit 1 when a delete "
                    "failed (run again to retry).")
    storage_arguments(gc)
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

    for _, register in capabilities.loaded("cli"):
        register(sub)

    sub.add_parser("version", help="print the version").set_defaults(run=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; an error spark-steward raises is printed as one line with exit status
    1."""
    problem = capabilities.declared().built_in_problem()
    if problem:  # the commands of the capabilities found still run
        print(f"warning: {problem}", file=sys.stderr)
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StewardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
