"""The CheckpointStore (FLIP-270): the one owner of every checkpoint an application creates:
pending, completed and marked-for-deletion ones, in durable metadata, cleaned up repeatably.

No Spark in here: it is handed the storage, the application id, a liveness check and a
:class:`~spark_steward.cleaner.RetryingCleaner`; the Spark glue writes data and calls
:meth:`begin` before and :meth:`complete` after. Decisions come from the pure state machine in
:mod:`spark_steward.checkpoint.lifecycle`.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Union

from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.cleaner import EntryKey, OrphanKey, RetryingCleaner
from spark_steward.checkpoint.errors import CheckpointError, CheckpointNotFound
from spark_steward.errors import StewardError
from spark_steward.checkpoint import lifecycle as machine
from spark_steward.checkpoint.merging import lifecycle as merging
from spark_steward.checkpoint.lifecycle import (CheckpointEntry, CheckpointKind,
                                                 CheckpointState)
from spark_steward.recovery import RecoveryReport
from spark_steward.storage import Storage

log = logging.getLogger(__name__)

#: A checkpoint's own key: ``(series, number)`` (:attr:`CheckpointEntry.key`).
CheckpointKey = tuple[str, int]
#: The cleaner's key: a checkpoint's discard, or the deletion (or sweep) of an orphaned path.
CheckpointCleanup = Union[EntryKey[int], OrphanKey]


def url_storage(url: str, **options: Any) -> tuple[Storage, str]:
    """A Storage rooted at the parent of ``url`` and the name of ``url`` inside it.

    Hadoop spells URLs its own way (``file:/tmp/x``, ``s3a://``); fsspec wants ``file:///tmp/x``
    and ``s3://``.
    """
    if url.startswith("file:") and not url.startswith("file://"):
        url = "file://" + url[len("file:"):]
    if url.startswith("s3a://") or url.startswith("s3n://"):
        url = "s3://" + url[len("s3a://"):]
    parent, name = posixpath.split(url.rstrip("/"))
    if not name or parent.endswith(":/") or parent.endswith(":"):
        raise StewardError(f"refusing to delete {url}: it is not inside a folder")
    return Storage.from_url(parent, **options), name


def _same_checkpoint(a: CheckpointEntry, b: CheckpointEntry) -> bool:
    return (a.app_id, a.created_at, a.kind, a.data) == (b.app_id, b.created_at, b.kind, b.data)


class CheckpointStore:
    """The checkpoint entries of a storage dir and their repeatable cleanup (FLIP-270): the state
    machine applied to durable records, failover of dead applications' entries, and the cleaner that
    retries deletes."""
    def __init__(self, storage: Storage, app_id: str,
                 cleaner: RetryingCleaner[CheckpointCleanup], *,
                 is_dead: Callable[[str], bool], clock: Callable[[], float] = time.time,
                 open_url: Callable[[str], tuple[Storage, str]] | None = None) -> None:
        self.storage = storage
        self.app_id = app_id
        self.cleaner = cleaner
        self.is_dead = is_dead
        self.clock = clock
        self.metadata = CheckpointMetadata(storage)
        self._open_url = open_url or (lambda url: url_storage(url, **self._options_for(url)))
        self._entries: dict[CheckpointKey, CheckpointEntry] = {}
        self._marked: set[CheckpointKey] = set()  # marks known to be durable
        self._highest: dict[str, int] = {}
        #: Per series, the numbers the last refresh found data or an artifact of but no entry.
        self._entryless: dict[str, set[int]] = {}
        self._lock = threading.RLock()

    def _options_for(self, url: str) -> dict[str, Any]:
        scheme = url.split(":", 1)[0]
        same = {"s3a": "s3", "s3n": "s3"}.get(scheme, scheme) == self.storage.protocol
        return dict(self.storage.options) if same else {}

    def storage_at(self, url: str) -> Storage:
        """A Storage rooted at ``url`` (a Hadoop or fsspec URL), with this store's options
        where it is on the same filesystem."""
        parent, _ = url_storage(url.rstrip("/") + "/_", **self._options_for(url))
        return parent

    # -- failover ----------------------------------------------------------------------------

    def recover(self, orphan_grace: float, *, dry_run: bool = False) -> RecoveryReport:
        """Loads the metadata and cleans what the design says a failover must clean: entries
        marked for deletion, pending checkpoints of dead applications, Spark's own checkpoints
        of dead applications, and data that no entry owns once it is ``orphan_grace`` old."""
        entries, corrupt = self.metadata.load()
        report = RecoveryReport(corrupt=corrupt)
        with self._lock:
            for entry in entries:
                self._entries.setdefault(entry.key, entry)
                self._note_number(entry.series, entry.number)
        doomed = machine.to_discard_at_recovery(entries, self.is_dead, self.app_id)
        doomed_keys = {e.key for e in doomed}
        report.kept = [e.id for e in entries if e.key not in doomed_keys]
        for entry in doomed:
            report.discarding.append(entry.id)
            if entry.state is CheckpointState.DISCARDING:
                with self._lock:
                    self._marked.add(entry.key)  # its mark is in storage already
            if not dry_run:
                self.discard(entry, entry.discard_reason or
                             f"{entry.state.value} checkpoint of {entry.app_id}, which is gone")
        unsafe = {path.split("/")[2] for path in corrupt}
        merged_orphans = [rel for series in self.storage.list_names(layout.MERGED)
                          if series not in unsafe
                          for rel in self._merged_orphans(series, orphan_grace)]
        for rel in self.orphans(orphan_grace, entries, corrupt) + merged_orphans:
            report.orphans.append(rel)
            if not dry_run:
                self.cleaner.submit(OrphanKey(rel), self._orphan_deletion(rel))
        return report

    def _merged_orphans(self, series: str, grace: float) -> list[str]:
        try:
            return self.unreferenced_files(series, grace)
        except StewardError as exc:
            log.warning("not sweeping the physical files of checkpoint series %s: %s", series,
                        exc)
            return []

    def orphans(self, grace: float, entries: list[CheckpointEntry],
                corrupt: list[str]) -> list[str]:
        """Data folders and artifacts no entry owns, and temp files of entry or artifact writes
        that died before their rename, older than ``grace`` seconds. A series with a corrupt
        entry is left alone: that entry may own what looks orphaned."""
        owned = {e.key for e in entries}
        with self._lock:
            owned |= set(self._entries)
        unsafe = {path.split("/")[2] for path in corrupt}
        now = self.clock()
        found = []
        for folder in (layout.DATA, layout.ARTIFACTS, layout.ENTRIES):
            for series in self.storage.list_names(folder):
                if series in unsafe:
                    continue
                for name in self.storage.list_names(f"{folder}/{series}"):
                    if not layout.is_temporary(name):
                        number = layout.parse_number(name)
                        if folder == layout.ENTRIES or number is None or \
                                (series, number) in owned:
                            continue
                    rel = f"{folder}/{series}/{name}"
                    modified = self.storage.last_modified(rel)
                    if modified is None:
                        log.info("not removing %s: its age is unknown", rel)
                    elif now - modified >= grace:
                        found.append(rel)
        return found

    # -- the lifecycle -------------------------------------------------------------------------

    def begin(self, series: str, *, kind: CheckpointKind = CheckpointKind.SERIES,
              data: str | None = None, merged: bool = False,
              reuses: Iterable[str] = ()) -> CheckpointEntry:
        """Registers a pending checkpoint durably; returns before any data may be written.

        A ``merged`` one writes into its creator folder (the entry's ``data``) and names the
        physical files of earlier checkpoints it ``reuses``, so no cleanup deletes them while
        it is being written."""
        machine.validate_series(series)
        with self._lock:
            seen = self.metadata.numbers(series)
            known = set().union(*seen.values()) | {n for s, n in self._entries if s == series}
            known |= self._merged_numbers(series) if merged else set()
            number = machine.next_number(known | {self._highest.get(series, 0)})
            default = layout.merged_path(series, number) if merged else \
                layout.data_path(series, number)
            entry = machine.pending(series, number, self.app_id, kind, data or default,
                                    self.clock(), merged=merged, reuses=reuses)
            self.metadata.write_entry(entry)
            self._entries[entry.key] = entry
            self._note_number(series, number)
            return entry

    def require_visible(self, entry: CheckpointEntry, sizes: Mapping[str, int]) -> None:
        """Raises CheckpointError unless every file the executors reported (path relative to
        the storage root: at least that many bytes) is visible here. A storage dir that is a
        host-local path on each host (``file:///tmp/...``) loses them without an error:
        executors on other hosts write into their own disks."""
        seen = {item.path: item.size for item in self.storage.walk_files(entry.data)}
        missing = sorted(path for path, size in sizes.items() if seen.get(path, -1) < size)
        if missing:
            raise CheckpointError(
                f"checkpoint {entry.series}#{entry.number}: {len(missing)} of {len(sizes)} "
                f"file(s) the executors wrote are not visible from the driver (first: "
                f"{self.storage.url_of(missing[0])}); spark.steward.storage.dir "
                f"({self.storage.url}) must be a location every host shares (a shared mount, "
                "s3://, hdfs://), not a path on each host's own disk")

    def complete(self, entry: CheckpointEntry, artifact: dict[str, Any] | None = None, *,
                 rows: int | None = None, bytes_: int | None = None, files: int | None = None,
                 retained: int | None = None,
                 physical: Iterable[str] | None = None) -> CheckpointEntry:
        """Writes the artifact, then the completed entry; subsumes beyond ``retained``.

        ``physical``: for a merged checkpoint, every physical file its segments are in."""
        # Under the lock: a discard marked between the state check and the writes would be
        # overwritten by a completed entry whose data the cleaner is deleting.
        with self._lock:
            current = self._entries.get(entry.key, entry)
            done = machine.complete(current, self.clock(), rows=rows, bytes_=bytes_, files=files,
                                    physical=physical)
            if artifact is not None:
                self.metadata.write_artifact(entry.series, entry.number, artifact)
            self.metadata.write_entry(done)
            self._entries[done.key] = done
        if retained is not None:
            self.subsume(entry.series, retained)
        return done

    def discard(self, entry: CheckpointEntry, reason: str) -> bool:
        """Marks for deletion and hands the deletion to the cleaner; returns at once.

        The durable mark is the first step the cleaner takes (FLIP-270's order), so this never
        blocks the caller on storage. False when it is already being discarded.
        """
        with self._lock:
            current = self._entries.get(entry.key, entry)
            marked = machine.mark_for_deletion(current, reason, self.clock())
            self._entries[marked.key] = marked
        return self.cleaner.submit(EntryKey(marked.series, marked.number),
                                   lambda: self._discard_steps(marked.key))

    def subsume(self, series: str, retained: int) -> list[CheckpointEntry]:
        """Discards the completed checkpoints of ``series`` beyond the newest ``retained`` and
        returns them."""
        with self._lock:
            doomed = machine.subsumed(self._series_entries(series), retained)
        for entry in doomed:
            self.discard(entry, f"subsumed: more than {retained} retained")
        return doomed

    def _discard_steps(self, key: CheckpointKey) -> None:
        """mark (durably) → data → artifact → entry; every step idempotent."""
        with self._lock:
            entry = self._entries.get(key)
            durable = key in self._marked
        if entry is None:
            return
        stored = self.metadata.read_entry(entry.series, entry.number)
        if stored is None or not _same_checkpoint(stored, entry):
            # Gone: the entry is removed last, so an earlier attempt finished everything (its
            # success report was lost), and a newer checkpoint may now hold the number.
            with self._lock:
                self._entries.pop(key, None)
                self._marked.discard(key)
            return
        if not durable:
            self.metadata.write_entry(entry)
            with self._lock:
                self._marked.add(key)
        self._delete_data(entry)
        self.metadata.remove_artifact(entry.series, entry.number)
        self.metadata.remove_entry(entry.series, entry.number)
        if entry.kind is not CheckpointKind.SERIES:  # one series per application: tidy it
            self.storage.remove_empty_folder(layout.entry_path(entry.series, 0).rsplit("/", 1)[0])
        with self._lock:
            self._entries.pop(key, None)
            self._marked.discard(key)
        log.info("discarded checkpoint %s (%s)", entry.id, entry.discard_reason)

    def _delete_data(self, entry: CheckpointEntry) -> None:
        if entry.merged:
            self.sweep_merged(entry.series)
        elif entry.kind.in_storage:
            self.storage.delete(entry.data)
        else:
            target, name = self._open_url(entry.data)
            target.delete(name)

    # -- merged physical files -----------------------------------------------------------------

    def _merged_numbers(self, series: str) -> set[int]:
        """Creator folders in use: a new save must not write into an old save's folder."""
        return {n for n in (layout.parse_number(name) for name in
                            self.storage.list_names(f"{layout.MERGED}/{series}"))
                if n is not None}

    def unreferenced_files(self, series: str, grace: float = 0.0) -> list[str]:
        """Physical files of ``series`` that no stored entry needs, ``grace`` seconds old.

        Derived from the metadata every time (never a counter): files are listed first, entries
        read second (see :func:`~spark_steward.checkpoint.merging.lifecycle.deletable_files`). An entry
        that cannot be read stops the sweep: it might own anything."""
        folder = f"{layout.MERGED}/{machine.validate_series(series)}"
        if not self.storage.is_local:
            self.storage.fs.invalidate_cache(self.storage.path(folder))
        listed = list(self.storage.walk_files(folder))
        entries = self.metadata.series_entries(series)
        ages = {f.path: f.modified for f in listed}
        now = self.clock()
        found = []
        for rel in merging.deletable_files(ages, entries):
            modified = ages[rel]
            if grace <= 0 or (modified is not None and now - modified >= grace):
                found.append(rel)
        return found

    def sweep_merged(self, series: str) -> list[str]:
        """Deletes the physical files of ``series`` no entry needs (idempotent); returns them."""
        gone = self.unreferenced_files(series)
        for rel in gone:
            self.storage.delete(rel)
        folder = f"{layout.MERGED}/{series}"
        for name in self.storage.list_names(folder):
            self.storage.remove_empty_folder(f"{folder}/{name}")
        if gone:
            log.info("removed %d physical checkpoint file(s) of series %s no checkpoint uses",
                     len(gone), series)
        return gone

    def data_usage(self, entry: CheckpointEntry) -> tuple[int, int]:
        """``(files, bytes)`` of the checkpoint's data (for a merged one: of the physical files
        it uses, which it may share with other checkpoints)."""
        if entry.merged:
            files = bytes_ = 0
            for rel in entry.physical:
                for item in self.storage.walk_files(rel):
                    files += 1
                    bytes_ += item.size
            return files, bytes_
        if entry.kind.in_storage:
            return self.storage.usage(entry.data)
        target, name = self._open_url(entry.data)
        return target.usage(name)

    def data_exists(self, entry: CheckpointEntry) -> bool:
        """True when every data file or physical file of ``entry`` is still in storage."""
        if entry.merged:
            return all(self.storage.exists(rel) for rel in entry.physical)
        if entry.kind.in_storage:
            return self.storage.exists(entry.data)
        target, name = self._open_url(entry.data)
        return target.exists(name)

    def _orphan_deletion(self, rel: str) -> Callable[[], None]:
        def delete() -> None:
            self.storage.delete(rel)
            log.info("removed orphaned checkpoint data %s", self.storage.url_of(rel))
        return delete

    # -- queries -------------------------------------------------------------------------------

    def refresh(self, series: str) -> None:
        """Reads the series' entries again: another application may have added, completed,
        marked or removed some since. What this store is itself completing or discarding is
        left as it is."""
        machine.validate_series(series)
        seen = self.metadata.numbers(series)
        stored = seen["entries"]
        with self._lock:
            self._entryless[series] = (seen["artifacts"] | seen["data"]) - stored
            for key in [k for k in self._entries if k[0] == series and k[1] not in stored]:
                gone = self._entries[key]
                if not (gone.app_id == self.app_id and gone.state is CheckpointState.PENDING):
                    del self._entries[key]  # its entry is gone: removed last, so all of it is
        for number in sorted(stored):
            with self._lock:
                mine = self._entries.get((series, number))
            if mine is not None and (mine.state is CheckpointState.DISCARDING or (
                    mine.app_id == self.app_id and mine.state is CheckpointState.PENDING)):
                continue
            try:
                entry = self.metadata.read_entry(series, number)
            except StewardError as exc:
                log.warning("skipping checkpoint entry %s/%s: %s", series, number, exc)
                continue
            with self._lock:
                current = self._entries.get((series, number))
                if current is not None and current is not mine:
                    continue  # changed by this store meanwhile: its view wins
                if entry is None:
                    self._entries.pop((series, number), None)
                else:
                    self._entries[entry.key] = entry
                    self._note_number(series, number)

    def entries(self, series: str | None = None) -> list[CheckpointEntry]:
        """The known entries (of ``series``, or all), in (series, number) order."""
        with self._lock:
            found = [e for e in self._entries.values() if series is None or e.series == series]
        return sorted(found, key=lambda e: e.key)

    def completed(self, series: str) -> list[CheckpointEntry]:
        """The completed entries of ``series``, oldest first."""
        return [e for e in self.entries(series) if e.state is CheckpointState.COMPLETED]

    def get_completed(self, series: str, number: int) -> CheckpointEntry:
        """Completed checkpoint ``number`` of ``series``; CheckpointNotFound naming the known ones
        otherwise."""
        for entry in self.completed(series):
            if entry.number == number:
                return entry
        raise CheckpointNotFound(f"checkpoint {series}/{number} is not a completed checkpoint "
                                 f"(known: {self._describe_known(series)})")

    def latest(self, series: str) -> CheckpointEntry:
        """The newest completed checkpoint whose entry is readable. A newer one whose entry
        is missing from storage (its data or artifact is there) is skipped with a warning that
        names it: the caller gets older data than the newest save."""
        done = self.completed(series)
        newest = done[-1].number if done else 0
        with self._lock:
            skipped = sorted(n for n in self._entryless.get(series, ()) if n > newest)
        if skipped:
            log.warning(
                "checkpoint %s has data but its metadata entry %s is missing from storage; "
                "%s (restore the entry to keep that data; else the next recovery removes it "
                "as orphaned once spark.steward.checkpoints.orphan-grace has passed)",
                ", ".join(f"{series}/{n}" for n in reversed(skipped)),
                ", ".join(self.storage.url_of(layout.entry_path(series, n))
                          for n in reversed(skipped)),
                f"returning {done[-1].id}, the newest readable one" if done else
                "no readable checkpoint is left")
        if not done:
            raise CheckpointNotFound(f"checkpoint series {series!r} has no completed checkpoint "
                                     f"in {self.storage.url}")
        return done[-1]

    def _describe_known(self, series: str) -> str:
        known = [f"{e.number} ({e.state.value})" for e in self.entries(series)]
        return ", ".join(known) or "none"

    def _series_entries(self, series: str) -> list[CheckpointEntry]:
        return [e for e in self._entries.values() if e.series == series]

    def _note_number(self, series: str, number: int) -> None:
        self._highest[series] = max(number, self._highest.get(series, 0))

    # -- shutdown ------------------------------------------------------------------------------

    def close(self, timeout: float) -> list[str]:
        """Waits up to ``timeout`` for outstanding cleanup; returns the ids left (they stay
        recorded as marked for deletion, so the next attach or ``gc`` finishes them)."""
        left = self.cleaner.close(timeout)
        ids = [key.describe() for key in left]
        if ids:
            log.warning("spark-steward stopped with %d checkpoint cleanup(s) unfinished; they "
                        "stay recorded and the next attach or `spark-steward gc` finishes them: "
                        "%s", len(ids), ", ".join(ids[:20]))
        return ids
