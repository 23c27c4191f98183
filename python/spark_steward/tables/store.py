"""The TableStore: the one owner of every cached table an application materializes or uses:
durable entries, manifests, user records of shared tables, and repeatable cleanup.

Layout below the storage root::

    tables/entries/<key>.json          the entry: state, owner, current attempt (a record)
    tables/manifests/<key>.json        the manifest of the READY attempt (a record)
    tables/data/<key>/<attempt>/       the Parquet files (written by the Spark glue)
    tables/users/<key>/<app id>        one record per application using a shared table

No Spark in here: the glue calls :meth:`TableStore.begin` before it writes, builds the manifest
(:mod:`spark_steward.tables.manifest`) and calls :meth:`TableStore.complete`. Decisions come from
the pure rules in :mod:`spark_steward.tables.lifecycle`.

Readers never depend on the metadata being perfectly current: every query checks the files
against the manifest of one attempt, whose data folder no other attempt writes, so a race with
another application's cleanup can cost a recomputation, never a wrong row.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, TypeVar, Union

from spark_steward.applications import validate_app_id
from spark_steward.cleaner import EntryKey, OrphanKey, RetryingCleaner
from spark_steward.errors import RecordCorrupt, StewardError
from spark_steward.tables.errors import CacheError, TableReplaced
from spark_steward.tables import lifecycle as machine
from spark_steward.tables.lifecycle import TableEntry, TableState, validate_key
from spark_steward.recovery import RecoveryReport
from spark_steward.storage import Storage
from spark_steward.tables.manifest import Manifest

log = logging.getLogger(__name__)

ROOT = "tables"
ENTRIES = f"{ROOT}/entries"
MANIFESTS = f"{ROOT}/manifests"
DATA = f"{ROOT}/data"
USERS = f"{ROOT}/users"
DESCRIPTION_LIMIT = 200

T = TypeVar("T")

#: A materialization of one table: ``EntryKey(table key, attempt)``.
AttemptKey = EntryKey[str]
#: The cleaner's key: an attempt's discard, or the deletion of an orphaned path.
TableCleanup = Union[AttemptKey, OrphanKey]

# Storage.write_atomic's temp file: ``.<name>.tmp-<hex>`` on local disk, ``<name>.tmp-<hex>``
# on other filesystems with rename.
_TEMPORARY = re.compile(r".+\.tmp-[0-9a-f]{32}")


def entry_path(key: str) -> str:
    """The storage path of a cached table's metadata entry."""
    return f"{ENTRIES}/{validate_key(key)}.json"


def manifest_path(key: str) -> str:
    """The storage path of a cached table's manifest."""
    return f"{MANIFESTS}/{validate_key(key)}.json"


def data_path(key: str, attempt: str) -> str:
    """The storage folder of one materialization attempt's files."""
    return f"{DATA}/{validate_key(key)}/{machine.validate_attempt(attempt)}"


def user_path(key: str, app_id: str) -> str:
    """The storage path marking ``app_id`` as a user of a shared table."""
    return f"{USERS}/{validate_key(key)}/{validate_app_id(app_id)}"


def is_temporary(name: str) -> bool:
    """The temp file of a record write that died before its rename: nothing owns it, ever."""
    return _TEMPORARY.fullmatch(name) is not None


def describe(key: TableCleanup) -> str:
    """``key/attempt`` of a discard, the path of an orphan deletion."""
    return key.describe()


def _is_key(name: str) -> bool:
    try:
        validate_key(name)
        return True
    except StewardError:
        return False


class TableStore:
    """The cached tables of a storage dir: entries, manifests, users of shared tables, and their
    cleanup with retries."""
    def __init__(self, storage: Storage, app_id: str, cleaner: RetryingCleaner[TableCleanup], *,
                 is_dead: Callable[[str], bool], clock: Callable[[], float] = time.time,
                 shared_retention: float = 0.0) -> None:
        self.storage = storage
        self.shared_retention = shared_retention
        self.app_id = validate_app_id(app_id)
        self.cleaner = cleaner
        self.is_dead = is_dead
        self.clock = clock
        self._entries: dict[str, TableEntry] = {}     # tables this store made or looked up
        self._discarding: dict[AttemptKey, TableEntry] = {}  # marked; deletion outstanding
        self._marked: set[AttemptKey] = set()                # marks known to be durable
        # Serialises this store's metadata writes per key with its own discards, so a
        # re-materialization never interleaves with the removal of the previous attempt.
        self._lock = threading.RLock()

    def _dead(self, app_id: str) -> bool:
        return app_id != self.app_id and self.is_dead(app_id)

    # -- records -------------------------------------------------------------------------------

    def _read(self, rel: str, parse: Callable[[Any], T], what: str) -> T | None:
        try:
            body = self.storage.read_record(rel)
        except FileNotFoundError:
            return None
        try:
            return parse(body)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise RecordCorrupt(f"{self.storage.url_of(rel)} is not a cached table {what}: "
                                f"{exc}") from None

    def read_entry(self, key: str) -> TableEntry | None:
        """The stored entry of ``key``; None when absent; RecordCorrupt names the path."""
        entry = self._read(entry_path(key), TableEntry.from_dict, "entry")
        if entry is not None and entry.key != key:
            raise RecordCorrupt(f"{self.storage.url_of(entry_path(key))} holds the entry of "
                                f"{entry.key}")
        return entry

    def read_manifest(self, key: str) -> Manifest | None:
        """The manifest of table ``key``, or None."""
        return self._read(manifest_path(key), Manifest.from_dict, "manifest")

    def load(self) -> tuple[list[TableEntry], list[str]]:
        """Every readable stored entry, and the paths of entries that fail verification
        (logged, never deleted: a corrupt entry may still own data, so a person decides)."""
        entries, corrupt = [], []
        for name in self.storage.list_names(ENTRIES):
            key = name[:-len(".json")] if name.endswith(".json") else ""
            if not _is_key(key):
                continue
            try:
                entry = self.read_entry(key)
            except StewardError as exc:
                log.warning("cached table entry %s is unreadable, left alone: %s",
                            self.storage.url_of(f"{ENTRIES}/{name}"), exc)
                corrupt.append(f"{ENTRIES}/{name}")
                continue
            if entry is not None:
                entries.append(entry)
        return sorted(entries, key=lambda e: e.key), corrupt

    # -- the lifecycle -------------------------------------------------------------------------

    def data_rel(self, entry: TableEntry) -> str:
        """The folder (relative to the storage root) the glue writes ``entry``'s Parquet into."""
        return data_path(entry.key, entry.attempt)

    def begin(self, key: str, *, shared: bool, description: str = "") -> TableEntry:
        """Records a PENDING table durably (with this application's user record first, when
        shared) and returns before any data may be written. A new attempt id each time, so a
        later begin of the same key supersedes this one."""
        entry = machine.pending(key, shared=shared, app_id=self.app_id,
                                attempt=uuid.uuid4().hex[:16], now=self.clock(),
                                description=" ".join(description.split())[:DESCRIPTION_LIMIT])
        with self._lock:
            if shared:
                self.add_user(key)
            self.storage.write_record(entry_path(key), entry.to_dict())
            self._entries[key] = entry
        return entry

    def complete(self, entry: TableEntry, manifest: Manifest) -> TableEntry:
        """Writes the manifest, then the READY entry. TableReplaced when the entry was
        discarded or another materialization took the key meanwhile (the caller then uses
        the table uncached or looks it up again)."""
        if (manifest.key, manifest.attempt) != (entry.key, entry.attempt):
            raise CacheError(f"manifest of {manifest.key}/{manifest.attempt} cannot complete "
                             f"cached table {entry.id}")
        with self._lock:
            current = self._entries.get(entry.key)
            if current is None or current.attempt != entry.attempt:
                raise TableReplaced(f"cached table {entry.id} was discarded or replaced by "
                                    "another attempt before it completed")
            ready = machine.transition(current, TableState.READY, rows=manifest.rows,
                                       bytes_=manifest.bytes)
            try:
                stored = self.read_entry(entry.key)
            except RecordCorrupt:
                stored = None
            if stored is None or stored.attempt != entry.attempt or \
                    stored.state is not TableState.PENDING:
                found = "no entry" if stored is None else f"{stored.id}, {stored.state.value}"
                raise TableReplaced(f"cached table {entry.id} was discarded or replaced before "
                                    f"it completed (stored: {found})")
            self.storage.write_record(manifest_path(entry.key), manifest.to_dict())
            self.storage.write_record(entry_path(entry.key), ready.to_dict())
            self._entries[entry.key] = ready
        return ready

    def lookup(self, key: str) -> tuple[TableEntry, Manifest] | None:
        """The READY entry of ``key`` with its manifest, both verified; None otherwise. An
        unreadable or inconsistent record is treated as absent, with a warning naming it."""
        validate_key(key)
        try:
            entry = self.read_entry(key)
            if entry is None or entry.state is not TableState.READY:
                return None
            manifest = self.read_manifest(key)
        except StewardError as exc:
            log.warning("cached table %s is treated as absent: %s", key, exc)
            return None
        if manifest is None or (manifest.key, manifest.attempt) != (key, entry.attempt):
            found = "none" if manifest is None else f"{manifest.key}/{manifest.attempt}"
            log.warning("cached table %s is treated as absent: %s holds the manifest of %s",
                        entry.id, self.storage.url_of(manifest_path(key)), found)
            return None
        with self._lock:
            if EntryKey(key, entry.attempt) in self._discarding:
                return None  # this store is deleting it; the mark may not be durable yet
            self._entries[key] = entry
        return entry, manifest

    # -- users of shared tables ----------------------------------------------------------------

    def add_user(self, key: str) -> None:
        """Records that this application uses ``key`` (a reference no counter can lose)."""
        self.storage.write_record(user_path(key, self.app_id),
                                  {"app_id": self.app_id, "since": self.clock()})

    def remove_user(self, key: str) -> None:
        """Removes this application from the users of shared table ``key``."""
        self.storage.delete(user_path(key, self.app_id))

    def users(self, key: str) -> set[str]:
        """Applications holding a user record of ``key``."""
        return {name for name in self.storage.list_names(f"{USERS}/{validate_key(key)}")
                if not is_temporary(name) and not name.startswith(".")}

    def release(self, entry: TableEntry, reason: str) -> bool:
        """This application is done with ``entry``: a private table is discarded; a shared one
        loses this application's user record and is discarded only when no live user remains.
        True when a discard was submitted."""
        if not entry.shared:
            return self.discard(entry, reason)
        self.remove_user(entry.key)
        live = sorted(u for u in self.users(entry.key) if not self._dead(u))
        if live:
            with self._lock:
                current = self._entries.get(entry.key)
                if current is not None and current.attempt == entry.attempt:
                    del self._entries[entry.key]  # this application no longer uses it
            log.info("released shared cached table %s; kept for %s", entry.id, ", ".join(live))
            return False
        if self.shared_retention > 0 and entry.state is TableState.READY:
            self._stamp_released(entry)
            return False
        return self.discard(entry, reason)

    def _stamp_released(self, entry: TableEntry) -> None:
        """Keeps a shared table nobody uses for ``shared_retention`` seconds from now: the
        attach or ``gc`` after that deletes it unless an application took it up again."""
        with self._lock:
            stored = self._stored_attempt(entry.key)
            if stored is None or stored.attempt != entry.attempt \
                    or stored.state is not TableState.READY:
                return
            released = replace(stored, released_at=self.clock())
            self.storage.write_record(entry_path(entry.key), released.to_dict())
            if self._entries.get(entry.key) is not None:
                del self._entries[entry.key]
        log.info("released shared cached table %s; no application uses it, kept for reuse "
                 "for %.0f s", entry.id, self.shared_retention)

    # -- discard -------------------------------------------------------------------------------

    def discard(self, entry: TableEntry, reason: str) -> bool:
        """Marks ``entry`` for deletion and hands the deletion to the cleaner; returns at once.

        The cleaner writes the mark durably first, then deletes data → manifest → user records
        → entry. False when that attempt is already being discarded.
        """
        key: AttemptKey = EntryKey(entry.key, entry.attempt)
        with self._lock:
            current = self._entries.get(entry.key)
            same = current is not None and current.attempt == entry.attempt
            base = self._discarding.get(key) or (current if same else None) or entry
            marked = machine.transition(base, TableState.MARKED_FOR_DELETION, reason=reason)
            self._discarding[key] = marked
            if same:
                self._entries[entry.key] = marked
        return self.cleaner.submit(key, lambda: self._discard_steps(key))

    def _stored_attempt(self, key: str) -> TableEntry | None:
        try:
            return self.read_entry(key)
        except RecordCorrupt as exc:
            log.warning("not removing the metadata of cached table %s: %s", key, exc)
            return None

    def _discard_steps(self, key: AttemptKey) -> None:
        """mark (durably) → data → manifest → user records → entry; every step idempotent.

        The data folder is this attempt's alone, so it always goes. The metadata goes only
        while the stored entry still names this attempt: gone means an earlier try finished
        (the entry is removed last), another attempt means a re-materialization owns it now.
        """
        table, attempt = key.name, key.version
        with self._lock:
            entry = self._discarding.get(key)
            if entry is None:
                return
            stored = self._stored_attempt(table)
            ours = stored is not None and stored.attempt == attempt
            if ours and key not in self._marked:
                if stored is not None and stored.state is not TableState.MARKED_FOR_DELETION:
                    self.storage.write_record(entry_path(table), entry.to_dict())
                self._marked.add(key)
        self.storage.delete(data_path(table, attempt))
        if ours:
            with self._lock:
                stored = self._stored_attempt(table)
                if stored is not None and stored.attempt == attempt:
                    self.storage.delete(manifest_path(table))
                    self.storage.delete(f"{USERS}/{table}")
                    self.storage.delete(entry_path(table))
        self.storage.remove_empty_folder(f"{DATA}/{table}")
        with self._lock:
            self._discarding.pop(key, None)
            self._marked.discard(key)
            current = self._entries.get(table)
            if current is not None and current.attempt == attempt:
                del self._entries[table]
        log.info("discarded cached table %s (%s)", entry.id, entry.discard_reason)

    # -- queries -------------------------------------------------------------------------------

    def entries(self) -> list[TableEntry]:
        """The tables this store made or looked up, by key (what it knows, not all of storage:
        :meth:`load` reads that)."""
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: e.key)

    def usage(self) -> int:
        """Bytes of the READY tables this store knows: what ``cache.max-bytes`` bounds."""
        return sum(e.bytes for e in self.entries() if e.state is TableState.READY)

    # -- failover ------------------------------------------------------------------------------

    def recover(self, orphan_grace: float, *, dry_run: bool = False) -> RecoveryReport:
        """Cleans what a failover must: marked tables, pending and private tables of dead
        applications, shared tables without a live user, and whatever no entry owns once it is
        ``orphan_grace`` old."""
        entries, corrupt = self.load()
        users = {e.key: self.users(e.key) for e in entries if e.shared}
        doomed = machine.to_clean_at_recovery(entries, users, self._dead, now=self.clock(),
                                              retention=self.shared_retention)
        if not dry_run and self.shared_retention > 0:
            for entry in machine.to_stamp_released(entries, users, self._dead):
                self._stamp_released(entry)
        doomed_keys = {e.key for e, _ in doomed}
        report = RecoveryReport(kept=[e.key for e in entries if e.key not in doomed_keys],
                                corrupt=corrupt)
        for entry, reason in doomed:
            report.discarding.append(entry.key)
            if dry_run:
                continue
            if entry.state is TableState.MARKED_FOR_DELETION:
                with self._lock:
                    # its mark is stored already
                    self._marked.add(EntryKey(entry.key, entry.attempt))
            self.discard(entry, reason)
        for rel in self.orphans(orphan_grace, entries, corrupt):
            report.orphans.append(rel)
            if not dry_run:
                self.cleaner.submit(OrphanKey(rel), self._orphan_deletion(rel))
        return report

    def orphans(self, grace: float, entries: list[TableEntry], corrupt: list[str]) -> list[str]:
        """Data folders of no entry's attempt, manifests and user records without an entry,
        and temp files of record writes, older than ``grace`` seconds. A key whose entry is
        corrupt is left alone: that entry may own what looks orphaned."""
        owned: dict[str, set[str]] = {}
        with self._lock:
            known = [*entries, *self._entries.values(), *self._discarding.values()]
        for entry in known:
            owned.setdefault(entry.key, set()).add(entry.attempt)
        unsafe = {path.rsplit("/", 1)[-1][:-len(".json")] for path in corrupt}
        candidates: list[str] = []
        for key in self.storage.list_names(DATA):
            if not _is_key(key) or key in unsafe:
                continue
            if key not in owned:
                candidates.append(f"{DATA}/{key}")
                continue
            candidates += [f"{DATA}/{key}/{attempt}"
                           for attempt in self.storage.list_names(f"{DATA}/{key}")
                           if attempt not in owned[key]]
        for folder in (ENTRIES, MANIFESTS):
            for name in self.storage.list_names(folder):
                key = name[:-len(".json")] if name.endswith(".json") else ""
                if is_temporary(name) or (folder == MANIFESTS and _is_key(key) and
                                          key not in owned and key not in unsafe):
                    candidates.append(f"{folder}/{name}")
        for key in self.storage.list_names(USERS):
            if not _is_key(key) or key in unsafe:
                continue
            if key not in owned:
                candidates.append(f"{USERS}/{key}")
            else:
                candidates += [f"{USERS}/{key}/{name}"
                               for name in self.storage.list_names(f"{USERS}/{key}")
                               if is_temporary(name)]
        now = self.clock()
        found = []
        for rel in candidates:
            modified = self.storage.last_modified(rel)
            if modified is None:
                log.info("not removing %s: its age is unknown", rel)
            elif now - modified >= grace:
                found.append(rel)
        return found

    def _orphan_deletion(self, rel: str) -> Callable[[], None]:
        def delete() -> None:
            self.storage.delete(rel)
            if rel.startswith(DATA + "/") and rel.count("/") == 3:
                self.storage.remove_empty_folder(rel.rsplit("/", 1)[0])
            log.info("removed orphaned cached table data %s", self.storage.url_of(rel))
        return delete

    # -- shutdown ------------------------------------------------------------------------------

    def close(self, timeout: float) -> list[str]:
        """Waits up to ``timeout`` for outstanding cleanup; returns what was left (it stays
        recorded, so the next attach or ``gc`` finishes it)."""
        left = [describe(k) for k in self.cleaner.close(timeout)]
        if left:
            log.warning("spark-steward stopped with %d cached table cleanup(s) unfinished; they "
                        "stay recorded and the next attach or `spark-steward gc` finishes them: "
                        "%s", len(left), ", ".join(left[:20]))
        return left

