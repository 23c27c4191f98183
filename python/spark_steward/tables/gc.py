"""What the cached-table metadata in a storage dir says, without Spark: the listing behind
``spark-steward cache ls``, the totals behind ``cache du`` and the collector behind ``gc``.

``gc`` runs the same failover an attach runs (:meth:`TableStore.recover`): marked tables,
pending and private tables of dead applications, shared tables without a live user, and data,
manifests and user records no entry owns once they are past the grace window.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from spark_steward.applications import ApplicationRegistry
from spark_steward.cleaner import OrphanKey, RetryingCleaner
from spark_steward.errors import StewardError
from spark_steward.gc import GcReport, Progress, application_liveness, collect_failover
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.tables.lifecycle import TableEntry, TableState
from spark_steward.tables.store import TableCleanup, TableStore, describe

#: ``gc`` retries a failed delete a few times within one run; then it reports and exits 1.
GC_STRATEGY = RetryStrategy.exponential(0.2, 2.0, retries=3)


@dataclass(frozen=True)
class TableListing:
    """One entry with its owner's liveness, its users' and the usage of its data folder."""

    entry: TableEntry
    liveness: str
    users: tuple[tuple[str, str], ...]
    files: int
    bytes: int


@dataclass(frozen=True)
class ApplicationSpace:
    app_id: str
    liveness: str
    tables: int
    bytes: int


@dataclass
class TableSpace:
    """``cache du``: bytes per state, per owning application, by liveness, and orphans."""

    by_state: dict[str, tuple[int, int]] = field(default_factory=dict)
    by_application: list[ApplicationSpace] = field(default_factory=list)
    by_liveness: dict[str, int] = field(default_factory=dict)
    orphan_files: int = 0
    orphan_bytes: int = 0
    corrupt: list[str] = field(default_factory=list)


class _Liveness:
    """Liveness of applications by id, each record read once; ``unknown`` without one."""

    def __init__(self, registry: ApplicationRegistry) -> None:
        self.registry = registry
        self.known: dict[str, str] = {}

    def __call__(self, app_id: str) -> str:
        if app_id not in self.known:
            self.known[app_id] = application_liveness(self.registry, app_id)
        return self.known[app_id]


def _offline_store(registry: ApplicationRegistry, strategy: RetryStrategy,
                   shared_retention: float = 0.0) -> TableStore:
    cleaner: RetryingCleaner[TableCleanup] = RetryingCleaner(strategy, threads=4,
                                                             name="cache-gc", describe=describe)
    return TableStore(registry.storage, f"spark-steward-cli-{os.getpid()}", cleaner,
                      is_dead=registry.is_dead, shared_retention=shared_retention)


def _usage(store: TableStore, rel: str) -> tuple[int, int]:
    try:
        return store.storage.usage(rel)
    except StewardError:
        return (0, 0)


def _listing(store: TableStore, registry: ApplicationRegistry
             ) -> tuple[list[TableListing], list[str], list[TableEntry]]:
    liveness = _Liveness(registry)
    entries, corrupt = store.load()
    listing = []
    for entry in entries:
        users = tuple((u, liveness(u)) for u in sorted(store.users(entry.key)))
        files, size = _usage(store, store.data_rel(entry))
        listing.append(TableListing(entry, liveness(entry.app_id), users, files, size))
    return listing, corrupt, entries


def list_tables(registry: ApplicationRegistry) -> tuple[list[TableListing], list[str]]:
    """Every stored entry by key, and the paths of entries that fail verification."""
    store = _offline_store(registry, RetryStrategy.no_retry())
    try:
        listing, corrupt, _ = _listing(store, registry)
        return listing, corrupt
    finally:
        store.cleaner.close(0)


def space(registry: ApplicationRegistry) -> TableSpace:
    """Totals for ``cache du``; orphans are counted whatever their age."""
    store = _offline_store(registry, RetryStrategy.no_retry())
    try:
        listing, corrupt, entries = _listing(store, registry)
        report = TableSpace(corrupt=corrupt)
        for rel in store.orphans(0.0, entries, corrupt):
            files, size = _usage(store, rel)
            report.orphan_files += files
            report.orphan_bytes += size
    finally:
        store.cleaner.close(0)
    report.by_state = {s.value: (0, 0) for s in TableState}
    per_app: dict[str, tuple[str, int, int]] = {}
    for t in listing:
        tables, size = report.by_state[t.entry.state.value]
        report.by_state[t.entry.state.value] = (tables + 1, size + t.bytes)
        _, tables, size = per_app.get(t.entry.app_id, (t.liveness, 0, 0))
        per_app[t.entry.app_id] = (t.liveness, tables + 1, size + t.bytes)
        report.by_liveness[t.liveness] = report.by_liveness.get(t.liveness, 0) + t.bytes
    report.by_application = [ApplicationSpace(app, *per_app[app]) for app in sorted(per_app)]
    return report


def collect_garbage(registry: ApplicationRegistry, *, dry_run: bool, orphan_grace: float,
                    progress: Progress | None = None, timeout: float = 600.0,
                    strategy: RetryStrategy = GC_STRATEGY,
                    shared_retention: float = 0.0) -> GcReport:
    """Runs cached-table failover against ``registry``'s storage and waits for it. Shared
    tables nobody uses are kept until ``shared_retention`` seconds after their release."""
    store = _offline_store(registry, strategy, shared_retention)
    return collect_failover(store, lambda: {e.key: _usage(store, store.data_rel(e))
                                            for e in store.load()[0]},
                            lambda rel: _usage(store, rel), orphan_grace=orphan_grace,
                            dry_run=dry_run, what="table", describe=_item, label="caches",
                            progress=progress, timeout=timeout)


def _item(key: TableCleanup) -> str:
    """What the report calls a cleanup: the table key, or the orphan's path."""
    return key.describe() if isinstance(key, OrphanKey) else key.name
