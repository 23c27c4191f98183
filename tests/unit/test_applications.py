"""applications.py: records over memory:// storage with a fake clock, host and process probe."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from spark_steward.applications import (
    ApplicationRecord,
    ApplicationRegistry,
    pid_namespace,
    process_alive,
    process_start_ticks,
    this_place,
    validate_app_id,
)
from spark_steward.errors import RecordCorrupt, StewardError, StorageError
from spark_steward.lifecycle.liveness import IDENTITY_FORMAT, Liveness
from spark_steward.storage import Storage
from tests.support.mounts import tmpfs
from tests.unit.conftest import FakeClock

TIMEOUT = 60.0
HOST = "driver-host"


class Probe:
    def __init__(self) -> None:
        self.alive = True

    def __call__(self, pid: int, pid_start: int | None) -> bool:
        return self.alive


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def registry(memory_storage: Storage, clock: FakeClock, probe: Probe) -> ApplicationRegistry:
    return ApplicationRegistry(memory_storage, heartbeat_timeout=TIMEOUT, clock=clock,
                               this_host=HOST, probe=probe)


def _other_host(registry: ApplicationRegistry, clock: FakeClock) -> ApplicationRegistry:
    return ApplicationRegistry(registry.storage, heartbeat_timeout=TIMEOUT, clock=clock,
                               this_host="somewhere-else", probe=registry.probe)


# -- records ------------------------------------------------------------------------------------


def test_new_record_describes_this_process(registry: ApplicationRegistry, clock: FakeClock
                                           ) -> None:
    record = registry.new_record("app-1", "etl", spark_version="4.0.0", steward_version="0.1.0")
    assert record.app_id == "app-1" and record.app_name == "etl"
    assert record.host == HOST and record.pid == os.getpid()
    assert record.pid_start == process_start_ticks(os.getpid())
    assert record.started_at == record.heartbeat_at == clock.now
    assert record.finished_at is None and not record.finished
    assert record.spark_version == "4.0.0" and record.steward_version == "0.1.0"
    assert record.driver.host == HOST and record.driver.pid == os.getpid()


def test_write_read_heartbeat_finish_round_trip(registry: ApplicationRegistry,
                                                clock: FakeClock) -> None:
    record = registry.new_record("app-1", "etl")
    registry.write(record)
    assert registry.read("app-1") == record
    assert registry.storage.read_record("applications/app-1.json") == asdict(record)

    clock.advance(10)
    beat = registry.heartbeat(record)
    assert beat.heartbeat_at == clock.now and beat.started_at == record.started_at
    assert registry.read("app-1") == beat

    clock.advance(5)
    done = registry.finish(beat)
    assert done.finished and done.finished_at == done.heartbeat_at == clock.now
    assert registry.read("app-1") == done
    assert registry.all() == [done]


def test_writing_into_a_read_only_storage_dir_names_the_dir_and_the_user(
        tmp_path: Path, clock: FakeClock) -> None:
    with tmpfs(tmp_path / "read-only", "ro,size=1m") as storage_dir:
        registry = ApplicationRegistry(Storage.from_url(str(storage_dir)),
                                       heartbeat_timeout=TIMEOUT, clock=clock)
        with pytest.raises(StorageError) as info:
            registry.write(registry.new_record("app-1", "n"))
        message = str(info.value)
        assert f"storage dir {storage_dir} is not writable by user" in message, message
        assert f"uid {os.geteuid()}" in message and "choose another storage dir" in message
        assert list(storage_dir.iterdir()) == []


def test_read_missing_is_none(registry: ApplicationRegistry) -> None:
    assert registry.read("never-written") is None
    assert registry.all() == []


def test_read_ignores_fields_from_a_newer_version(registry: ApplicationRegistry) -> None:
    record = registry.new_record("app-new", "n")
    registry.storage.write_record("applications/app-new.json",
                                  {**asdict(record), "added_in_v2": {"x": 1}})
    assert registry.read("app-new") == record


def test_all_skips_a_corrupt_record_with_a_warning(registry: ApplicationRegistry,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    a = registry.new_record("app-a", "a")
    b = registry.new_record("app-b", "b")
    registry.write(a)
    registry.write(b)
    registry.storage.write_atomic("applications/x.json", b"\x00garbage{")
    registry.storage.write_atomic("applications/notes.txt", b"not a record, not .json")
    with caplog.at_level(logging.WARNING, logger="spark_steward.applications"):
        found = registry.all()
    assert sorted(found, key=lambda r: r.app_id) == [a, b]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "x.json" in warnings[0] and "not readable" in warnings[0]


def test_all_skips_a_record_missing_fields(registry: ApplicationRegistry,
                                           caplog: pytest.LogCaptureFixture) -> None:
    good = registry.new_record("good", "g")
    registry.write(good)
    registry.storage.write_record("applications/partial.json", {"app_id": "partial"})
    with caplog.at_level(logging.WARNING, logger="spark_steward.applications"):
        assert registry.all() == [good]
    assert "partial.json" in caplog.text


def test_all_skips_a_record_with_an_unsafe_name(registry: ApplicationRegistry,
                                                caplog: pytest.LogCaptureFixture) -> None:
    good = registry.new_record("good", "g")
    registry.write(good)
    registry.storage.write_record("applications/bad name.json", asdict(good))
    with caplog.at_level(logging.WARNING, logger="spark_steward.applications"):
        assert registry.all() == [good]
    assert "bad name.json" in caplog.text


@pytest.mark.parametrize("body", [[1, 2], None])
def test_all_skips_a_verified_record_whose_body_is_not_an_object(
        registry: ApplicationRegistry, caplog: pytest.LogCaptureFixture, body: object) -> None:
    good = registry.new_record("good", "g")
    registry.write(good)
    registry.storage.write_record("applications/odd.json", body)
    with caplog.at_level(logging.WARNING, logger="spark_steward.applications"):
        assert registry.all() == [good]
    assert "odd.json" in caplog.text


# -- liveness over time -------------------------------------------------------------------------


def test_liveness_follows_the_clock(registry: ApplicationRegistry, clock: FakeClock) -> None:
    record = registry.new_record("app-1", "n")
    registry.write(record)
    elsewhere = _other_host(registry, clock)
    stored = elsewhere.read("app-1")
    assert stored is not None
    assert elsewhere.liveness(stored) is Liveness.LIVE

    clock.advance(TIMEOUT)
    assert elsewhere.liveness(stored) is Liveness.LIVE
    clock.advance(0.5)
    assert elsewhere.liveness(stored) is Liveness.CRASHED

    beat = registry.heartbeat(record)
    stored = elsewhere.read("app-1")
    assert stored == beat and elsewhere.liveness(stored) is Liveness.LIVE

    done = registry.finish(beat)
    clock.advance(TIMEOUT * 100)
    stored = elsewhere.read("app-1")
    assert stored == done and elsewhere.liveness(stored) is Liveness.FINISHED


def test_dead_driver_on_this_host_is_crashed_at_once(registry: ApplicationRegistry,
                                                     probe: Probe) -> None:
    record = registry.new_record("app-1", "n")
    registry.write(record)
    assert registry.liveness(record) is Liveness.LIVE
    probe.alive = False
    assert registry.liveness(record) is Liveness.CRASHED
    # Another host cannot see the process and goes by the (fresh) heartbeat.
    assert _other_host(registry, registry.clock).liveness(record) is Liveness.LIVE  # type: ignore
    assert registry.liveness(registry.finish(record)) is Liveness.FINISHED


# -- ids and owned folders --------------------------------------------------------------------------


@pytest.mark.parametrize("app_id", ["app-20240101123456-0001", "local-1700000000000",
                                    "application_1700000000000_0001", "a", "A.b_c-1"])
def test_valid_app_ids(app_id: str) -> None:
    assert validate_app_id(app_id) == app_id
    assert ApplicationRegistry.record_path(app_id) == f"applications/{app_id}.json"
    assert ApplicationRegistry.owned_path(app_id) == f"apps/{app_id}"


@pytest.mark.parametrize("app_id", ["../x", "a/b", "", "..", ".hidden", "a\\b", "a b", "-x",
                                    "x" * 202, "a\x00b", "abc\n", "\nabc"])
def test_unsafe_app_ids_are_rejected(app_id: str) -> None:
    with pytest.raises(StewardError) as info:
        validate_app_id(app_id)
    assert repr(app_id) in str(info.value)


def test_registry_refuses_unsafe_ids(registry: ApplicationRegistry) -> None:
    with pytest.raises(StewardError):
        registry.new_record("../escape", "n")
    with pytest.raises(StewardError):
        registry.read("a/b")
    with pytest.raises(StewardError):
        registry.owned_usage("../..")
    record = replace(registry.new_record("ok", "n"), app_id="../escape")
    with pytest.raises(StewardError):
        registry.write(record)
    assert registry.storage.list_names() == []


def test_owned_usage_per_folder(registry: ApplicationRegistry) -> None:
    storage = registry.storage
    storage.write_atomic("apps/app-1/shuffle/a", b"x" * 3)
    storage.write_atomic("apps/app-1/shuffle/sub/b", b"x" * 4)
    storage.write_atomic("apps/app-1/cache/c", b"x" * 5)
    storage.write_atomic("apps/app-2/cache/d", b"x" * 100)
    storage.write_atomic("apps/app-10/cache/e", b"x" * 1000)
    assert registry.owned_usage("app-1") == {"cache": (1, 5), "shuffle": (2, 7)}
    assert registry.owned_usage("app-2") == {"cache": (1, 100)}
    assert registry.owned_usage("app-3") == {}


# -- the real process probe ------------------------------------------------------------------------


def test_this_process_is_alive() -> None:
    pid = os.getpid()
    ticks = process_start_ticks(pid)
    assert ticks is not None and ticks > 0
    assert process_alive(pid, ticks) is True
    assert process_alive(pid, None) is True


def test_reused_pid_is_detected_by_its_start_ticks() -> None:
    pid = os.getpid()
    ticks = process_start_ticks(pid)
    assert ticks is not None
    assert process_alive(pid, ticks + 1) is False


def test_exited_process_is_not_alive() -> None:
    child = subprocess.Popen(["true"])
    ticks = process_start_ticks(child.pid)
    assert child.wait(timeout=10) == 0
    assert process_alive(child.pid, ticks) is False
    assert process_alive(child.pid, None) is False
    assert process_start_ticks(child.pid) is None


def test_a_zombie_is_not_alive() -> None:
    """A driver whose parent JVM was SIGKILLed stays a zombie where pid 1 does not reap: it
    answers signal 0 and keeps its start time, yet it is dead."""
    child = subprocess.Popen(["true"])
    ticks = process_start_ticks(child.pid)
    try:
        deadline = time.monotonic() + 10
        while (open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
               and time.monotonic() < deadline):
            time.sleep(0.01)
        os.kill(child.pid, 0)                           # still there: not reaped
        assert process_start_ticks(child.pid) == ticks  # and the same process
        assert process_alive(child.pid, ticks) is False
        assert process_alive(child.pid, None) is False
    finally:
        child.wait(timeout=10)


def test_start_ticks_of_a_missing_pid_is_none() -> None:
    assert process_start_ticks(2 ** 22 + 12345) is None


def test_record_is_a_plain_dataclass() -> None:
    record = ApplicationRecord("a", "n", "h", 1, None, 1.0, 2.0)
    assert record.finished_at is None and not record.finished
    assert replace(record, finished_at=3.0).finished


# -- where the driver runs ----------------------------------------------------------------------


def test_new_record_carries_the_driver_identity(registry: ApplicationRegistry) -> None:
    record = registry.new_record("app-id", "etl")
    here = this_place()
    assert (record.boot_id, record.pid_ns) == (here.boot_id, here.pid_ns)
    assert record.boot_id and record.pid_ns.startswith("pid:[")
    assert record.identity_format == IDENTITY_FORMAT
    assert registry.read("app-id") is None
    registry.write(record)
    assert registry.read("app-id") == record


def test_pid_namespace_is_unknown_when_proc_belongs_to_another_namespace() -> None:
    # /proc/self of a /proc mounted for another PID namespace is not this pid.
    script = ("from spark_steward.applications import pid_namespace, boot_id;"
              "print(repr(pid_namespace()), bool(boot_id()))")
    inside = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", script],
                            capture_output=True, text=True)
    if inside.returncode != 0:
        pytest.skip(f"cannot create a PID namespace here: {inside.stderr.strip()[:200]}")
    assert inside.stdout.split() == ["''", "True"]
    mounted = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                              "-c", script], capture_output=True, text=True, check=True)
    ns, has_boot = mounted.stdout.split()
    assert ns.startswith("'pid:[") and ns != repr(pid_namespace()) and has_boot == "True"


def test_a_record_from_before_identities_is_judged_by_its_heartbeat(
        registry: ApplicationRegistry, clock: FakeClock, probe: Probe) -> None:
    old = {k: v for k, v in asdict(registry.new_record("old-app", "o")).items()
           if k not in ("boot_id", "pid_ns", "identity_format")}
    registry.storage.write_record("applications/old-app.json", old)
    record = registry.read("old-app")
    assert record is not None and record.identity_format == 0
    probe.alive = False   # same host name, but nothing says the pid is comparable
    assert registry.liveness(record) is Liveness.LIVE and not registry.is_dead("old-app")
    clock.advance(TIMEOUT + 1)
    assert registry.liveness(record) is Liveness.CRASHED and registry.is_dead("old-app")


def test_an_unknown_identity_format_is_left_alone_with_a_warning(
        registry: ApplicationRegistry, clock: FakeClock, probe: Probe,
        caplog: pytest.LogCaptureFixture) -> None:
    future = replace(registry.finish(registry.new_record("future", "f")), identity_format=2)
    registry.write(future)
    probe.alive = False
    clock.advance(TIMEOUT * 100)
    with caplog.at_level(logging.WARNING, logger="spark_steward.applications"):
        assert registry.liveness(future) is Liveness.UNKNOWN
        assert not registry.is_dead("future")
    assert "future" in caplog.text and "identity format 2" in caplog.text


@pytest.mark.parametrize("field,value", [("boot_id", 7), ("pid_ns", None),
                                         ("identity_format", "1"), ("pid", True),
                                         ("heartbeat_at", "soon")])
def test_a_record_with_a_field_of_the_wrong_type_is_corrupt_and_not_dead(
        registry: ApplicationRegistry, clock: FakeClock, field: str, value: object) -> None:
    body = {**asdict(registry.new_record("odd", "o")), field: value}
    registry.storage.write_record("applications/odd.json", body)
    with pytest.raises(RecordCorrupt, match=field):
        registry.read("odd")
    clock.advance(TIMEOUT * 100)
    assert not registry.is_dead("odd")
