"""What ``spark-steward gc --local-dir`` collects: the local capability's part of the command
line (it has no command group), added by its declaration (:mod:`spark_steward.capabilities`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from spark_steward.commands import Collector

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.gc import GcReport, Progress


def _collect(registry: "ApplicationRegistry", args: argparse.Namespace,
             progress: "Progress | None") -> "GcReport":
    from spark_steward.local.gc import collect_garbage

    return collect_garbage(args.local_dir, registry, dry_run=args.dry_run, progress=progress)


#: What ``spark-steward gc --local-dir PATH`` removes: dead applications' folders in this host's
#: working dir (only with ``--local-dir``).
COLLECTOR = Collector("local", _collect, only_with="local_dir")
