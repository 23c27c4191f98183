"""The checkpoint lifecycle killed at every storage step, then recovered by ``gc``: a model
check, with no Spark, of what tests/faults/test_checkpoint_crashes.py shows with real drivers.

The workload is the SIGKILL matrix's own: four saves of series ``s`` (retained 2, so 1 and 2
are subsumed and discarded) through :func:`~spark_steward.checkpoint.service.save_files` (the
sequence a save runs; here the executors' job writes its part files, plus one of an attempt
that did not count), then the stop's discards. The store runs on a real local storage dir;
every create, rename, unlink, rmdir and mkdir it makes is a step, and the run dies before step
N as a SIGKILLed driver does: that step and everything after it never happen (a temp file's
tidy-up included). ``spark-steward gc``'s collector then recovers the dir, judging the
application dead from its record. For every N, and for two schedules of the cleaner (the
discards right after each save, or in the middle of the next save's write job):

- nothing is left that no completed entry owns (no temp file, no pending or marked entry,
  no data without its checkpoint);
- exactly the checkpoints whose completed entry was written and whose mark was not survive,
  and each holds the very bytes its save wrote.

The SIGKILL matrix keeps the points only a real driver has: inside the write job, Spark's own
checkpoints and the stop that discards them, and a recovery by a second driver's attach.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, cast

import crc32c
import pytest

from spark_steward import storage as storage_module
from spark_steward.applications import ApplicationRegistry
from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.data import DataFile
from spark_steward.checkpoint.gc import collect_garbage
from spark_steward.checkpoint.lifecycle import CheckpointState
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.checkpoint.service import save_files
from spark_steward.checkpoint.store import CheckpointCleanup, CheckpointStore
from spark_steward.cleaner import RetryingCleaner
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.storage import Storage
from tests.support.checkpoint_audit import owned_files
from tests.unit.conftest import FakeClock, ManualCleaner

APP = "app-20261127000000-0001"
SERIES = "s"
SAVES, RETAINED, PARTS = 4, 2, 3
SCHEDULES = ("after-each-save", "during-the-next-write")


class Killed(BaseException):
    """The driver is gone: raised at the step it died before, and at every step after."""


class Disk:
    """Counts the storage steps the running thread makes and kills it before step ``at``."""

    def __init__(self, at: int | None, root: Path) -> None:
        self.at = at
        self.root = str(root)
        self.steps: list[str] = []
        self.dead = False
        self._thread = threading.get_ident()

    def step(self, what: str) -> None:
        if threading.get_ident() != self._thread:
            return
        if self.dead or (self.at is not None and len(self.steps) + 1 >= self.at):
            self.dead = True
            raise Killed(what)
        self.steps.append(what)

    def wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step_then(*args: Any, **kwargs: Any) -> Any:
            self.step(f"{name} {self.label(args[-1] if name == 'replace' else args[0])}")
            return real(*args, **kwargs)
        return step_then

    def label(self, path: Any) -> str:
        """The path below the run's root, temp names' random part left out: the same step
        has the same label in every run."""
        text = str(path).replace(self.root, "")
        return re.sub(r"tmp-[0-9a-f]{32}", "tmp-*", text)


def steps_patched(monkeypatch: pytest.MonkeyPatch, disk: Disk) -> None:
    """Every mutation of the local storage dir goes through ``disk``: renames, unlinks (also
    inside fsspec's recursive delete), rmdirs, mkdirs and the exclusive create of a temp
    file."""
    for name in ("replace", "unlink", "remove", "rmdir", "mkdir"):
        monkeypatch.setattr(os, name, disk.wrap(name, getattr(os, name)))
    monkeypatch.setattr(storage_module, "open_new",
                        disk.wrap("create", storage_module.open_new))


def part_bytes(iteration: int, partition: int) -> bytes:
    return f"iteration {iteration} partition {partition}\n".encode() * (50 + 7 * partition)


def writer(root: Path, disk: Disk, iteration: int,
           meanwhile: Callable[[], None]) -> Callable[[str], list[DataFile]]:
    """The executors' job: ``meanwhile`` runs first (the driver's cleaner at work), then an
    attempt that did not count, then one file per partition."""
    def write(folder_url: str) -> list[DataFile]:
        meanwhile()
        folder = root / folder_url.split("/storage/", 1)[1]
        disk.step(f"mkdir {disk.label(folder)}")
        folder.mkdir(parents=True, exist_ok=True)
        disk.step("create lost attempt")
        (folder / "part-00000-lost-attempt").write_bytes(b"a speculative attempt's output")
        files = []
        for p in range(PARTS):
            body = part_bytes(iteration, p)
            disk.step(f"create part {p}")
            (folder / f"part-{p:05d}").write_bytes(body)
            files.append(DataFile(partition=p, name=f"part-{p:05d}", rows=50 + 7 * p,
                                  bytes=len(body), crc32c=f"{crc32c.crc32c(body):08x}"))
        return files
    return write


def run_application(root: Path, disk: Disk, schedule: str) -> None:
    """Four saves (checkpoint n holds iteration n), subsumption, the stop's discards."""
    clock = FakeClock()
    cleaner = ManualCleaner(RetryStrategy.no_retry(), clock)
    store = CheckpointStore(Storage.from_url((root / "storage").as_uri()), APP,
                            cast(RetryingCleaner[CheckpointCleanup], cleaner),
                            is_dead=lambda app: False, clock=clock)
    for i in range(1, SAVES + 1):
        meanwhile = cleaner.run_due if schedule == "during-the-next-write" else (lambda: 0)
        number = save_files(store, SERIES, writer(root / "storage", disk, i, meanwhile),
                            '{"type":"struct","fields":[]}', RETAINED)
        assert number == i
        if schedule == "after-each-save":
            cleaner.run_due()
    # spark.stop(): what is still pending is discarded, outstanding cleanup finished.
    for entry in store.entries():
        if entry.state is CheckpointState.PENDING:
            store.discard(entry, "its application stopped before it completed")
    cleaner.run_until_idle()


def completed_on_disk(root: Path) -> set[int]:
    """The checkpoints whose entry the dead driver left saying completed: the ones a restore
    may use, so the ones recovery must keep (a discard writes its mark before it deletes)."""
    entries, corrupt = CheckpointMetadata(Storage.from_url((root / "storage").as_uri())).load()
    assert not corrupt, corrupt  # entries are written atomically: never torn
    return {e.number for e in entries
            if e.series == SERIES and e.state is CheckpointState.COMPLETED}


@pytest.fixture
def crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[int | None, str], tuple[Path, Disk]]:
    """``crash(at, schedule)``: the application run in a fresh storage dir, killed before
    step ``at`` (never, for None); the dir as the dead driver left it."""
    runs = iter(range(10_000))

    def run(at: int | None, schedule: str) -> tuple[Path, Disk]:
        root = tmp_path / f"run-{next(runs)}"
        registry = ApplicationRegistry(Storage.from_url((root / "storage").as_uri()),
                                       heartbeat_timeout=60)
        registry.write(registry.new_record(APP, "crash model"))  # written at attach
        disk = Disk(at, root)
        with monkeypatch.context() as patched:
            steps_patched(patched, disk)
            try:
                run_application(root, disk, schedule)
            except Killed:
                pass
        return root, disk
    return run


def recovered_by_gc(root: Path) -> list[str]:
    """``spark-steward gc`` on the dir; the driver judged dead from its record (its pid no
    longer runs). Returns what failed."""
    storage = Storage.from_url((root / "storage").as_uri())
    registry = ApplicationRegistry(storage, heartbeat_timeout=60,
                                   probe=lambda pid, start: False)
    report = collect_garbage(registry, dry_run=False, orphan_grace=0.0, timeout=30)
    return [f"{f}" for f in report.failed]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_step_killed_then_gc_leaves_only_whole_checkpoints(
        schedule: str, crash: Callable[[int | None, str], tuple[Path, Disk]]) -> None:
    root, whole = crash(None, schedule)
    total = len(whole.steps)
    # Four saves and two discards: dozens of steps, each a place to die.
    assert total > 60, whole.steps
    assert completed_on_disk(root) == {3, 4}

    wrong: list[str] = []
    kept: set[frozenset[int]] = set()
    for at in range(1, total + 1):
        root, disk = crash(at, schedule)
        assert disk.dead and disk.steps == whole.steps[:at - 1]
        expected = completed_on_disk(root)
        kept.add(frozenset(expected))
        failed = recovered_by_gc(root)
        storage = Storage.from_url((root / "storage").as_uri())
        problems, artifacts = owned_files(storage, SERIES)
        if failed:
            problems.append(f"gc failed: {failed}")
        if set(artifacts) != expected:
            problems.append(f"survivors {sorted(artifacts)}, completed {sorted(expected)}")
        for number, artifact in sorted(artifacts.items()):
            folder = storage.path(layout.data_path(SERIES, number))
            for f in artifact["files"]:
                body = Path(folder, f["name"]).read_bytes()
                if body != part_bytes(number, f["partition"]) or \
                        f"{crc32c.crc32c(body):08x}" != f["crc32c"]:
                    problems.append(f"s/{number} {f['name']} does not hold its save's bytes")
        if problems:
            wrong.append(f"killed before step {at} ({whole.steps[at - 1]}): "
                         + "; ".join(problems))
    assert not wrong, f"{len(wrong)} of {total} kill points:\n" + "\n".join(wrong[:20])
    # The kill points reach every stage: nothing yet, each save completed, the discards.
    assert {frozenset(), frozenset({1}), frozenset({1, 2}), frozenset({2, 3}),
            frozenset({3, 4})} <= kept, sorted(map(sorted, kept))
