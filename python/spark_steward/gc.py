"""What every ``spark-steward gc`` collector shares: the report (deleted, skipped, failed), the
liveness verdict on an application, and the wait for the deletions a store's recovery handed to
its cleaner. No Spark, no storage: the collectors live with their capabilities
(:mod:`spark_steward.blob.gc`, :mod:`spark_steward.checkpoint.gc`,
:mod:`spark_steward.tables.gc`, :mod:`spark_steward.local.gc`).

An application's artifacts are collected only when its record exists, is readable and says it is
no longer alive (finished, or crashed by the liveness rules); a live application and one without
a readable record are left alone and reported as skipped: absence of proof is not death.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping, NamedTuple, Protocol, TypeVar

from spark_steward.errors import StewardError
from spark_steward.lifecycle.liveness import Liveness

if TYPE_CHECKING:
    from spark_steward.applications import ApplicationRegistry
    from spark_steward.cleaner import RetryingCleaner
    from spark_steward.recovery import RecoveryReport

K = TypeVar("K", bound=Hashable)

#: Liveness reported for an application without a readable record.
UNKNOWN = "unknown"

#: ``progress(done, total, path)``: called after each delete of a collector.
Progress = Callable[[int, int, str], None]


# -- liveness ----------------------------------------------------------------------------------


def judge(registry: "ApplicationRegistry", app_id: str) -> tuple[str, str]:
    """``(liveness, why)``: liveness is ``live``/``finished``/``crashed`` or ``unknown``."""
    try:
        record = registry.read(app_id)
    except (StewardError, TypeError) as exc:
        return UNKNOWN, f"application record unreadable: {exc}"
    if record is None:
        return UNKNOWN, "no application record"
    state = registry.liveness(record)
    if state is Liveness.LIVE:
        return state.value, "application is live"
    if state is Liveness.UNKNOWN:
        return state.value, (f"driver identity format {record.identity_format!r} of its record "
                             f"is unknown to this version")
    return state.value, f"application {state.value}"


def is_collectable(liveness: str) -> bool:
    """Whether an application judged ``liveness`` is no longer alive (finished or crashed)."""
    return liveness in {state.value for state in Liveness if state.dead}


def application_liveness(registry: "ApplicationRegistry", app_id: str) -> str:
    """``live``, ``finished``, ``crashed``, or ``unknown`` when there is no readable record."""
    return judge(registry, app_id)[0]


def folder_usage(folder: "os.PathLike[str] | str") -> tuple[int, int]:
    """``(files, bytes)`` below ``folder``."""
    files = size = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                size += os.lstat(os.path.join(parent, name)).st_size
            except FileNotFoundError:
                continue
            files += 1
    return files, size



# -- the report --------------------------------------------------------------------------------


class Deleted(NamedTuple):
    app_id: str
    files: int
    bytes: int


class Skipped(NamedTuple):
    app_id: str
    reason: str


class Failed(NamedTuple):
    path: str
    message: str


@dataclass
class GcReport:
    """What one collector deleted (or would delete, when ``dry_run``), skipped and failed at."""

    dry_run: bool
    deleted: list[Deleted] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.failed

    @property
    def files(self) -> int:
        """How many files were deleted."""
        return sum(d.files for d in self.deleted)

    @property
    def bytes(self) -> int:
        """How many bytes were deleted."""
        return sum(d.bytes for d in self.deleted)


def finish_cleanup(report: GcReport, cleaner: "RetryingCleaner[K]", doomed: list[str],
                   sizes: Mapping[str, tuple[int, int]], *, describe: Callable[[K], str],
                   label: str, progress: Progress | None, timeout: float) -> None:
    """Waits (up to ``timeout``) for the deletions a store's recovery handed to ``cleaner``,
    drawing progress as ``label``, then reports each of ``doomed`` (as ``describe`` names the
    cleaner's keys) deleted with its ``sizes`` or failed with the cleaner's last error. A dry
    run submitted nothing: everything is reported as would-be deleted."""
    if not report.dry_run:
        total = len(doomed)
        deadline = time.monotonic() + timeout
        while cleaner.outstanding() and time.monotonic() < deadline:
            if progress is not None:
                progress(total - len(cleaner.outstanding()), total, label)
            cleaner.wait_idle(0.2)
        if progress is not None and total:
            progress(total, total, label)
    failed = {describe(k): err for k, err in cleaner.given_up().items()}
    for key in cleaner.outstanding():
        failed.setdefault(describe(key), "still failing when gc stopped waiting")
    for item in doomed:
        if item in failed:
            report.failed.append(Failed(item, failed[item]))
            continue
        files, size = sizes.get(item, (0, 0))
        report.deleted.append(Deleted(item, files, size))


class FailoverStore(Protocol):
    """What :func:`collect_failover` needs of a checkpoint or table store."""

    cleaner: Any

    def recover(self, orphan_grace: float, *, dry_run: bool = False) -> "RecoveryReport":
        """Cleans what dead applications left (orphans older than ``orphan_grace``); with
        ``dry_run`` only reports it."""


def collect_failover(store: FailoverStore, entry_sizes: Callable[[], dict[str, tuple[int, int]]],
                     orphan_usage: Callable[[str], tuple[int, int]], *, orphan_grace: float,
                     dry_run: bool, what: str, describe: Callable[[Any], str], label: str,
                     progress: Progress | None, timeout: float) -> GcReport:
    """Runs a store's failover offline (``spark-steward gc``) and reports it: planned first (a
    dry run, sized with ``entry_sizes()`` of the entries and ``orphan_usage`` of each orphan), then
    for real unless ``dry_run``; entries failing verification are skipped, naming ``what``
    (``series``, ``table``) is left alone. Closes the store's cleaner, also on failure."""
    report = GcReport(dry_run=dry_run)
    try:
        sizes = entry_sizes()
        planned = store.recover(orphan_grace, dry_run=True)
        sizes.update({rel: orphan_usage(rel) for rel in planned.orphans})
        found = planned if dry_run else store.recover(orphan_grace)
        for path in found.corrupt:
            report.skipped.append(Skipped(path, f"entry fails verification; its {what} is left "
                                                "alone"))
        finish_cleanup(report, store.cleaner, found.discarding + found.orphans, sizes,
                       describe=describe, label=label, progress=progress, timeout=timeout)
    finally:
        store.cleaner.close(0)
    return report
