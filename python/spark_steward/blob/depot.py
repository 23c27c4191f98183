"""The driver's side of the blob service without Spark: stores, ledger and deletions.

:class:`BlobDepot` puts blobs (local store first, then the HA copy; the put returns only when
every configured store has it), locates them for the server (restoring a missing local copy
from HA, checked against its key), feeds the pure :class:`~spark_steward.blob.lifecycle.BlobLedger` and carries
out the deletions it decides. A deletion that fails is kept and retried at every tick until it
succeeds; what is still left at application end stays in storage for the next attach or
``spark-steward gc``, never forgotten.

File IO never runs under the depot-wide lock, which task and job events need too: a check or
restore holds only its blob's own lock, waited for at most ``io_timeout`` seconds, so a slow or
odd file delays the requests for that blob alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from spark_steward.blob.keys import APPLICATION_SCOPE, BlobKey, BlobKind, BlobRef, \
    validate_scope_id
from spark_steward.blob.peering import PeerDirectory
from spark_steward.blob.server import LocatedBlob
from spark_steward.blob.stores import HaBlobStore, Identity, LocalBlobStore, file_identity
from spark_steward.blob.errors import BlobNotFound, BlobProtocolError, InvalidBlobKey, ScopeError
from spark_steward.errors import ChecksumMismatch, StewardError
from spark_steward.blob.lifecycle import BlobLedger, Deletion
from spark_steward.lifecycle.staged_cleanup import StagedCleanup

log = logging.getLogger(__name__)

#: Where an executor's copy of a blob came from, as its use report names it.
TRANSFER_SOURCES = ("ha", "linked", "server", "peers")


class BlobDepot:
    """Everything the driver knows about this application's blobs. Thread-safe."""

    def __init__(self, local: LocalBlobStore, ha: HaBlobStore | None, *,
                 io_timeout: float = 60.0) -> None:
        self.local = local
        self.ha = ha
        self.ledger = BlobLedger()
        self.io_timeout = io_timeout
        self._refs: dict[tuple[str, BlobKey], BlobRef] = {}
        self._names: dict[str, tuple[BlobRef, str]] = {}
        self._verified: dict[tuple[str, BlobKey], Identity] = {}
        self._key_locks: defaultdict[tuple[str, BlobKey], threading.Lock] = \
            defaultdict(threading.Lock)
        self._failed: list[Deletion] = []
        self._putting: Counter[str] = Counter()
        self._deleting: Counter[str] = Counter()  # scopes whose files are being deleted
        self._foreign: StagedCleanup[str] = StagedCleanup()
        self._still_dead: Callable[[str], bool] = lambda rel: True
        #: Executors' copies by where their bytes came from ("ha", "linked", "server"), as
        #: their use reports say; and deletions that failed and wait for the next period.
        self.transfers: Counter[str] = Counter()
        self.retries = 0
        self.peers = PeerDirectory()
        self._lock = threading.RLock()
        self._deleted = threading.Condition(self._lock)  # a scope's deletion finished

    # -- put ---------------------------------------------------------------------------------

    def put_file(self, source: str | os.PathLike[str], *, scope: str = APPLICATION_SCOPE,
                 kind: BlobKind = BlobKind.PERMANENT, receivers: int = 0, name: str = ""
                 ) -> BlobRef:
        """Stores the file ``source`` as a blob of ``scope`` (locally, then in HA when configured)
        and returns its ref."""
        if not os.path.isfile(source):
            raise BlobNotFound(f"cannot put {source}: no such file")
        with self._putting_into(scope):
            digest = self.local.put_file(scope, source)
            return self._stored(scope, digest.key, digest.crc32c, digest.size, kind, receivers,
                                name)

    def put_bytes(self, data: bytes | bytearray | memoryview, *, scope: str = APPLICATION_SCOPE,
                  kind: BlobKind = BlobKind.PERMANENT, receivers: int = 0, name: str = ""
                  ) -> BlobRef:
        """Stores ``data`` as a blob of ``scope`` (locally, then in HA when configured) and returns
        its ref."""
        with self._putting_into(scope):
            digest = self.local.put_bytes(scope, data)
            return self._stored(scope, digest.key, digest.crc32c, digest.size, kind, receivers,
                                name)

    @contextlib.contextmanager
    def _putting_into(self, scope: str) -> Iterator[None]:
        """While a put writes into ``scope``, deletions there wait for the next period: a
        sweep must not remove the file of a blob the ledger does not know yet. A put waits
        for a deletion already running there, which runs outside the depot lock."""
        with self._lock:
            while scope in self._deleting:
                self._deleted.wait()
            if scope not in self.ledger.scopes() or self.ledger.is_closed(scope):
                raise ScopeError(f"scope {scope} is not open: blobs go into the application "
                                 "scope or a scope opened with spark_steward.scope(name)")
            self._putting[scope] += 1
        try:
            yield
        finally:
            with self._lock:
                self._putting[scope] -= 1
                if not self._putting[scope]:
                    del self._putting[scope]

    def _stored(self, scope: str, key: BlobKey, crc: int, size: int, kind: BlobKind,
                receivers: int, name: str) -> BlobRef:
        if self.ha is not None:
            # Acknowledged only once the durable copy exists too.
            self.ha.put(scope, key, self.local.path(scope, key))
        ref = BlobRef(key, scope, kind, size, crc, name)
        identity = file_identity(self.local.path(scope, key))
        with self._lock:
            try:
                self.ledger.put(scope, key.digest, transient=kind is BlobKind.TRANSIENT,
                                receivers=receivers)
            except ValueError as exc:  # the scope closed or the application ended meanwhile
                if not self.ledger.is_tracked(scope, key.digest):
                    self._failed.append(Deletion(scope, key.digest, "put-refused"))
                raise ScopeError(f"blob {key.short} was not kept: {exc}") from None
            known = self._refs.get((scope, key))
            if known is not None and known.kind is BlobKind.PERMANENT:
                ref = BlobRef(key, scope, BlobKind.PERMANENT, size, crc, name or known.name)
            self._refs[(scope, key)] = ref
            if identity is not None:
                self._verified[(scope, key)] = identity
        log.debug("put blob %s (%s, %d bytes) in scope %s", key.short, kind.value, size, scope)
        return ref

    # -- serve -------------------------------------------------------------------------------

    def ref(self, scope: str, key: BlobKey) -> BlobRef:
        """The ref of a tracked blob; BlobNotFound when it was never put or is deleted."""
        with self._lock:
            ref = self._refs.get((scope, key))
        if ref is None:
            raise BlobNotFound(f"blob {key} is not in scope {scope} (never put, or deleted with "
                               "its scope)")
        return ref

    def locate(self, key: BlobKey, scope: str) -> LocatedBlob:
        """The verified local copy, open, for the server; restored from HA (and checked against
        its key) when the local one is gone or corrupt."""
        ref = self.ref(scope, key)
        with self._lock:
            key_lock = self._key_locks[(scope, key)]
        if not key_lock.acquire(timeout=self.io_timeout):
            raise StewardError(f"blob {key.short} ({scope}) has been checked or restored by "
                               f"another request for over {self.io_timeout:g}s; retry later")
        try:
            with self._lock:
                known = self._verified.get((scope, key))
            found = self.local.open_verified(scope, key, ref.crc32c, ref.size, known)
            if found is None:
                # Checked against its key on the way in: not read again for its crc32c.
                restored = self._restore(ref)
                found = self.local.open_verified(scope, key, ref.crc32c, ref.size, restored)
                if found is None:
                    raise BlobNotFound(f"blob {key} ({scope}) vanished right after its restore")
            file, identity = found
            with self._lock:
                if (scope, key) in self._refs:  # not deleted meanwhile
                    self._verified[(scope, key)] = identity
        finally:
            key_lock.release()
        return LocatedBlob(file, ref.size, ref.crc32c)

    def local_path(self, key: BlobKey, scope: str) -> Path:
        """The verified local copy's path, for reads on the driver itself (restored first when
        it is gone or corrupt)."""
        self.locate(key, scope).file.close()
        return self.local.path(scope, key)

    def _restore(self, ref: BlobRef) -> Identity | None:
        """Installs the HA copy, checked against the key; returns the installed file's
        identity."""
        if self.ha is None:
            raise BlobNotFound(f"local copy of blob {ref.key} ({ref.scope}) is missing or corrupt "
                               "and there is no HA copy (spark.steward.storage.dir not set)")
        ha = self.ha
        log.warning("restoring blob %s (%s) from %s", ref.key.short, ref.scope,
                    ha.url_of(ref.scope, ref.key))
        try:
            path = self.local.install(ref.scope, ref.key, ref.size,
                                      lambda tmp: ha.download(ref.scope, ref.key, tmp))
        except FileNotFoundError:
            raise BlobNotFound(f"blob {ref.key} ({ref.scope}) is gone from the local store and "
                               f"from {ha.url_of(ref.scope, ref.key)}") from None
        except ChecksumMismatch as exc:
            raise BlobNotFound(f"HA copy of blob {ref.key} is corrupt: {exc}") from None
        return file_identity(path)

    def register_file(self, name: str, ref: BlobRef, form: str) -> None:
        """Makes ``ref`` reachable by ``SparkFiles.get(name)`` (transparent mode).

        As in Spark, a name cannot be given to different content; the same content again is
        accepted and changes nothing.
        """
        with self._lock:
            known = self._names.get(name)
            if known is not None and (known[0].key, known[1]) != (ref.key, form):
                raise ScopeError(f"a different file was already added as {name!r} "
                                 f"(blob {known[0].key.short}); Spark does not allow replacing "
                                 "an added file")
            # Spark keeps added files for the whole application: so does the scope's pin.
            self.ledger.pin(ref.scope, ref.key.digest)
            self._names[name] = (ref, form)

    def resolve(self, name: str) -> tuple[BlobRef, str]:
        """The ref and scope of the file added as ``name`` (``sc.addFile``); BlobNotFound otherwise.
        """
        with self._lock:
            found = self._names.get(name)
        if found is None:
            raise BlobNotFound(f"no file named {name!r} was added through spark-steward")
        return found

    def handle_message(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """The blob server's non-download requests from executors."""
        if op == "use":
            scope = validate_scope_id(body.get("scope"))
            key = BlobKey.parse(body.get("key"))
            stage, task = body.get("stage"), body.get("task")
            if not isinstance(stage, int) or not isinstance(task, int):
                raise BlobProtocolError("use needs integer 'stage' and 'task'")
            with self._lock:
                bound = self.ledger.bind(scope, key.digest, stage)
                if body.get("received") is True:
                    self.ledger.received(scope, key.digest, task)
                if body.get("via") in TRANSFER_SOURCES:
                    self.transfers[body["via"]] += 1
            return {"bound": bound}
        if op == "swarm":
            # Peer fetch (blob/swarm.py): the plan, and other hosts that hold or fill it.
            ref = self.ref(validate_scope_id(body.get("scope")), BlobKey.parse(body.get("key")))
            if ref.size == 0:
                raise BlobProtocolError(f"blob {ref} is empty: nothing to fetch in pieces")
            entry = (ref.scope, ref.key)
            plan = self.peers.plan(entry, ref.size, lambda: self.locate(ref.key, ref.scope).file)
            return {"plan": plan.to_wire(),
                    "peers": self.peers.join(entry, body.get("serve"), body.get("drop"),
                                             body.get("want", 8))}
        if op == "resolve":
            name = body.get("name")
            if not isinstance(name, str) or not name or len(name) > 1024:
                raise BlobProtocolError("resolve needs a 'name' string of 1-1024 characters")
            ref, form = self.resolve(name)
            return {"ref": ref.to_wire(), "form": form}
        raise BlobProtocolError(f"unknown op {op!r}")

    # -- lifecycle ---------------------------------------------------------------------------

    def open_scope(self, scope: str) -> None:
        """Starts tracking the owner scope ``scope``."""
        with self._lock:
            self.ledger.open_scope(scope)

    def close_scope(self, scope: str) -> None:
        """Closes ``scope``; its blobs are deleted once its last job has ended."""
        with self._lock:
            deletions = self.ledger.close_scope(scope)
        self._apply(deletions)

    def job_started(self, job_id: int, scope: str, stage_ids: Iterable[int]) -> None:
        """Records a job of ``scope`` starting: its blobs are kept while it runs."""
        with self._lock:
            self.ledger.job_started(job_id, scope, stage_ids)

    def job_ended(self, job_id: int, succeeded: bool) -> None:
        """Records a job ending and deletes the blobs that nothing needs any more."""
        with self._lock:
            deletions = self.ledger.job_ended(job_id, succeeded)
        self._apply(deletions)

    def task_ended(self, task_id: int, succeeded: bool) -> None:
        """Records a task ending: transient blobs it received lose a reference when it succeeded."""
        with self._lock:
            deletions = self.ledger.task_ended(task_id, succeeded)
        self._apply(deletions)

    def tick(self) -> None:
        """One staged-cleanup period: due blobs, failed deletions, foreign leftovers."""
        with self._lock:
            retry, self._failed = self._failed, []
            deletions = [d for d in retry if self._still_wanted(d)] + self.ledger.tick()
            foreign = self._foreign.tick()
        self._apply(deletions)
        for rel in foreign:
            self._delete_foreign(rel)

    def _still_wanted(self, deletion: Deletion) -> bool:
        """A deletion that waited (failed, or deferred by a put) must not hit what was put
        since: a key the ledger tracks again is spared; a sweep of a live scope becomes a
        delete of its untracked files."""
        if deletion.key is not None:
            return not self.ledger.is_tracked(deletion.scope, deletion.key)
        if deletion.reason == "untracked":
            return True  # spares tracked keys by itself
        if self.ledger.is_closed(deletion.scope) or self.ledger.blobs(deletion.scope) == []:
            return True
        self._failed.append(Deletion(deletion.scope, None, "untracked"))
        return False

    def end_application(self) -> None:
        """Deletes every scope, local and HA, and what foreign blobs were taken over."""
        with self._lock:
            retry, self._failed = self._failed, []
            deletions = retry + self.ledger.end_application()
            foreign = self._foreign.drain()
        self._apply(deletions)
        for rel in foreign:
            self._delete_foreign(rel)
        self.local.delete_all()
        if self.ha is not None:
            try:
                self.ha.delete_all()
            except StewardError as exc:
                log.warning("blobs of %s left in %s (the next attach or `spark-steward gc` "
                            "removes them): %s", self.ha.app_id, self.ha.storage.url, exc)

    def adopt_foreign(self, rels: Iterable[str], still_dead: Callable[[str], bool]) -> None:
        """Blob folders of applications that are no longer alive enter staged cleanup;
        ``still_dead(rel)`` is asked again right before each is deleted."""
        with self._lock:
            self._still_dead = still_dead
            for rel in rels:
                self._foreign.stage(rel)

    def _delete_foreign(self, rel: str) -> None:
        assert self.ha is not None
        try:
            if not self._still_dead(rel):
                log.info("not deleting %s: its application is alive again", rel)
                return
            self.ha.storage.delete(rel)
            log.info("deleted blobs of a dead application: %s", self.ha.storage.url_of(rel))
        except StewardError as exc:
            log.warning("could not delete %s (retried next period): %s", rel, exc)
            with self._lock:
                self._foreign.stage(rel)

    def _apply(self, deletions: Iterable[Deletion]) -> None:
        """Carries out ``deletions``: the bookkeeping under the depot lock, the file IO (local
        and HA, possibly slow) outside it, with the scope marked so no put writes there
        meanwhile."""
        for deletion in deletions:
            scope = deletion.scope
            with self._lock:
                if scope in self._putting and deletion.reason != "application-end":
                    self._failed.append(deletion)  # a put is writing there: next period
                    continue
                self._deleting[scope] += 1
                self._unlist(deletion)
            try:
                self._delete(deletion)
            except (StewardError, OSError) as exc:
                log.warning("deleting blob %s/%s failed (retried next period): %s",
                            scope, deletion.key or "*", exc)
                with self._lock:
                    self._failed.append(deletion)
                    self.retries += 1
            finally:
                with self._lock:
                    self._deleting[scope] -= 1
                    if not self._deleting[scope]:
                        del self._deleting[scope]
                    self._deleted.notify_all()

    def _unlist(self, deletion: Deletion) -> None:
        """Forgets what ``deletion`` removes, so nothing serves it any more; under the lock."""
        if deletion.reason == "untracked":
            return
        if deletion.key is None:
            for known in [k for k in self._refs if k[0] == deletion.scope]:
                self._forget(known)
            self._names = {n: r for n, r in self._names.items()
                           if r[0].scope != deletion.scope}
            return
        key = BlobKey(deletion.key)
        self._forget((deletion.scope, key))
        self._names = {n: r for n, r in self._names.items()
                       if (r[0].scope, r[0].key) != (deletion.scope, key)}

    def _delete(self, deletion: Deletion) -> None:
        """The file IO of ``deletion``; outside the depot lock."""
        scope = deletion.scope
        if deletion.reason == "untracked":
            self._delete_untracked(scope)
            return
        if deletion.key is None:
            self.local.delete_scope(scope)
            if self.ha is not None:
                self.ha.delete_scope(scope)
            log.info("deleted blob scope %s (%s)", scope, deletion.reason)
            return
        key = BlobKey(deletion.key)
        self.local.delete(scope, key)
        if self.ha is not None:
            self.ha.delete(scope, key)
        log.debug("deleted blob %s/%s (%s)", scope, key.short, deletion.reason)

    def _delete_untracked(self, scope: str) -> None:
        """Deletes the files of ``scope`` the ledger no longer tracks, keeping the others."""
        with self._lock:
            tracked = set(self.ledger.blobs(scope))
        local_dir = self.local.scope_dir(scope)
        names = {p.name for p in local_dir.iterdir()} if local_dir.is_dir() else set()
        if self.ha is not None:
            names |= set(self.ha.storage.list_names(f"{self.ha.base}/{scope}"))
        for name in sorted(names - tracked):
            try:
                key = BlobKey(name)
            except InvalidBlobKey:
                continue  # temp files of a put in progress
            self.local.delete(scope, key)
            if self.ha is not None:
                self.ha.delete(scope, key)

    def _forget(self, known: tuple[str, BlobKey]) -> None:
        self.peers.forget(*known)
        self._refs.pop(known, None)
        self._verified.pop(known, None)
        self._key_locks.pop(known, None)

    # -- views -------------------------------------------------------------------------------

    def refs(self) -> list[BlobRef]:
        """Every tracked blob's ref, by scope and key."""
        with self._lock:
            return sorted(self._refs.values(), key=lambda r: (r.scope, r.key))

    def usage(self) -> tuple[int, int]:
        """Blobs held now (one per scope and key) and their bytes."""
        with self._lock:
            return len(self._refs), sum(r.size for r in self._refs.values())

    def pending_deletions(self) -> int:
        """How many blob deletions failed and wait to be retried."""
        with self._lock:
            return len(self._failed) + len(self._foreign)

