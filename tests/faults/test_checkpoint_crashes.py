"""SIGKILL a real driver at many points of the checkpoint lifecycle (inside save, inside the
write job, between each cleanup step, while owning Spark's own checkpoints), then attach again
or run ``spark-steward gc``; afterwards no file is left that no entry owns, and every completed
checkpoint that must survive restores with its rows.

The points are the ones only a real driver has (the write jobs, Spark's own checkpoints, the
stop that discards them, recovery by a second driver); every storage step of a series' saves
and discards is killed in tests/unit/test_checkpoint_crash_model.py, with no Spark.

Each case runs ``scripts/checkpoint_crash.py`` under spark-submit (``local[2]``: the driver is
what is killed, and 18 runs on 2 cores must stay short) against its own storage dir; the
script SIGKILLs itself at the K-th pass of a probe. Recovery is ``gc``, and for one case of
each phase a second driver that attaches to the same storage (and restores through
``checkpoints("s")``).
Cases run in the background, PARALLEL at a time, while the tests check them in order; every
surviving checkpoint is also read back from its artifact in the shared session.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.data import DataFile, hadoop_url, read_dataframe
from spark_steward.storage import Storage
from tests.spark.conftest import spark_submit_path
from tests.support.checkpoint_audit import owned_files
from tests.support.class_cache import QUICK_JVM, ensure_archive

SCRIPT = Path(__file__).parent / "scripts" / "checkpoint_crash.py"
MASTER = "local[2]"
#: Crash runs at once; spark-submit start-up is mostly waiting, so 2 cores take 2 well.
PARALLEL = int(os.environ.get("STEWARD_CRASH_PARALLEL", "2"))
RUN_TIMEOUT = 240.0


@dataclass(frozen=True)
class Case:
    point: str
    k: int
    recovery: str  # "gc" or "attach"

    @property
    def id(self) -> str:
        name = re.sub(r"[^A-Za-z0-9]+", "-", self.point).strip("-")
        return f"{name}{'' if self.k == 1 else f'-{self.k}'}-{self.recovery}"


_POINTS: list[tuple[str, int]] = [
    # Spark's own checkpoints (sc.setCheckpointDir, df.checkpoint(), rdd.checkpoint())
    ("rename:entry:ctx:pending", 1),       # Spark made <dir>/<uuid>; its entry not yet durable
    ("after:entry:ctx:pending", 1),        # <dir>/<uuid> registered, nothing in it
    ("job:sparkcp", 1),                    # inside df.checkpoint()'s write job
    ("after:entry:rdd:pending", 1),        # df.checkpoint() written, its entry pending
    ("after:entry:rdd:completed", 1),      # ... and completed
    ("after:entry:rdd:pending", 2),        # rdd.checkpoint() marked, not written yet
    # inside save 1: the executors' write job, and the completed artifact (attach)
    ("job:s/1", 1),
    ("after:artifact:s/1", 1),             # artifact durable, entry still pending
    # the discard of subsumed s/1 while save 4 runs: half deleted (attach), and save 4's
    # write job with the cleaner's threads at work
    ("unlink:s/1", 3),
    ("job:s/4", 1),
    # spark.stop(): Spark's own checkpoints discarded
    ("after:entry:ctx:marked-for-deletion", 1),
    ("unlink:spark", 6),                   # Spark's folders half deleted
    ("after:rm-data:rdd", 1),
    ("after:rm-data:ctx", 1),
]
#: Every other storage step of series ``s`` (each entry, artifact and part file written, each
#: rename, each delete of a discard) is killed in tests/unit/test_checkpoint_crash_model.py,
#: without Spark, at every step rather than at a sample. These points were here before it:
#: rename:entry:s/1:pending, after:entry:s/1:pending, after:write-data:s/1,
#: rename:artifact:s/1, rename:entry:s/1:completed, after:entry:s/1:completed,
#: after:entry:s/3:completed, rename:entry:s/1:marked-for-deletion,
#: after:entry:s/1:marked-for-deletion, after:rm-data:s/1, after:rm-artifact:s/1,
#: after:rm-entry:s/1, after:entry:s/2:marked-for-deletion, after:rm-data:s/2.
#: Recovered by a second driver that attaches (and restores through ``checkpoints("s")``): one
#: case per phase (Spark's own checkpoints, inside a save, a discard, the stop). Every other case
#: is recovered by ``spark-steward gc``, which needs no JVM and runs the same failover
#: (``CheckpointStore.recover``) an attach runs.
ATTACH_CASES = {("after:entry:ctx:pending", 1), ("after:artifact:s/1", 1), ("unlink:s/1", 3),
                ("unlink:spark", 6)}
CASES = [Case(point, k, "attach" if (point, k) in ATTACH_CASES else "gc") for point, k in _POINTS]


# -- running the cases ------------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    root: Path
    crash: subprocess.CompletedProcess[str]
    recovery: subprocess.CompletedProcess[str]
    seconds: float

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def sparkcp(self) -> Path:
        return self.root / "sparkcp"

    def log(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def describe(self) -> str:
        def tail(text: str) -> str:
            lines = [line for line in text.splitlines() if " INFO " not in line]
            return "\n".join(lines[-25:])

        return (f"case {self.case}: crash rc={self.crash.returncode}, recovery "
                f"rc={self.recovery.returncode}\n--- crash stderr\n{tail(self.crash.stderr)}\n"
                f"--- recovery stdout\n{self.recovery.stdout[-3000:]}\n--- recovery stderr\n"
                f"{tail(self.recovery.stderr)}")


class Submitter:
    """spark-submit runs of the script with the steward conf (``spark-steward conf`` run once,
    each case's storage and local dir put in)."""

    def __init__(self) -> None:
        out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--storage",
                              "file:///STORAGE-PLACEHOLDER", "--local-dir", "/LOCAL-PLACEHOLDER"],
                             check=True, capture_output=True, text=True).stdout.split()
        assert any("STORAGE-PLACEHOLDER" in item for item in out)
        self.template = out
        # --driver-java-options replaces the run's defaults (tests/support/class_cache.py),
        # so they are repeated: quick-start options and the suite's class archive.
        archive = ensure_archive()
        self.java_options = QUICK_JVM + (f" -XX:SharedArchiveFile={archive}" if archive else "")

    def run(self, root: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
        flags = [item.replace("file:///STORAGE-PLACEHOLDER", (root / "storage").as_uri())
                     .replace("/LOCAL-PLACEHOLDER", str(root / "local"))
                 for item in self.template]
        cmd = [spark_submit_path(), "--master", MASTER,
               "--driver-java-options", self.java_options,
               "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
               *flags, "--conf", "spark.steward.checkpoints.orphan-grace=0s",
               # the one-file-per-partition layout these probes and checks know (merged saves:
               # test_merged_crash.py)
               "--conf", "spark.steward.checkpoints.file-merging.enabled=false",
               str(SCRIPT), str(out), str(root / "sparkcp"), *args]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)

    def gc(self, root: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "spark_steward.cli", "gc", "--storage",
                               (root / "storage").as_uri(), "--orphan-grace", "0s", "--json"],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)


def _run_case(submitter: Submitter, case: Case, root: Path) -> Outcome:
    started = time.monotonic()
    root.mkdir(parents=True)
    crash = submitter.run(root, root / "crash.jsonl", "crash", case.point, str(case.k))
    recovery = submitter.gc(root) if case.recovery == "gc" else \
        submitter.run(root, root / "attach.jsonl", "attach")
    return Outcome(case, root, crash, recovery, time.monotonic() - started)


class CrashRunner:
    """Runs every case in the background, PARALLEL at a time, in CASES order."""

    def __init__(self, base: Path) -> None:
        submitter = Submitter()
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="crash-case")
        self.futures: dict[Case, Future[Outcome]] = {
            case: self._pool.submit(_run_case, submitter, case, base / f"{i:02d}-{case.id}")
            for i, case in enumerate(CASES)}
        self.started = time.monotonic()

    def outcome(self, case: Case) -> Outcome:
        return self.futures[case].result(timeout=2 * RUN_TIMEOUT * len(CASES))

    def close(self) -> None:
        # -x or a failure: do not start what is left; running cases end within RUN_TIMEOUT.
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def crashes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrashRunner]:
    runner = CrashRunner(tmp_path_factory.mktemp("checkpoint-crashes"))
    try:
        yield runner
    finally:
        runner.close()


# -- what a run left --------------------------------------------------------------------------

def expected_rows(iteration: int) -> list[tuple[int, int, int]]:
    """What checkpoint_crash.py saves in iteration i (see its docstring)."""
    return [(n, iteration, n * iteration) for n in range(500 * iteration)]


def summary(iteration: int) -> list[int]:
    """count, sum(id), min(tag), max(tag), sum(v) of :func:`expected_rows`."""
    count = 500 * iteration
    ids = count * (count - 1) // 2
    return [count, ids, iteration, iteration, ids * iteration]


@dataclass
class Survivors:
    """Which completed checkpoints must, and may, still be there after recovery."""

    must: set[int] = field(default_factory=set)
    may: set[int] = field(default_factory=set)


def survivors(probes: list[str]) -> Survivors:
    """From the probes passed before the kill (a kill happens only at a probe, so what a probe
    says happened did; a step whose ``rename:`` probe passed but whose ``after:`` did not may
    have landed or not: another thread may have been killed in between)."""
    numbers = {int(m.group(1)) for p in probes for m in [re.search(r"s/(\d+)", p)] if m}
    found = Survivors()
    for n in numbers:
        completed = f"after:entry:s/{n}:completed" in probes
        maybe_completed = f"rename:entry:s/{n}:completed" in probes
        marked = f"after:entry:s/{n}:marked-for-deletion" in probes
        maybe_marked = f"rename:entry:s/{n}:marked-for-deletion" in probes
        if completed and not maybe_marked:
            found.must.add(n)
        if maybe_completed and not marked:
            found.may.add(n)
    return found


def files_below(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) \
        if folder.exists() else []


# -- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_crash_leaves_nothing_unowned(case: Case, crashes: CrashRunner, spark: Any) -> None:
    outcome = crashes.outcome(case)
    crash_log = outcome.log("crash.jsonl")
    probes = [e["label"] for e in crash_log if e["event"] == "probe"]
    begun = {e["number"]: e["iteration"] for e in crash_log if e["event"] == "begun"}
    kills = [e for e in crash_log if e["event"] == "killing"]

    # The driver died by SIGKILL at the chosen point, and nowhere else.
    assert kills and kills[0]["point"] == case.point, outcome.describe()
    assert not any(e["event"] == "done" for e in crash_log), outcome.describe()
    assert outcome.crash.returncode != 0, outcome.describe()
    if case.point.startswith("job:s/"):  # killed inside the write job, not after it
        assert f"after:write-data:{case.point[4:]}" not in probes, kills[0]
    if case.point == "job:sparkcp":      # inside df.checkpoint(), before it returned
        assert "after:entry:rdd:pending" not in probes, kills[0]

    # Recovery finished everything it started.
    assert outcome.recovery.returncode == 0, outcome.describe()
    if case.recovery == "gc":
        report = json.loads(outcome.recovery.stdout)
        assert report["ok"], report
    else:
        attach_log = outcome.log("attach.jsonl")
        recovered = [e for e in attach_log if e["event"] == "recovered"]
        assert recovered and recovered[0]["outstanding"] == [] and not recovered[0]["given_up"], \
            outcome.describe()
        assert any(e["event"] == "done" for e in attach_log), outcome.describe()

    # No file that no entry owns, nothing pending or marked; Spark's own folder empty.
    storage = Storage.from_url(outcome.storage.as_uri())
    problems, artifacts = owned_files(storage)
    assert not problems, "\n".join(problems) + "\n" + outcome.describe()
    assert files_below(outcome.sparkcp) == [], outcome.describe()
    if "after:entry:ctx:pending" in probes:  # <dir>/<uuid> was owned: it is gone too
        assert [p.name for p in outcome.sparkcp.iterdir()] == [], outcome.describe()

    # Exactly the completed checkpoints that must survive did (and none that may not)...
    expected = survivors(probes)
    assert expected.must <= set(artifacts) <= expected.may, (sorted(artifacts), expected)
    # ... and each restores with the rows it was saved with: through the public API in the
    # application that attached again, and from the artifact in the shared session.
    if case.recovery == "attach":
        restored = {e["number"]: e["summary"] for e in attach_log if e["event"] == "restored"}
        assert restored == {n: summary(begun[n]) for n in artifacts}, attach_log[-6:]
    for number, artifact in sorted(artifacts.items()):
        files = [DataFile(**f) for f in artifact["files"]]
        url = hadoop_url(storage.url_of(layout.data_path("s", number)))
        df = read_dataframe(spark, url, files, artifact["schema"])
        rows = sorted(tuple(r) for r in df.collect())
        assert rows == expected_rows(begun[number]), f"checkpoint s/{number}"
