"""How ``pytest -n N`` (pytest-xdist) shares the suite among its workers.

A file is the unit of work: its module fixtures (a crash matrix, a background streaming job)
start their applications once, on one worker. The multi-host harness of ``tests/cluster`` is
one per run (one set of namespaces, one address range), so that folder is a single unit. Units
are handed out longest first (the longest-processing-time rule), from the durations recorded in
``tests/durations.json``, after every unit of the folders whose tests want a process without a
Spark session (WITHOUT_SESSION). A file missing there gets its folder's typical figure, so a
new test is only scheduled less well, never lost. ``python -m tests.support.schedule REPORT``
rewrites the durations from a run's ``--junitxml`` report.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path
from typing import Any

DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"
#: Seconds a file of a folder not yet in DURATIONS is assumed to take.
FOLDER_DEFAULT = {"tests/unit": 2.0, "tests/conformance": 5.0, "tests/integration": 10.0,
                  "tests/spark": 60.0, "tests/faults": 90.0, "tests/compat": 120.0,
                  "tests/cluster": 120.0}
CLUSTER = "tests/cluster"
#: Folders whose tests assume no Spark session in their process (no attached runtime, logging
#: as pytest left it): handed out first, before any worker has started the shared session.
WITHOUT_SESSION = ("tests/unit/", "tests/integration/", "tests/conformance/")


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its file, or the whole cluster folder."""
    path = nodeid.split("::", 1)[0]
    return CLUSTER if path.startswith(CLUSTER + "/") else path


def estimate(unit: str, recorded: dict[str, float]) -> float:
    if unit == CLUSTER:
        return sum(s for path, s in recorded.items() if path.startswith(CLUSTER + "/")) \
            or FOLDER_DEFAULT[CLUSTER]
    if unit in recorded:
        return recorded[unit]
    folder = "/".join(unit.split("/")[:2])
    return FOLDER_DEFAULT.get(folder, 30.0)


def load_durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()}


def longest_first(nodeids: list[str], recorded: dict[str, float]) -> list[str]:
    """``nodeids`` grouped by unit, units by estimated seconds (longest first), each unit's
    tests in their collected order; the folders of WITHOUT_SESSION before all others."""
    first_seen: dict[str, int] = {}
    for index, nodeid in enumerate(nodeids):
        first_seen.setdefault(unit_of(nodeid), index)
    cost = {unit: estimate(unit, recorded) for unit in first_seen}
    order = {nodeid: index for index, nodeid in enumerate(nodeids)}

    def key(nodeid: str) -> tuple[bool, float, int, int]:
        unit = unit_of(nodeid)
        return (not unit.startswith(WITHOUT_SESSION), -cost[unit], first_seen[unit],
                order[nodeid])

    return sorted(nodeids, key=key)


def make_scheduler(config: Any, log: Any) -> Any:
    """The xdist scheduler of this suite (see the module docstring)."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirstScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def schedule(self) -> None:
            # LoadScopeScheduling.schedule with the work queue in longest_first order. The
            # workers' collections stay as they are: work is sent as indexes into them.
            assert self.collection_is_completed
            if self.collection is not None:
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            for nodeid in longest_first(self.collection, load_durations()):
                self.workqueue.setdefault(unit_of(nodeid), {})[nodeid] = False
            for _ in range(len(self.nodes) - len(self.workqueue)):
                unused, _assigned = self.assigned_work.popitem()
                unused.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()

    return LongestFirstScheduling(config, log)


def durations_from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file (per ``tests/...`` path) from a ``--junitxml`` report."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "")
        parts = module.split(".")
        # classname is "tests.unit.test_x" or "tests.unit.test_x.TestClass"
        for end in range(len(parts), 0, -1):
            candidate = "/".join(parts[:end]) + ".py"
            if (DURATIONS.parent.parent / candidate).is_file():
                seconds[candidate] += float(case.get("time", 0) or 0)
                break
    return {path: round(s, 1) for path, s in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.schedule JUNIT.xml")
    DURATIONS.write_text(json.dumps(durations_from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {DURATIONS}")
