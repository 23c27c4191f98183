"""What the checkpoint metadata in a storage dir says, without Spark: the listing behind
``spark-steward checkpoints ls`` and the collector behind ``spark-steward gc``.

``gc`` runs the same failover an attach runs (:meth:`CheckpointStore.recover`): entries marked
for deletion, pending checkpoints and Spark's own checkpoints of dead applications, and orphaned
data past the grace window are deleted; completed series checkpoints are kept for restore.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import RetryingCleaner
from spark_steward.errors import StewardError
from spark_steward.gc import UNKNOWN, GcReport, Progress, application_liveness, collect_failover
from spark_steward.checkpoint.metadata import MERGED
from spark_steward.checkpoint.lifecycle import CheckpointEntry, CheckpointState
from spark_steward.checkpoint.merging.lifecycle import Amplification, Segment, live_bytes_by_file
from spark_steward.lifecycle.retry import RetryStrategy

#: ``gc`` retries a failed delete a few times within one run; then it reports and exits 1.
GC_STRATEGY = RetryStrategy.exponential(0.2, 2.0, retries=3)


@dataclass(frozen=True)
class CheckpointListing:
    entry: CheckpointEntry
    liveness: str
    files: int
    bytes: int


def _usage(store: CheckpointStore, entry: CheckpointEntry) -> tuple[int, int]:
    try:
        return store.data_usage(entry)
    except (StewardError, OSError):
        return (0, 0)


def _offline_store(registry: ApplicationRegistry, strategy: RetryStrategy,
                   clock: Callable[[], float] = time.time) -> CheckpointStore:
    cleaner: RetryingCleaner[CheckpointCleanup] = RetryingCleaner(
        strategy, threads=4, name="checkpoint-gc", describe=_describe)
    return CheckpointStore(registry.storage, f"spark-steward-cli-{os.getpid()}", cleaner,
                           is_dead=registry.is_dead, clock=clock)


def list_checkpoints(registry: ApplicationRegistry) -> tuple[list[CheckpointListing], list[str]]:
    """Every checkpoint entry with its owner's liveness and its data usage, and the paths of
    entries that fail verification."""
    entries, corrupt = CheckpointMetadata(registry.storage).load()
    store = _offline_store(registry, RetryStrategy.no_retry())
    try:
        states: dict[str, str] = {}
        listing = []
        for entry in entries:
            if entry.app_id not in states:
                states[entry.app_id] = (application_liveness(registry, entry.app_id)
                                        if _safe(entry.app_id) else UNKNOWN)
            files, size = _usage(store, entry)
            listing.append(CheckpointListing(entry, states[entry.app_id], files, size))
        return listing, corrupt
    finally:
        store.cleaner.close(0)


@dataclass(frozen=True)
class SeriesSpace:
    """Space of one series: physical bytes on storage against the live logical bytes its
    retained checkpoints use (merged series share physical files between checkpoints)."""

    series: str
    checkpoints: int
    merged: bool
    files: int
    physical_bytes: int
    live_bytes: int

    @property
    def amplification(self) -> float:
        """Physical bytes over live bytes of the series (1.0: no waste)."""
        return Amplification(self.physical_bytes, self.live_bytes).ratio


def series_space(registry: ApplicationRegistry) -> list[SeriesSpace]:
    """Per series, what ``spark-steward checkpoints du`` prints."""
    metadata = CheckpointMetadata(registry.storage)
    entries, _ = metadata.load()
    by_series: dict[str, list[CheckpointEntry]] = {}
    for entry in entries:
        by_series.setdefault(entry.series, []).append(entry)
    store = _offline_store(registry, RetryStrategy.no_retry())
    found = []
    try:
        for series in sorted(set(by_series) | set(registry.storage.list_names(MERGED))):
            mine = by_series.get(series, [])
            files, physical = registry.storage.usage(f"{MERGED}/{series}")
            live_segments = []
            for entry in mine:
                if entry.merged and entry.state is CheckpointState.COMPLETED:
                    try:
                        artifact = metadata.read_artifact(entry.series, entry.number)
                        live_segments += [Segment.from_json(s) for s in artifact["segments"]]
                    except (StewardError, KeyError, TypeError, ValueError):
                        continue
            live = sum(live_bytes_by_file(live_segments).values())
            for entry in mine:
                if not entry.merged:
                    f, b = _usage(store, entry)
                    files, physical = files + f, physical + b
                    if entry.state is CheckpointState.COMPLETED:
                        live += b
            found.append(SeriesSpace(series, len(mine), any(e.merged for e in mine), files,
                                     physical, live))
    finally:
        store.cleaner.close(0)
    return found


def _safe(app_id: str) -> bool:
    try:
        ApplicationRegistry.record_path(app_id)
        return True
    except StewardError:
        return False


def collect_garbage(registry: ApplicationRegistry, *, dry_run: bool, orphan_grace: float,
                    progress: Progress | None = None, timeout: float = 600.0,
                    strategy: RetryStrategy = GC_STRATEGY) -> GcReport:
    """Runs checkpoint failover against ``registry``'s storage and waits for it."""
    store = _offline_store(registry, strategy)
    return collect_failover(store, lambda: {e.id: _usage(store, e)
                                            for e in store.metadata.load()[0]},
                            lambda rel: _orphan_usage(store, rel), orphan_grace=orphan_grace,
                            dry_run=dry_run, what="series", describe=_describe,
                            label="checkpoints", progress=progress, timeout=timeout)


def _describe(key: CheckpointCleanup) -> str:
    """What the report calls a cleanup: the checkpoint id, or the orphan's path."""
    return key.describe()


def _orphan_usage(store: CheckpointStore, rel: str) -> tuple[int, int]:
    try:
        return store.storage.usage(rel)
    except StewardError:
        return (0, 0)
