"""Fixtures shared by the unit tests: fresh storage roots and a hand-driven clock."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from pathlib import Path
import time
from typing import Callable, Hashable, Iterator

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from spark_steward.cleaner import RetryingCleaner
from spark_steward.errors import StorageError
from spark_steward.lifecycle.cleanup_schedule import CleanupSchedule
from spark_steward.lifecycle.retry import RetryStrategy
from spark_steward.storage import Storage
from tests.unit.failing_fs import FailingFileSystem, failing_storage

# Hypothesis keeps nothing in the checkout: no example database, caches in a temp dir.
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="spark-steward-hypothesis-")
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
settings.register_profile("spark-steward-unit", database=None, deadline=None)
settings.load_profile("spark-steward-unit")


class FakeClock:
    """A clock the test moves by hand; pass the instance wherever a ``time.time`` goes."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory_storage() -> Iterator[Storage]:
    """A memory:// root no other test uses; removed afterwards (the memory fs is process-wide)."""
    storage = Storage.from_url(f"memory://t-{uuid.uuid4().hex}")
    yield storage
    if storage.fs.exists(storage.root):
        storage.fs.rm(storage.root, recursive=True)


@pytest.fixture
def local_storage(tmp_path: Path) -> Storage:
    return Storage.from_url(str(tmp_path / "root"))


@pytest.fixture(params=["memory", "local"])
def storage(request: pytest.FixtureRequest) -> Storage:
    """The same test against memory:// and a local directory."""
    return request.getfixturevalue(f"{request.param}_storage")  # type: ignore[no-any-return]


# When a property fails, hypothesis's pytest plugin imports libcst to suggest a patch, and that
# import trips a DeprecationWarning inside mypy_extensions. Under filterwarnings=error the
# warning would turn one failing property into an INTERNALERROR that ends the whole run, hiding
# the real failure; ignore just that warning for hypothesis tests.
_LIBCST_IMPORT_WARNING = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and getattr(getattr(item, "obj", None),
                                                 "is_hypothesis_test", False):
            item.add_marker(_LIBCST_IMPORT_WARNING)


class Liveness:
    """``is_dead`` over a fixed set of dead applications, recording what it was asked."""

    def __init__(self, *dead: str) -> None:
        self.dead = set(dead)
        self.asked: list[str] = []

    def __call__(self, app: str) -> bool:
        self.asked.append(app)
        return app in self.dead


def until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Polls ``condition`` until it holds or ``timeout`` passes; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


def break_delete(monkeypatch: pytest.MonkeyPatch, broken: str) -> Callable[[], None]:
    """Makes ``Storage.delete(broken)`` fail with an injected StorageError; returns a function
    that lets it work again."""
    real_delete = Storage.delete

    def delete(self: Storage, rel: str) -> bool:
        if rel == broken:
            raise StorageError(f"could not delete {self.url_of(rel)}: injected")
        return real_delete(self, rel)

    monkeypatch.setattr(Storage, "delete", delete)
    return lambda: monkeypatch.setattr(Storage, "delete", real_delete)


# -- the store tests' harness: a cleaner the test drives, a filesystem that fails on command ----


class ManualCleaner:
    """RetryingCleaner's contract without threads: due actions run when the test says so."""

    def __init__(self, strategy: RetryStrategy, clock: FakeClock) -> None:
        self.clock = clock
        self.schedule: CleanupSchedule[Hashable] = CleanupSchedule(strategy, clock)
        self.actions: dict[Hashable, Callable[[], None]] = {}
        self.errors: list[tuple[Hashable, Exception]] = []
        self.closed = False

    def submit(self, key: Hashable, action: Callable[[], None]) -> bool:
        if self.closed or key in self.actions:
            return False
        self.actions[key] = action
        self.schedule.submit(key)
        return True

    def run_due(self) -> int:
        """Runs what is due now; returns how many actions ran."""
        due = self.schedule.due()
        for key in due:
            try:
                self.actions[key]()
            except Exception as exc:  # noqa: BLE001 - the cleaner retries everything
                self.errors.append((key, exc))
                if self.schedule.failed(key, f"{type(exc).__name__}: {exc}") is None:
                    del self.actions[key]
            else:
                self.schedule.succeeded(key)
                del self.actions[key]
        return len(due)

    def run_until_idle(self, rounds: int = 50) -> None:
        """Runs every action, moving the clock to each retry, until nothing is outstanding."""
        for _ in range(rounds):
            self.run_due()
            wait = self.schedule.next_due_in()
            if wait is None:
                return
            self.clock.advance(wait)
        raise AssertionError(f"cleanup still outstanding: {self.schedule.outstanding()}")

    def outstanding(self) -> list[Hashable]:
        return self.schedule.outstanding()

    def given_up(self) -> dict[Hashable, str]:
        return {k: t.last_error for k, t in self.schedule.given_up.items()}

    def close(self, timeout: float) -> list[Hashable]:
        self.closed = True
        return self.schedule.outstanding() + list(self.schedule.given_up)


@pytest.fixture
def fs(clock: FakeClock) -> FailingFileSystem:
    return FailingFileSystem(clock=clock)


@pytest.fixture
def st(fs: FailingFileSystem) -> Storage:
    return failing_storage(fs)[0]  # rooted at /steward


@pytest.fixture
def cleaner(clock: FakeClock) -> ManualCleaner:
    return ManualCleaner(RetryStrategy.fixed(1.0), clock)


@pytest.fixture
def real_cleaners() -> Iterator[Callable[[RetryStrategy], RetryingCleaner[Hashable]]]:
    """Real cleaners (IO pool + scheduler thread) a test builds; closed afterwards."""
    made: list[RetryingCleaner[Hashable]] = []

    def build(strategy: RetryStrategy) -> RetryingCleaner[Hashable]:
        made.append(RetryingCleaner(strategy, threads=2))
        return made[-1]

    yield build
    for c in made:
        c.close(0)
