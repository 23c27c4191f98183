"""The pack relation of streaming checkpoint locations (FLIP-306), model-checked.

A model of Spark writes batches (offsets, state deltas with their ``.crc``, commits), rewrites
files of the batch in flight, and deletes versions below its retention watermark the way the
shim's file manager does: the loose file, plus a tombstone for every pack its view shows holding
the file (a view up to ``TTL`` old may miss a pack younger than that). The real
:class:`~spark_steward.streams.packer.Packer` runs cycles over an in-memory file system between
any of those steps, crashes at any storage operation (also after the operation landed) and
restarts without memory.

Properties:

* what Spark sees (loose files, then live packed members, loose winning) always holds every
  file Spark wrote and did not delete, with the bytes it last wrote: also for a reader whose
  view of the packs was read up to ``TTL`` before its listing of loose files;
* once the packer has run past the grace with no failures, Spark sees exactly its files, no
  pack holds only dead members, and the packs store at most the space-amplification bound
  times their live bytes (compactions, run with a low bound here, copy live members out of
  wasteful packs; deletes named against the old pack reach the copy).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spark_steward.streams.lifecycle import packs as rules
from spark_steward.streams.location import Location, checksum_sidecar
from spark_steward.streams.packer import Packer
from spark_steward.streams.packs import Packs, PackState
from tests.unit.conftest import FakeClock
from tests.unit.failing_fs import FailingFileSystem, failing_storage

GRACE = 3.0
TTL = 2.0  # StreamPacks.TTL_NANOS
PARTITIONS = 2


def _location(fs: FailingFileSystem) -> Location:
    location = Location.__new__(Location)
    location.location = "memory:/ckpt"
    location.storage = failing_storage(fs, "/ckpt")[0]
    return location


class PackModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.fs = FailingFileSystem(clock=self.clock)
        self.location = _location(self.fs)
        self.storage = self.location.storage
        self.bound = 1.3  # low, so compactions happen
        self.compactions = 0
        self.packer = self._new_packer()
        self.files: dict[str, bytes] = {}   # what Spark wrote and did not delete
        self.born: dict[str, float] = {}    # when each was written last
        self.batch = -1                     # last committed
        self.watermark = 0
        self.view: tuple[float, PackState] | None = None  # a reader's cached view
        self.jvm_view: tuple[float, PackState] | None = None  # the deleting JVM's
        self.writes = 0

    def _new_packer(self) -> Packer:
        return Packer(self.location, keep=1, grace=GRACE, max_member=1 << 20,
                      max_amplification=self.bound, clock=self.clock)

    # -- Spark ---------------------------------------------------------------------------------

    def _write(self, rel: str) -> None:
        self.writes += 1
        data = f"{rel}#{self.writes}".encode()
        self.clock.advance(0.001)  # distinct mtimes, as a rewrite a millisecond later has
        self.storage.fs.pipe_file(self.storage.path(rel), data)
        self.storage.fs.pipe_file(self.storage.path(checksum_sidecar(rel)), b"crc")
        self.files[rel] = data
        self.born[rel] = self.clock()

    @rule()
    def run_batch(self) -> None:
        batch = self.batch + 1
        self._write(f"offsets/{batch}")
        for partition in range(PARTITIONS):
            self._write(f"state/0/{partition}/{batch + 1}.delta")
            if batch % 3 == 2:
                self._write(f"state/0/{partition}/{batch + 1}.snapshot")
        self._write(f"commits/{batch}")
        self.batch = batch

    @rule()
    def rewrite_in_flight(self) -> None:
        """The next batch's offsets and state, written and written again (a retried task)."""
        self._write(f"offsets/{self.batch + 1}")
        self._write(f"state/0/0/{self.batch + 2}.delta")

    @rule(cached=st.booleans(), lagging=st.booleans())
    def spark_retention(self, cached: bool, lagging: bool) -> None:
        """Spark deletes every version below its watermark, like HDFSMetadataLog.purge and the
        state store's cleanup, naming the packs its JVM's view shows holding each file: a view
        read up to TTL ago (``cached``) or now."""
        if self.batch - self.watermark < 3:
            return
        self.watermark += 2
        if not cached or self.jvm_view is None or self.clock() - self.jvm_view[0] >= TTL:
            self.jvm_view = (self.clock(), Packs(self.storage, "memory:/ckpt").read())
        state = self.jvm_view[1]
        packs = state.packs
        marks = []
        for rel in sorted(self.files):
            version = rules.packable(rel)
            batch = version - 1 if rel.startswith("state/") else version
            if batch is None or batch >= self.watermark:
                continue
            if lagging and rel.startswith("state/0/1/"):
                continue
            self.storage.fs.rm(self.storage.path(rel)) if self.storage.exists(rel) else None
            if self.storage.exists(checksum_sidecar(rel)):
                self.storage.fs.rm(self.storage.path(checksum_sidecar(rel)))
            marks += [f"{pack}\t{rel}\n" for pack in rules.holders(packs, rel, state.dead)]
            del self.files[rel]
            self.born.pop(rel, None)
        if marks:
            self.writes += 1
            self.storage.fs.pipe_file(self.storage.path(f"{rules.TOMBSTONES_FOLDER}/"
                                                        f"jvm-{self.writes}.txt"),
                                      "".join(marks).encode())

    # -- the packer ------------------------------------------------------------------------------

    def _note_packs(self) -> None:
        if Packs(self.storage, "memory:/ckpt").read().moved and currently_in_test_context():
            event("a compaction happened")

    @rule(seconds=st.sampled_from([0.5, 1.0, GRACE]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def pack(self) -> None:
        self.packer.cycle()
        self._note_packs()

    @rule(op=st.sampled_from(["pipe_file", "rm", "cat_file", "ls", "find"]),
          after=st.integers(0, 6), landed=st.booleans())
    def crash_mid_cycle(self, op: str, after: int, landed: bool) -> None:
        """The driver dies at some storage operation of a cycle (before or after it took
        effect); a new packer starts afresh."""
        self.fs.fail(op, 1, skip=after, landed=landed)
        try:
            self.packer.cycle()
        except Exception:  # noqa: BLE001 - the crash, whatever layer wraps it
            pass
        finally:
            self.fs.allow(op)
        self._note_packs()
        self.packer = self._new_packer()

    # -- readers ---------------------------------------------------------------------------------

    def _logical(self, state: PackState, loose: set[str]) -> dict[str, rules.Member | None]:
        out: dict[str, rules.Member | None] = {rel: m for rel, m in state.live().items()}
        for rel in loose:
            out[rel] = None
        return out

    def _loose(self) -> set[str]:
        return {e.path for e in self.storage.walk_files("") if rules.packable(e.path) is not None}

    @rule()
    def reader_reads_view(self) -> None:
        self.view = (self.clock(), Packs(self.storage, "memory:/ckpt").read())

    @precondition(lambda self: self.view is not None)
    @rule()
    def reader_lists_with_cached_view(self) -> None:
        """A JVM lists loose files now with a view of the packs read up to TTL ago: every file
        that existed since before the view was read is in one or the other."""
        assert self.view is not None
        taken, state = self.view
        if self.clock() - taken >= TTL:
            return
        loose = self._loose()
        logical = self._logical(state, loose)
        for rel, born in self.born.items():
            if born <= taken:
                assert rel in logical, f"{rel} (written at {born}) missed by a listing"

    @invariant()
    def spark_sees_its_files(self) -> None:
        state = Packs(self.storage, "memory:/ckpt").read()
        loose = self._loose()
        logical = self._logical(state, loose)
        for rel, data in self.files.items():
            assert rel in logical, f"{rel} is lost"
            member = logical[rel]
            got = self.storage.read_bytes(rel) if member is None else \
                Packs(self.storage, "memory:/ckpt").member_bytes(member)
            assert got == data, f"{rel} reads {got!r}, Spark wrote {data!r}"

    def _snapshot(self) -> dict[str, bytes]:
        return {path: self.storage.fs.cat_file(path) for path in self.fs.files()
                if not self.storage.fs.isdir(path)}

    def teardown(self) -> None:
        """Quiesce: clean cycles past the grace until one changes nothing (a compaction copies,
        the next cycle deletes the old pack); then exactly Spark's files, no dead pack."""
        self.packer = self._new_packer()
        for number in range(12):
            before = self._snapshot()
            self.packer.cycle()
            self.clock.advance(GRACE + 0.1)
            if number >= 2 and self._snapshot() == before:  # the first ones wait the grace
                break
        else:
            raise AssertionError("the packer never settles")
        state = Packs(self.storage, "memory:/ckpt").read()
        logical = self._logical(state, self._loose())
        assert set(logical) == set(self.files), (
            f"extra {sorted(set(logical) - set(self.files))[:5]}, "
            f"missing {sorted(set(self.files) - set(logical))[:5]}")
        dead = state.dead
        for pack in state.packs:
            assert any((pack.name, m.rel) not in dead for m in pack.members), \
                f"{pack.name} holds only dead members"
        stored, live = rules.amplification(state.packs, dead)
        assert stored <= self.bound * max(live, 1), f"{stored} bytes stored for {live} live"


TestPackModel = PackModel.TestCase
TestPackModel.settings = settings(max_examples=400, stateful_step_count=60, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])


def test_encode_decode_round_trip() -> None:
    from spark_steward.streams.packs import TRAILER, decode_index, encode

    body, index = encode([("offsets/3", b"abc", 7), ("state/0/1/4.delta", b"", 9)])
    pack = decode_index("0000000000000001-" + "0" * 32 + ".pack", body[-TRAILER.size:],
                        len(body), lambda o, n: body[o:o + n])
    assert [(m.rel, m.offset, m.length, m.mtime_ms) for m in pack.members] == \
        [("offsets/3", 0, 3, 7), ("state/0/1/4.delta", 3, 0, 9)]


def test_packable_names() -> None:
    assert rules.packable("offsets/0") == 0
    assert rules.packable("commits/12") == 12
    assert rules.packable("state/0/3/5.delta") == 5
    assert rules.packable("state/1/0/left-keyToNumValues/7.snapshot") == 7
    for rel in ("metadata", "offsets/.0.crc", "state/0/0/_metadata/schema", "state/0/3/5.zip",
                "state/0/3/5.changelog", "sources/0/0", "_steward/packs/x", "offsets/1.tmp",
                "state/0/../5.delta", "state/0/1/../5.delta", "/offsets/0", "offsets/0\n"):
        assert rules.packable(rel) is None, rel


def test_eligible_keeps_the_batches_after_the_last_commit() -> None:
    assert rules.eligible("offsets/4", committed=5, keep=1)
    assert not rules.eligible("offsets/5", committed=5, keep=1)
    assert rules.eligible("state/0/0/5.delta", committed=5, keep=1)  # batch 4
    assert not rules.eligible("state/0/0/6.delta", committed=5, keep=1)
    assert not rules.eligible("offsets/0", committed=None, keep=0)


def test_newest_live_member_wins() -> None:
    old = rules.Pack("0000000000000001-" + "0" * 32 + ".pack",
                     (rules.Member("0000000000000001-" + "0" * 32 + ".pack", "offsets/1", 0, 1,
                                   0, 1),))
    new = rules.Pack("0000000000000002-" + "0" * 32 + ".pack",
                     (rules.Member("0000000000000002-" + "0" * 32 + ".pack", "offsets/1", 0, 2,
                                   0, 2),))
    assert rules.live_members([new, old], set())["offsets/1"].pack == new.name
    assert rules.live_members([new, old], {(new.name, "offsets/1")})["offsets/1"].pack == old.name


def _compaction_due() -> PackModel:
    """A location whose next cycle compacts: a lagging partition keeps packs partly alive."""
    model = PackModel()
    for _ in range(2):
        model.run_batch()
    for _ in range(4):
        model.run_batch()
        model.pack()
        model.time_passes(GRACE)
    model.pack()
    model.spark_retention(cached=False, lagging=True)
    model.spark_retention(cached=False, lagging=True)
    model.time_passes(GRACE)
    return model


@pytest.mark.parametrize("op", ["pipe_file", "rm", "rm_file", "cat_file"])
@pytest.mark.parametrize("after", range(8))
@pytest.mark.parametrize("landed", [False, True])
def test_a_crash_anywhere_in_a_compacting_cycle_loses_nothing(op: str, after: int,
                                                              landed: bool) -> None:
    probe = _compaction_due()
    probe.packer.cycle()
    assert Packs(probe.storage, "m").read().moved, "the scenario does not compact"
    model = _compaction_due()
    model.crash_mid_cycle(op, after, landed)
    model.spark_sees_its_files()
    model.teardown()


def test_a_compaction_copy_left_by_a_crash_does_not_keep_both_packs() -> None:
    """Found by the model: a compaction's copy lands, the driver dies before the catalog; the
    next packer settles the copy and its source against the loose copies the source still had,
    so both hold the same files live. The newer settled copy shadows the older one, and the
    packs get back under the space-amplification bound (they stayed at 1.55x of it)."""
    model = PackModel()
    for _ in range(4):
        model.run_batch()
    model.pack()
    model.time_passes(seconds=GRACE)
    model.spark_retention(cached=False, lagging=False)
    model.crash_mid_cycle(op="pipe_file", after=0, landed=True)
    model.spark_sees_its_files()
    model.teardown()
