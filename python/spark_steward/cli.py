"""The ``spark-steward`` command: ``jar``, ``conf``, ``status``, ``version``.

The library prints nothing; this module is where output happens. Errors print one line
(``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any, Sequence

from spark_steward import __version__
from spark_steward.config import ENABLED, LOCAL_DIR, STORAGE_DIR, render_markdown_table
from spark_steward.errors import StewardError

from spark_steward.spark.jvm import PLUGIN_CLASS


def _jar() -> str:
    from spark_steward.spark.shim import jar_path

    return str(jar_path())


def cmd_jar(args: argparse.Namespace) -> int:
    print(_jar())
    return 0


def conf_pairs(storage: str | None, local_dir: str | None) -> list[tuple[str, str]]:
    pairs = [("spark.plugins", PLUGIN_CLASS), ("spark.jars", _jar()), (ENABLED.name, "true")]
    if storage:
        pairs.append((STORAGE_DIR.name, storage))
    if local_dir:
        pairs.append((LOCAL_DIR.name, local_dir))
    return pairs


def cmd_conf(args: argparse.Namespace) -> int:
    if args.markdown:
        print(render_markdown_table())
        return 0
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


def cmd_status(args: argparse.Namespace) -> int:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.config import HEARTBEAT_TIMEOUT
    from spark_steward.storage import Storage

    storage = Storage.from_url(args.storage, **storage_options(args.option))
    timeout = HEARTBEAT_TIMEOUT.parse(args.heartbeat_timeout) if args.heartbeat_timeout \
        else HEARTBEAT_TIMEOUT.default
    registry = ApplicationRegistry(storage, heartbeat_timeout=timeout)
    rows: list[dict[str, Any]] = []
    for record in sorted(registry.all(), key=lambda r: r.started_at):
        owned = registry.owned_usage(record.app_id)
        rows.append({
            "app_id": record.app_id, "name": record.app_name,
            "state": registry.liveness(record).value, "host": record.host, "pid": record.pid,
            "started_at": record.started_at, "heartbeat_at": record.heartbeat_at,
            "finished_at": record.finished_at,
            "owns": {k: {"files": f, "bytes": b} for k, (f, b) in owned.items()},
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
    return 0


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
    print(f"spark-steward {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
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
    conf.set_defaults(run=cmd_conf)

    status = sub.add_parser("status", help="applications recorded in a storage dir")
    status.add_argument("--storage", required=True, help="storage URL to inspect")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--option", action="append", metavar="NAME=VALUE",
                        help="fsspec option for the storage, as spark.steward.storage.option.NAME")
    status.add_argument("--heartbeat-timeout", help="override spark.steward.heartbeat.timeout")
    status.set_defaults(run=cmd_status)

    sub.add_parser("version", help="print the version").set_defaults(run=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StewardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
