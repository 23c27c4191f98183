"""The ``cleanup`` field of application records, as a broken or hostile neighbour leaves it.

Records are rewritten every heartbeat and read by every other application's ``status`` and
``gc``: the field must stay small however much cleanup an application gives up on, and any
value in it must leave the rest of the record readable (the field only informs).
"""

from __future__ import annotations

import json

import pytest

from spark_steward.applications import (ERROR_CHARS_KEPT, GIVEN_UP_KEPT, ApplicationRegistry,
                                        CleanupBacklog, GivenUp)
from spark_steward.storage import Storage


def test_a_record_keeps_the_first_given_up_and_counts_the_rest() -> None:
    backlog = CleanupBacklog(3, 10.0, 2, tuple(GivenUp(f"p{i}", "e" * 10_000)
                                               for i in range(5000)))
    kept = backlog.bounded()
    assert len(kept.given_up) == GIVEN_UP_KEPT and kept.given_up_count == 5000
    assert {len(g.error) for g in kept.given_up} == {ERROR_CHARS_KEPT}
    assert (kept + kept).given_up_count == 10_000
    assert len(json.dumps(kept.__dict__, default=lambda o: o.__dict__)) < 70_000


@pytest.mark.parametrize("cleanup", [
    "not a dict", 7, [], {"pending": "many"}, {"pending": -1}, {"retries": 1e400},
    {"pending": float("inf")}, {"given_up": "abc"}, {"given_up": {"what": "x"}},
    {"given_up": [{"what": "x"}]}, {"given_up": [7]}, {"oldest_pending_at": "soon"},
    {"given_up_total": -5},
])
def test_any_value_of_the_field_leaves_the_record_readable(tmp_path: object,
                                                           cleanup: object) -> None:
    storage = Storage.from_url(str(tmp_path))
    registry = ApplicationRegistry(storage, heartbeat_timeout=60)
    record = registry.new_record("app-1", "x")
    registry.write(record)
    body = storage.read_record(registry.record_path("app-1"))
    body["cleanup"] = cleanup
    storage.write_record(registry.record_path("app-1"), body)
    read = registry.read("app-1")
    assert read is not None and read.app_id == "app-1" and read.cleanup is None
    assert [r.app_id for r in registry.all()] == ["app-1"]


def test_a_huge_given_up_list_is_read_bounded(tmp_path: object) -> None:
    storage = Storage.from_url(str(tmp_path))
    registry = ApplicationRegistry(storage, heartbeat_timeout=60)
    registry.write(registry.new_record("app-1", "x"))
    body = storage.read_record(registry.record_path("app-1"))
    body["cleanup"] = {"pending": 1, "given_up": [{"what": f"p{i}", "error": "x" * 2000}
                                                  for i in range(20_000)]}
    storage.write_record(registry.record_path("app-1"), body)
    read = registry.read("app-1")
    assert read is not None and read.cleanup is not None
    assert len(read.cleanup.given_up) == GIVEN_UP_KEPT
    assert read.cleanup.given_up_count == 20_000
    assert max(len(g.error) for g in read.cleanup.given_up) == ERROR_CHARS_KEPT
