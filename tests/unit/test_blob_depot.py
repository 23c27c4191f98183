"""The driver's depot without Spark: put to local and HA before acknowledging, restore from HA,
deletions carried out and retried after storage failures, foreign blobs taken over."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from spark_steward.blob.depot import BlobDepot
from spark_steward.blob.keys import BlobKind
from spark_steward.blob.server import LocatedBlob
from spark_steward.blob.stores import HaBlobStore, LocalBlobStore
from spark_steward.errors import BlobNotFound, BlobProtocolError, ScopeError, StorageError
from spark_steward.storage import Storage

DATA = os.urandom(50_000)


class FlakyStorage(Storage):
    """Deletes fail while ``failures`` is positive (counting down), as a flaky store would."""

    failures = 0

    def delete(self, rel: str) -> bool:
        if self.failures > 0:
            self.failures -= 1
            raise StorageError(f"injected failure deleting {rel}")
        return super().delete(rel)


@pytest.fixture
def ha_storage(tmp_path: Path) -> FlakyStorage:
    base = Storage.from_url(str(tmp_path / "ha"))
    return FlakyStorage(base.fs, base.root, base.url)


@pytest.fixture
def depot(tmp_path: Path, ha_storage: FlakyStorage) -> BlobDepot:
    return BlobDepot(LocalBlobStore(tmp_path / "local"), HaBlobStore(ha_storage, "app-1"))


def read_located(located: LocatedBlob) -> bytes:
    with located.file as file:
        return file.read()


def ha_path(ha_storage: Storage, scope: str, key: Any) -> str:
    return f"apps/app-1/blobs/{scope}/{key}"


def test_put_is_acknowledged_with_both_copies_in_place(depot: BlobDepot,
                                                       ha_storage: Storage) -> None:
    ref = depot.put_bytes(DATA)
    assert depot.local.path(ref.scope, ref.key).read_bytes() == DATA
    assert ha_storage.read_bytes(ha_path(ha_storage, ref.scope, ref.key)) == DATA
    assert depot.ledger.is_staged(ref.scope, ref.key.digest), "unbound puts wait in staging"


def test_put_into_a_scope_that_is_not_open_writes_nothing(depot: BlobDepot,
                                                          tmp_path: Path) -> None:
    with pytest.raises(ScopeError, match="nightly.1"):
        depot.put_bytes(DATA, scope="nightly.1")
    assert not (tmp_path / "local").exists()


def test_missing_local_copy_is_restored_from_ha(depot: BlobDepot) -> None:
    ref = depot.put_bytes(DATA)
    depot.local.path(ref.scope, ref.key).unlink()
    located = depot.locate(ref.key, ref.scope)
    assert read_located(located) == DATA and located.crc32c == ref.crc32c


def test_blob_gone_everywhere_is_a_clear_not_found(depot: BlobDepot,
                                                   ha_storage: Storage) -> None:
    ref = depot.put_bytes(DATA)
    depot.local.path(ref.scope, ref.key).unlink()
    ha_storage.delete(ha_path(ha_storage, ref.scope, ref.key))
    with pytest.raises(BlobNotFound, match=ref.key.digest):
        depot.locate(ref.key, ref.scope)


def test_staged_blob_is_deleted_at_the_second_tick_locally_and_in_ha(
        depot: BlobDepot, ha_storage: Storage) -> None:
    ref = depot.put_bytes(DATA)
    depot.tick()
    assert depot.local.path(ref.scope, ref.key).exists()
    depot.tick()
    assert not depot.local.path(ref.scope, ref.key).exists()
    assert not ha_storage.exists(ha_path(ha_storage, ref.scope, ref.key))
    with pytest.raises(BlobNotFound):
        depot.locate(ref.key, ref.scope)


def test_failed_deletion_is_kept_and_retried_until_it_succeeds(
        depot: BlobDepot, ha_storage: FlakyStorage) -> None:
    depot.open_scope("job.1")
    ref = depot.put_bytes(DATA, scope="job.1")
    ha_storage.failures = 2
    depot.close_scope("job.1")
    assert depot.pending_deletions() == 1
    assert ha_storage.exists("apps/app-1/blobs/job.1")
    depot.tick()
    assert depot.pending_deletions() == 1, "second failure: still pending"
    depot.tick()
    assert depot.pending_deletions() == 0
    assert not ha_storage.exists("apps/app-1/blobs/job.1")
    assert not depot.local.scope_dir("job.1").exists()
    assert not depot.ledger.is_tracked(ref.scope, ref.key.digest)


def test_transient_blob_goes_when_its_receivers_succeed(depot: BlobDepot) -> None:
    ref = depot.put_bytes(DATA, kind=BlobKind.TRANSIENT, receivers=2)
    for task in (11, 12):
        depot.handle_message("use", {"key": ref.key.digest, "scope": ref.scope, "stage": 1,
                                     "task": task, "received": True})
    depot.job_started(1, "_app", [1])
    depot.task_ended(11, True)
    assert depot.local.path(ref.scope, ref.key).exists()
    depot.task_ended(12, True)
    assert not depot.local.path(ref.scope, ref.key).exists()


def test_bad_messages_name_what_is_wrong(depot: BlobDepot) -> None:
    with pytest.raises(BlobProtocolError, match="stage"):
        depot.handle_message("use", {"key": "a" * 64, "scope": "_app", "stage": "x",
                                     "task": 1})
    with pytest.raises(BlobProtocolError, match="unknown op"):
        depot.handle_message("delete", {})
    with pytest.raises(BlobNotFound, match="vocab.txt"):
        depot.handle_message("resolve", {"name": "vocab.txt"})


def test_foreign_blobs_are_deleted_after_two_ticks_or_at_the_end(
        depot: BlobDepot, ha_storage: Storage) -> None:
    ha_storage.write_atomic("apps/dead-1/blobs/_app/x", b"1")
    ha_storage.write_atomic("apps/dead-2/blobs/_app/y", b"2")
    depot.adopt_foreign(["apps/dead-1/blobs"], lambda rel: True)
    depot.tick()
    assert ha_storage.exists("apps/dead-1/blobs/_app/x")
    depot.tick()
    assert not ha_storage.exists("apps/dead-1/blobs")
    depot.adopt_foreign(["apps/dead-2/blobs"], lambda rel: True)
    depot.end_application()
    assert not ha_storage.exists("apps/dead-2/blobs")
    assert not ha_storage.exists("apps/app-1/blobs")


def test_retried_scope_sweep_spares_a_blob_put_since(depot: BlobDepot,
                                                     ha_storage: FlakyStorage) -> None:
    old = depot.put_bytes(b"old" * 100)
    depot.tick()
    ha_storage.failures = 1  # the whole-scope sweep of _app fails once
    depot.tick()
    assert depot.pending_deletions() == 1
    new = depot.put_bytes(b"new" * 100)
    depot.register_file("new.txt", new, "file")  # referenced for good
    depot.tick()  # the retry becomes a delete of _app's untracked files
    depot.tick()
    assert read_located(depot.locate(new.key, new.scope)) == b"new" * 100
    assert ha_storage.exists(f"apps/app-1/blobs/_app/{new.key}")
    assert not depot.local.path(old.scope, old.key).exists()
    assert not ha_storage.exists(f"apps/app-1/blobs/_app/{old.key}")


def test_retried_delete_spares_the_same_content_put_again(depot: BlobDepot,
                                                          ha_storage: FlakyStorage) -> None:
    ref = depot.put_bytes(DATA)
    depot.tick()
    depot.put_bytes(b"other")  # so the sweep is per key, not the whole scope
    ha_storage.failures = 1
    depot.tick()
    assert depot.pending_deletions() == 1
    again = depot.put_bytes(DATA)
    depot.tick()
    assert read_located(depot.locate(again.key, again.scope)) == DATA


def test_deletions_wait_while_a_put_writes_into_the_scope(depot: BlobDepot) -> None:
    ref = depot.put_bytes(DATA)
    depot.tick()
    with depot._putting_into("_app"):
        depot.tick()  # due now, but a put is in progress there
        assert depot.local.path(ref.scope, ref.key).exists()
    depot.tick()
    assert not depot.local.path(ref.scope, ref.key).exists()


def test_a_foreign_folder_whose_application_came_back_is_kept(depot: BlobDepot,
                                                              ha_storage: Storage) -> None:
    ha_storage.write_atomic("apps/slow-1/blobs/_app/x", b"1")
    depot.adopt_foreign(["apps/slow-1/blobs"], lambda rel: False)
    depot.tick()
    depot.tick()
    depot.end_application()
    assert ha_storage.exists("apps/slow-1/blobs/_app/x")


def test_put_after_the_application_ended_is_a_scope_error(depot: BlobDepot) -> None:
    depot.end_application()
    with pytest.raises(ScopeError):
        depot.put_bytes(DATA)
