"""lifecycle/blob_ledger.py: the driver's FLIP-19 blob bookkeeping, from events to deletions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_steward.blob.lifecycle import (APPLICATION_SCOPE, PENDING_STAGES_KEPT,
                                          RECEIVING_TASKS_KEPT, BlobLedger, Deletion)

S = "s"


@pytest.fixture
def ledger() -> BlobLedger:
    """A ledger with one user scope ``s`` open."""
    ledger = BlobLedger()
    ledger.open_scope(S)
    return ledger


def _empty_inside(ledger: BlobLedger) -> bool:
    return not (ledger._jobs or ledger._stages or ledger._tasks or ledger._running
                or ledger._blobs or ledger._by_scope or len(ledger._refs) or len(ledger._cleanup))


def _assert_consistent(ledger: BlobLedger) -> None:
    """The ledger's maps agree with each other: every back reference has its forward one."""
    blobs, jobs, stages, tasks, refs = (ledger._blobs, ledger._jobs, ledger._stages,
                                        ledger._tasks, ledger._refs)
    assert refs.underflows == 0, "a reference was released that was never taken"
    assert len(refs) == len(blobs) == sum(map(len, ledger._by_scope.values()))
    assert all(key in ledger._by_scope[scope] for scope, key in blobs)
    assert all(ledger._by_scope.values()), "no empty scope entries"
    assert all(not ledger.is_closed(scope) or ledger.running_jobs(scope)
               for scope in ledger._by_scope), "a final scope still has blobs"
    for blob, state in blobs.items():
        assert (refs.count(blob) == 0) == ledger._cleanup.is_waiting(blob), blob
        assert all(blob in jobs[j].held for j in state.jobs), blob
        assert all(blob in stages[s].blobs for s in state.stages), blob
        assert all(blob in tasks[t] for t in state.tasks), blob
        assert state.owner is None or blob in jobs[state.owner].owned, blob
        pending = sum(1 for s in state.stages if not stages[s].jobs)
        assert state.transient or refs.count(blob) >= len(state.jobs) + pending, blob
    assert len(ledger._cleanup) == sum(ledger._cleanup.is_waiting(b) for b in blobs)
    for job_id, job in jobs.items():
        assert all(job_id in blobs[b].jobs for b in job.held), job_id
        assert all(blobs[b].owner == job_id for b in job.owned), job_id
        assert all(job_id in stages[s].jobs for s in job.stages), job_id
    for stage_id, stage in stages.items():
        assert stage.jobs or stage.blobs, f"stage {stage_id} is an empty record"
        assert all(stage_id in blobs[b].stages for b in stage.blobs), stage_id
    for task_id, received in tasks.items():
        assert received and all(task_id in blobs[b].tasks for b in received), task_id
    running: dict[str, int] = {}
    for job in jobs.values():
        running[job.scope] = running.get(job.scope, 0) + 1
    assert running == ledger._running


# -- scopes ---------------------------------------------------------------------------------------

def test_application_scope_is_always_open() -> None:
    ledger = BlobLedger()
    ledger.put(APPLICATION_SCOPE, "k", transient=False)
    assert APPLICATION_SCOPE == "_app" and ledger.scopes() == ["_app"]
    assert ledger.is_tracked("_app", "k") and not ledger.is_closed("_app")


def test_put_into_a_scope_that_was_never_opened_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        BlobLedger().put("nope", "k", transient=False)


def test_put_into_a_closed_scope_is_refused(ledger: BlobLedger) -> None:
    ledger.close_scope(S)
    with pytest.raises(ValueError, match="'s' is not open"):
        ledger.put(S, "k", transient=True, receivers=1)
    assert not ledger.is_tracked(S, "k")


def test_reopening_an_open_scope_is_refused(ledger: BlobLedger) -> None:
    with pytest.raises(ValueError, match="'s' is open"):
        ledger.open_scope(S)
    with pytest.raises(ValueError, match="'_app' is open"):
        ledger.open_scope(APPLICATION_SCOPE)


@pytest.mark.parametrize("running_job", [False, True])
def test_a_closed_scope_id_is_never_reopened(ledger: BlobLedger, running_job: bool) -> None:
    if running_job:
        ledger.job_started(1, S, [1])
    ledger.close_scope(S)
    with pytest.raises(ValueError, match="'s' is (closing|final).*never reused"):
        ledger.open_scope(S)


def test_closing_the_application_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="'_app' cannot be closed"):
        BlobLedger().close_scope(APPLICATION_SCOPE)


def test_closing_an_unknown_or_already_closed_scope_is_refused_naming_it(
        ledger: BlobLedger) -> None:
    with pytest.raises(ValueError, match="'other' is unknown"):
        ledger.close_scope("other")
    ledger.close_scope(S)
    with pytest.raises(ValueError, match="'s' is final"):
        ledger.close_scope(S)


def test_closing_a_closing_scope_is_refused(ledger: BlobLedger) -> None:
    ledger.job_started(1, S, [1])
    assert ledger.close_scope(S) == []
    with pytest.raises(ValueError, match="'s' is closing"):
        ledger.close_scope(S)


def test_scopes_lists_open_scopes_and_scopes_that_still_have_blobs(ledger: BlobLedger) -> None:
    ledger.open_scope("t")
    ledger.put(S, "k", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "k", 1)
    ledger.close_scope(S)                        # closing: not open, but still has a blob
    ledger.open_scope("u")
    ledger.close_scope("u")                      # final at once: gone
    assert ledger.scopes() == ["_app", "s", "t"]
    assert ledger.is_closed(S) and ledger.is_closed("u") and not ledger.is_closed("t")
    assert not ledger.is_closed("never-seen")


# -- permanent blobs and staged cleanup -----------------------------------------------------------

def test_unbound_permanent_blob_survives_one_tick_and_is_deleted_at_the_second(
        ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "other", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "other", 1)                   # keeps the scope from being swept whole
    assert ledger.kind_of(S, "jar") == "permanent"
    assert ledger.count(S, "jar") == 0 and ledger.is_staged(S, "jar")
    assert ledger.tick() == []
    assert ledger.is_tracked(S, "jar")
    assert ledger.tick() == [Deletion(S, "jar", "staged")]
    assert not ledger.is_tracked(S, "jar") and not ledger.is_staged(S, "jar")
    assert ledger.blobs(S) == ["other"]


def test_bind_rescues_a_staged_permanent_blob_at_once(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.tick()                                # due at the next tick
    ledger.job_started(1, S, [7])
    assert ledger.bind(S, "jar", 7) is True
    assert ledger.count(S, "jar") == 1 and not ledger.is_staged(S, "jar")
    assert ledger.tick() == [] and ledger.tick() == []
    assert ledger.is_tracked(S, "jar")


def test_re_put_of_an_unreferenced_blob_restarts_its_full_interval(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.tick()                                # would go at the next tick
    ledger.put(S, "jar", transient=False)
    assert ledger.tick() == []
    assert ledger.tick() == [Deletion(S, None, "staged")]


def test_re_put_of_a_referenced_permanent_blob_changes_nothing(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "jar", 1)
    ledger.put(S, "jar", transient=False)
    assert ledger.count(S, "jar") == 1 and not ledger.is_staged(S, "jar")


def test_permanent_blob_counts_one_reference_per_job_however_many_binds(
        ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1, 2])
    ledger.job_started(2, S, [3])
    for stage in (1, 1, 2, 3, 3):
        assert ledger.bind(S, "jar", stage)
    assert ledger.count(S, "jar") == 2


def test_bind_of_an_untracked_blob_returns_false_and_changes_nothing(ledger: BlobLedger) -> None:
    ledger.job_started(1, S, [1])
    assert ledger.bind(S, "never-put", 1) is False
    assert ledger.bind("other", "k", 9) is False
    assert not ledger.is_tracked(S, "never-put") and 9 not in ledger._stages
    assert ledger._jobs[1].held == set()


def test_bind_before_job_start_is_attributed_when_the_stage_is_named(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    assert ledger.bind(S, "jar", 5) is True      # executor report beat the job-start event
    assert ledger.count(S, "jar") == 1 and not ledger.is_staged(S, "jar")
    ledger.tick(), ledger.tick()
    assert ledger.is_tracked(S, "jar")           # the pending stage protected it
    ledger.job_started(1, S, [4, 5])
    assert ledger.count(S, "jar") == 1           # the stage's reference moved to the job
    assert ledger.job_ended(1, succeeded=True) == []
    assert ledger.count(S, "jar") == 0 and ledger.is_staged(S, "jar")
    assert not ledger._stages


def test_early_binds_in_two_stages_of_one_job_count_as_one_reference(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.bind(S, "jar", 1)
    ledger.bind(S, "jar", 2)
    assert ledger.count(S, "jar") == 2           # two pending holders, job unknown yet
    ledger.job_started(1, S, [1, 2])
    assert ledger.count(S, "jar") == 1
    ledger.job_ended(1, succeeded=True)
    assert ledger.count(S, "jar") == 0 and ledger.is_staged(S, "jar")


def test_a_stage_shared_by_two_running_jobs_binds_for_both(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "lib", transient=False)
    ledger.job_started(1, S, [1, 2])
    ledger.bind(S, "jar", 1)
    ledger.job_started(2, S, [1, 3])             # stage 1 reused: job 2 depends on it too
    ledger.bind(S, "lib", 1)
    assert ledger.count(S, "jar") == 2 and ledger.count(S, "lib") == 2
    ledger.job_ended(1, succeeded=True)
    assert ledger.count(S, "jar") == 1 and ledger.count(S, "lib") == 1
    assert not ledger.is_staged(S, "jar") and not ledger.is_staged(S, "lib")
    ledger.job_ended(2, succeeded=True)
    assert ledger.is_staged(S, "jar") and ledger.is_staged(S, "lib")


def test_a_stage_named_twice_by_one_job_counts_once(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.bind(S, "jar", 1)
    ledger.job_started(1, S, [1, 1])
    assert ledger.count(S, "jar") == 1
    assert ledger.job_ended(1, succeeded=True) == [] and not ledger._stages
    assert ledger.is_staged(S, "jar")


def test_successful_job_end_stages_its_permanent_blobs(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "file", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "jar", 1)
    ledger.bind(S, "file", 1)
    ledger.tick(), ledger.tick()
    assert ledger.blobs(S) == ["file", "jar"]
    assert ledger.job_ended(1, succeeded=True) == []
    assert ledger.is_staged(S, "jar") and ledger.is_staged(S, "file")
    assert ledger.tick() == []
    assert ledger.tick() == [Deletion(S, None, "staged")]


def test_blob_used_by_two_jobs_stays_until_both_end(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    for job in (1, 2):
        ledger.job_started(job, S, [job])
        ledger.bind(S, "jar", job)
    ledger.job_ended(1, succeeded=True)
    ledger.tick(), ledger.tick()
    assert ledger.count(S, "jar") == 1 and ledger.is_tracked(S, "jar")
    ledger.job_ended(2, succeeded=True)
    assert ledger.is_staged(S, "jar")


def test_failed_job_keeps_permanent_references(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "jar", 1)
    assert ledger.job_ended(1, succeeded=False) == []
    assert ledger.count(S, "jar") == 1 and not ledger.is_staged(S, "jar")
    for _ in range(3):
        assert ledger.tick() == []
    assert ledger.is_tracked(S, "jar") and not ledger._jobs


def test_user_retry_after_a_failed_job_finds_its_permanent_blob(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "jar", 1)
    ledger.job_ended(1, succeeded=False)
    ledger.tick(), ledger.tick()
    ledger.job_started(2, S, [2])
    assert ledger.bind(S, "jar", 2) is True
    ledger.job_ended(2, succeeded=True)
    assert ledger.count(S, "jar") == 1           # the failed job's reference remains
    assert ledger.close_scope(S) == [Deletion(S, None, "scope-final")]


# -- transient blobs ------------------------------------------------------------------------------

def test_new_transient_blob_counts_its_receivers_and_is_not_staged(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=3)
    assert ledger.kind_of(S, "msg") == "transient"
    assert ledger.count(S, "msg") == 3 and not ledger.is_staged(S, "msg")
    ledger.tick(), ledger.tick()
    assert ledger.is_tracked(S, "msg")


def test_transient_blob_without_receivers_is_staged_like_a_submission_message(
        ledger: BlobLedger) -> None:
    ledger.put(S, "submit", transient=True)
    assert ledger.count(S, "submit") == 0 and ledger.is_staged(S, "submit")
    assert ledger.tick() == []
    assert ledger.tick() == [Deletion(S, None, "staged")]


def test_negative_receivers_are_refused(ledger: BlobLedger) -> None:
    with pytest.raises(ValueError, match="'msg'.*-1"):
        ledger.put(S, "msg", transient=True, receivers=-1)
    assert not ledger.is_tracked(S, "msg")


def test_bind_keeps_a_transient_count_and_makes_the_first_job_its_owner(
        ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=2)
    ledger.job_started(1, S, [1])
    ledger.job_started(2, S, [2])
    assert ledger.bind(S, "msg", 2) and ledger.bind(S, "msg", 1)
    assert ledger.count(S, "msg") == 2
    assert ledger._blobs[(S, "msg")].owner == 2
    ledger.job_ended(1, succeeded=False)         # not the owner: no reset
    assert ledger.count(S, "msg") == 2
    ledger.job_ended(2, succeeded=False)
    assert ledger.count(S, "msg") == 0 and ledger.is_staged(S, "msg")


def test_transient_blob_deleted_when_last_receiver_task_succeeds(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=2)
    assert ledger.received(S, "msg", 10) and ledger.received(S, "msg", 11)
    assert ledger.count(S, "msg") == 2           # receipts count only when the task succeeds
    assert ledger.task_ended(10, succeeded=True) == []
    assert ledger.count(S, "msg") == 1
    assert ledger.task_ended(11, succeeded=True) == [Deletion(S, "msg", "received")]
    assert not ledger.is_tracked(S, "msg") and _empty_inside(ledger)


def test_failed_task_attempt_releases_nothing_and_its_retry_counts(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=1)
    ledger.received(S, "msg", 10)
    assert ledger.task_ended(10, succeeded=False) == []
    assert ledger.count(S, "msg") == 1 and not ledger._tasks
    ledger.received(S, "msg", 11)                # the retry attempt
    assert ledger.task_ended(11, succeeded=True) == [Deletion(S, "msg", "received")]


def test_task_receiving_a_blob_twice_releases_it_once(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=2)
    ledger.received(S, "msg", 10)
    ledger.received(S, "msg", 10)
    assert ledger.task_ended(10, succeeded=True) == []
    assert ledger.count(S, "msg") == 1


def test_one_task_releases_every_transient_blob_it_received(ledger: BlobLedger) -> None:
    ledger.put(S, "b", transient=True, receivers=1)
    ledger.put(S, "a", transient=True, receivers=1)
    ledger.put(S, "c", transient=True, receivers=2)
    for key in ("b", "a", "c"):
        ledger.received(S, key, 10)
    assert ledger.task_ended(10, succeeded=True) == [Deletion(S, "a", "received"),
                                                     Deletion(S, "b", "received")]
    assert ledger.count(S, "c") == 1


def test_received_is_refused_for_untracked_and_permanent_blobs(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    assert ledger.received(S, "jar", 10) is False
    assert ledger.received(S, "gone", 10) is False
    assert not ledger._tasks


def test_unknown_task_end_is_ignored(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=1)
    assert ledger.task_ended(99, succeeded=True) == []
    assert ledger.count(S, "msg") == 1


def test_received_zero_count_transient_blob_is_left_to_staged_cleanup(ledger: BlobLedger) -> None:
    ledger.put(S, "submit", transient=True)
    ledger.received(S, "submit", 10)
    assert ledger.task_ended(10, succeeded=True) == []
    assert ledger.is_staged(S, "submit") and ledger._refs.underflows == 0


def test_failed_job_resets_transient_counts_and_stages_them(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=3)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "msg", 1)
    ledger.received(S, "msg", 10)
    assert ledger.job_ended(1, succeeded=False) == []
    assert ledger.count(S, "msg") == 0 and ledger.is_staged(S, "msg")
    assert ledger.tick() == []
    ledger.put(S, "msg", transient=True, receivers=1)    # re-created for a retry
    assert ledger.task_ended(10, succeeded=True) == []   # the old receipt went with the reset
    assert ledger.count(S, "msg") == 1 and ledger._refs.underflows == 0


def test_successful_owner_job_end_leaves_transient_counts_alone(ledger: BlobLedger) -> None:
    ledger.put(S, "msg", transient=True, receivers=2)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "msg", 1)
    ledger.job_ended(1, succeeded=True)
    assert ledger.count(S, "msg") == 2 and ledger._blobs[(S, "msg")].owner is None


def test_transient_re_put_adds_receivers_and_rescues(ledger: BlobLedger) -> None:
    ledger.put(S, "submit", transient=True)
    ledger.tick()
    ledger.put(S, "submit", transient=True, receivers=2)
    assert ledger.count(S, "submit") == 2 and not ledger.is_staged(S, "submit")
    ledger.put(S, "submit", transient=True, receivers=1)
    assert ledger.count(S, "submit") == 3


def test_permanent_re_put_makes_a_transient_blob_permanent_counted_by_its_jobs(
        ledger: BlobLedger) -> None:
    ledger.put(S, "x", transient=True, receivers=5)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "x", 1)
    ledger.bind(S, "x", 2)                       # stage 2 not named by any job yet
    ledger.received(S, "x", 10)
    ledger.put(S, "x", transient=False)
    assert ledger.kind_of(S, "x") == "permanent"
    assert ledger.count(S, "x") == 2             # job 1 and pending stage 2, not 5 receivers
    assert not ledger._tasks and ledger.task_ended(10, succeeded=True) == []
    ledger.job_started(2, S, [2])
    ledger.job_ended(1, succeeded=True)
    ledger.job_ended(2, succeeded=True)
    assert ledger.count(S, "x") == 0 and ledger.is_staged(S, "x")


def test_permanent_re_put_of_an_unused_transient_blob_stages_it(ledger: BlobLedger) -> None:
    ledger.put(S, "x", transient=True, receivers=2)
    ledger.put(S, "x", transient=False)
    assert ledger.kind_of(S, "x") == "permanent"
    assert ledger.count(S, "x") == 0 and ledger.is_staged(S, "x")


def test_transient_re_put_of_a_permanent_blob_only_restages_it(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.tick()
    ledger.put(S, "jar", transient=True, receivers=4)
    assert ledger.kind_of(S, "jar") == "permanent" and ledger.count(S, "jar") == 0
    assert ledger.tick() == []                   # a full interval again
    assert ledger.tick() == [Deletion(S, None, "staged")]


# -- final states ---------------------------------------------------------------------------------

def test_scope_closed_without_running_jobs_is_final_at_once(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "msg", transient=True, receivers=1)
    assert ledger.close_scope(S) == [Deletion(S, None, "scope-final")]
    assert ledger.blobs(S) == [] and ledger.scopes() == ["_app"] and _empty_inside(ledger)


def test_scope_closed_with_running_job_finalizes_at_its_last_job_end(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.job_started(2, S, [2])
    ledger.bind(S, "jar", 1)
    assert ledger.close_scope(S) == []
    assert ledger.is_closed(S) and ledger.running_jobs(S) == 2 and ledger.is_tracked(S, "jar")
    assert ledger.job_ended(1, succeeded=True) == []
    assert ledger.running_jobs(S) == 1
    assert ledger.job_ended(2, succeeded=True) == [Deletion(S, None, "scope-final")]
    assert ledger.running_jobs(S) == 0 and _empty_inside(ledger)


def test_scope_final_state_deletes_despite_references(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "msg", transient=True, receivers=3)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "jar", 1)
    ledger.job_ended(1, succeeded=False)         # keeps its reference
    assert ledger.count(S, "jar") == 1 and ledger.count(S, "msg") == 3
    assert ledger.close_scope(S) == [Deletion(S, None, "scope-final")]
    assert not ledger.is_tracked(S, "jar") and not ledger.is_tracked(S, "msg")


def test_scope_final_forgets_pending_binds_receipts_and_references_from_other_jobs(
        ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "msg", transient=True, receivers=1)
    ledger.bind(S, "jar", 50)                    # pending stage, never named
    ledger.job_started(1, APPLICATION_SCOPE, [1])
    ledger.bind(S, "jar", 1)                     # an application job uses the scope's blob
    ledger.bind(S, "msg", 1)
    ledger.received(S, "msg", 10)
    assert ledger.close_scope(S) == [Deletion(S, None, "scope-final")]
    assert not ledger._tasks and set(ledger._stages) == {1}
    assert ledger._jobs[1].held == set() and ledger._jobs[1].owned == set()
    assert ledger.task_ended(10, succeeded=True) == []
    assert ledger.job_ended(1, succeeded=True) == [] and _empty_inside(ledger)


def test_binds_into_a_closing_scope_still_protect_its_running_job(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.close_scope(S)
    assert ledger.bind(S, "jar", 1) is True      # first use after the close
    ledger.tick(), ledger.tick()
    assert ledger.is_tracked(S, "jar")
    assert ledger.job_ended(1, succeeded=True) == [Deletion(S, None, "scope-final")]


def test_job_of_a_final_or_unknown_scope_runs_but_cannot_bind_that_scopes_blobs(
        ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.close_scope(S)
    ledger.job_started(1, S, [1])
    ledger.job_started(2, "unknown", [2])
    assert ledger.running_jobs(S) == 1 and ledger.running_jobs("unknown") == 1
    assert ledger.bind(S, "jar", 1) is False
    ledger.put(APPLICATION_SCOPE, "lib", transient=False)
    assert ledger.bind(APPLICATION_SCOPE, "lib", 2) and ledger.count(APPLICATION_SCOPE, "lib") == 1
    assert ledger.job_ended(1, succeeded=True) == []     # final once already, not twice
    assert ledger.job_ended(2, succeeded=True) == []
    assert ledger.is_staged(APPLICATION_SCOPE, "lib")


def test_unknown_job_end_and_duplicate_job_start_are_ignored(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "jar", 1)
    ledger.job_started(1, S, [1, 2])
    assert ledger.running_jobs(S) == 1 and ledger._jobs[1].stages == (1,)
    assert ledger.job_ended(42, succeeded=True) == []
    assert ledger.count(S, "jar") == 1
    ledger.job_ended(1, succeeded=True)
    assert ledger.job_ended(1, succeeded=True) == [] and ledger._refs.underflows == 0


# -- ticks and the end ----------------------------------------------------------------------------

def test_tick_sweeps_whole_scope_directory(ledger: BlobLedger) -> None:
    for key in ("a", "b", "c"):
        ledger.put(S, key, transient=key == "c")
    ledger.tick()
    assert ledger.tick() == [Deletion(S, None, "staged")]
    assert ledger.blobs(S) == [] and ledger.scopes() == ["_app", "s"]   # still open
    ledger.put(S, "d", transient=False)          # the caller recreates the directory
    assert ledger.is_tracked(S, "d")


def test_tick_deletes_single_blobs_while_others_of_the_scope_stay(ledger: BlobLedger) -> None:
    ledger.put(S, "b", transient=False)
    ledger.put(S, "a", transient=False)
    ledger.tick()
    ledger.put(S, "late", transient=False)       # staged one interval later
    assert ledger.tick() == [Deletion(S, "a", "staged"), Deletion(S, "b", "staged")]
    assert ledger.tick() == [Deletion(S, None, "staged")]


def test_tick_does_not_sweep_a_scope_with_a_running_job(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [1])
    ledger.tick()
    assert ledger.tick() == [Deletion(S, "jar", "staged")]


def test_tick_output_is_sorted_by_scope_then_key(ledger: BlobLedger) -> None:
    ledger.open_scope("a")
    ledger.job_started(1, "a", [1])
    ledger.job_started(2, S, [2])
    for scope in (S, "a", APPLICATION_SCOPE):
        for key in ("z", "m"):
            ledger.put(scope, key, transient=False)
    ledger.tick()
    assert ledger.tick() == [Deletion("_app", None, "staged"),
                             Deletion("a", "m", "staged"), Deletion("a", "z", "staged"),
                             Deletion(S, "m", "staged"), Deletion(S, "z", "staged")]


def test_end_application_deletes_every_scope_and_refuses_puts(ledger: BlobLedger) -> None:
    ledger.open_scope("closing")
    ledger.open_scope("empty-final")
    ledger.close_scope("empty-final")
    ledger.put("closing", "jar", transient=False)
    ledger.job_started(1, "closing", [1])
    ledger.close_scope("closing")
    ledger.put(S, "msg", transient=True, receivers=1)
    ledger.received(S, "msg", 10)
    assert ledger.end_application() == [Deletion("_app", None, "application-end"),
                                        Deletion("closing", None, "application-end"),
                                        Deletion(S, None, "application-end")]
    assert _empty_inside(ledger) and ledger.scopes() == []
    with pytest.raises(ValueError, match="application ended"):
        ledger.put(APPLICATION_SCOPE, "k", transient=False)
    with pytest.raises(ValueError, match="application ended"):
        ledger.open_scope("new")
    assert ledger.tick() == [] and ledger.job_ended(1, succeeded=True) == []


def test_forget_is_idempotent_and_leaves_no_trace(ledger: BlobLedger) -> None:
    ledger.put(S, "x", transient=True, receivers=2)
    ledger.job_started(1, S, [1])
    ledger.bind(S, "x", 1)
    ledger.bind(S, "x", 9)
    ledger.received(S, "x", 10)
    ledger.forget(S, "x")
    ledger.forget(S, "x")
    ledger.forget(S, "never")
    assert not ledger.is_tracked(S, "x") and ledger.count(S, "x") == 0
    assert set(ledger._stages) == {1} and not ledger._tasks
    assert ledger._jobs[1].owned == set()
    with pytest.raises(ValueError, match="'x'.*not tracked"):
        ledger.kind_of(S, "x")
    ledger.put(S, "x", transient=False)          # a fresh blob: no stale receipt or bind
    assert ledger.count(S, "x") == 0 and ledger.task_ended(10, succeeded=True) == []
    ledger.job_ended(1, succeeded=True)
    assert ledger.is_staged(S, "x")


def test_memory_stays_bounded_over_many_jobs(ledger: BlobLedger) -> None:
    ledger.put(APPLICATION_SCOPE, "jar", transient=False)
    for job in range(20_000):
        stage = 2 * job
        if job % 2:
            ledger.bind(APPLICATION_SCOPE, "jar", stage)     # bind before the job start
        ledger.job_started(job, S, [stage, stage + 1])
        ledger.bind(APPLICATION_SCOPE, "jar", stage + 1)
        ledger.put(S, f"msg{job}", transient=True, receivers=1)
        ledger.bind(S, f"msg{job}", stage)
        ledger.received(S, f"msg{job}", job)
        ledger.task_ended(job + 1_000_000, succeeded=True)   # a task that used no blob
        ledger.task_ended(job, succeeded=job % 3 != 0)
        ledger.job_ended(job, succeeded=job % 5 != 0)
        ledger.tick()
    # Messages whose receiver failed inside a successful job wait for the scope's final delete.
    assert 0 < len(ledger.blobs(S)) < 20_000 // 3
    assert ledger.close_scope(S) == [Deletion(S, None, "scope-final")]
    assert not (ledger._jobs or ledger._stages or ledger._tasks or ledger._running)
    assert ledger.count(APPLICATION_SCOPE, "jar") == 4000    # one per failed job (FLIP-19)
    _assert_consistent(ledger)


# -- property: random event sequences -------------------------------------------------------------

SCOPES = [APPLICATION_SCOPE, APPLICATION_SCOPE, "a", "b", "c"]   # "c" starts unopened
KEYS = ["k0", "k1"]
STAGES = st.integers(0, 3)
TASKS = st.integers(0, 3)
_scope, _key = st.sampled_from(SCOPES), st.sampled_from(KEYS)
OPS = st.lists(st.one_of(
    st.tuples(st.just("open"), _scope),
    st.tuples(st.just("close"), _scope),
    st.tuples(st.just("put"), _scope, _key, st.booleans(), st.integers(0, 2)),
    st.tuples(st.just("put"), _scope, _key, st.booleans(), st.integers(0, 2)),
    st.tuples(st.just("start"), _scope, st.lists(STAGES, min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("bind"), _scope, _key, STAGES),
    st.tuples(st.just("bind"), _scope, _key, STAGES),
    st.tuples(st.just("receive"), _scope, _key, TASKS),
    st.tuples(st.just("receive"), _scope, _key, TASKS),
    st.tuples(st.just("task_end"), TASKS, st.booleans()),
    st.tuples(st.just("tick")),
    st.tuples(st.just("forget"), _scope, _key),
), min_size=30, max_size=80)


Blob = tuple[str, str]


@dataclass
class Model:
    """What must hold, kept independently of the ledger's maps."""

    opened: set[str] = field(default_factory=lambda: {APPLICATION_SCOPE, "a", "b"})
    open: set[str] = field(default_factory=lambda: {APPLICATION_SCOPE, "a", "b"})
    closing: set[str] = field(default_factory=set)
    final: set[str] = field(default_factory=set)
    alive: set[Blob] = field(default_factory=set)          # put and not deleted since
    permanent: set[Blob] = field(default_factory=set)
    binds: set[tuple[Blob, int]] = field(default_factory=set)  # stage is pending or running
    pinned: set[Blob] = field(default_factory=set)         # permanent, bound by a failed job
    running: dict[int, tuple[str, list[int]]] = field(default_factory=dict)
    touched: dict[Blob, int] = field(default_factory=dict)  # tick count at last put/bind/job end
    ticks: int = 0
    next_job: int = 0
    ended: set[int] = field(default_factory=set)          # stages whose jobs all ended
    newest: int = -1                                       # newest stage a started job named

    def in_use(self, blob: Blob) -> bool:
        return blob in self.pinned or any(b == blob for b, _ in self.binds)

    def runs_in(self, scope: str) -> bool:
        return any(job_scope == scope for job_scope, _ in self.running.values())

    def drop(self, blob: Blob) -> None:
        self.alive.discard(blob)
        self.permanent.discard(blob)
        self.pinned.discard(blob)
        self.binds = {(b, s) for b, s in self.binds if b != blob}

    def end(self, job: int, succeeded: bool, count: Callable[[str, str], int]) -> bool:
        """Ends ``job``; True if that must finalize its scope."""
        scope, stages = self.running.pop(job)
        used = {b for b, s in self.binds if s in stages}
        # Released or reset references stage a blob afresh; a transient blob already at zero
        # keeps its place in the cleanup.
        self.touched.update((b, self.ticks) for b in used if b in self.permanent or count(*b))
        if not succeeded:
            self.pinned |= used & self.permanent
        named = {s for _, ss in self.running.values() for s in ss}
        self.binds = {(b, s) for b, s in self.binds if s not in stages or s in named}
        self.ended |= {s for s in stages if s not in named}
        return scope in self.closing and not self.runs_in(scope)


def _check(ledger: BlobLedger, model: Model, deletions: list[Deletion],
           counts_before: dict[Blob, int]) -> None:
    for d in deletions:
        gone = {b for b in model.alive if b[0] == d.scope} if d.key is None else {(d.scope, d.key)}
        if d.reason == "scope-final":
            assert d.key is None and d.scope not in model.final, f"{d.scope} final twice"
            assert not model.runs_in(d.scope), f"{d.scope} final while a job runs"
            model.final.add(d.scope)
            model.closing.discard(d.scope)
        elif d.key is None:
            assert d.reason == "staged" and gone, f"directory delete of empty {d.scope}"
            assert not model.runs_in(d.scope), f"{d.scope} swept while a job runs"
        else:
            assert (d.scope, d.key) in model.alive, f"{d} deleted twice without a re-put"
        for blob in gone:
            if d.reason == "staged":
                assert counts_before[blob] == 0, f"{blob} deleted with references"
                assert not (blob in model.permanent and model.in_use(blob)), f"{blob} in use"
                assert model.ticks >= model.touched[blob] + 2, f"{blob} got no full interval"
            if d.reason == "received":
                assert blob not in model.permanent and counts_before[blob] == 1
            model.drop(blob)
    tracked = {(s, k) for s in ledger.scopes() for k in ledger.blobs(s)}
    assert tracked == model.alive
    assert all(ledger.count(*b) >= 0 for b in tracked)
    _assert_consistent(ledger)


def _finals(deletions: list[Deletion]) -> list[str]:
    return [d.scope for d in deletions if d.reason == "scope-final"]


def _apply(ledger: BlobLedger, model: Model, op: tuple[Any, ...]) -> list[Deletion]:
    name, args = op[0], op[1:]
    if name == "open":
        if args[0] in model.opened:
            with pytest.raises(ValueError):
                ledger.open_scope(args[0])
            return []
        ledger.open_scope(args[0])
        model.opened.add(args[0])
        model.open.add(args[0])
    elif name == "close":
        scope = args[0]
        if scope == APPLICATION_SCOPE or scope not in model.open:
            with pytest.raises(ValueError):
                ledger.close_scope(scope)
            return []
        model.open.discard(scope)
        model.closing.add(scope)
        out = ledger.close_scope(scope)
        assert _finals(out) == ([] if model.runs_in(scope) else [scope])
        return out
    elif name == "put":
        scope, key, transient, receivers = args
        if scope not in model.open:
            with pytest.raises(ValueError):
                ledger.put(scope, key, transient=transient, receivers=receivers)
            return []
        ledger.put(scope, key, transient=transient, receivers=receivers)
        model.alive.add((scope, key))
        model.touched[(scope, key)] = model.ticks
        if not transient:
            model.permanent.add((scope, key))
    elif name == "start":
        model.ended -= set(args[1])
        model.running[model.next_job] = (args[0], list(args[1]))
        ledger.job_started(model.next_job, args[0], args[1])
        model.next_job += 1
        # Spark numbers stages in submission order: a stage no running job names that is
        # older than this job's newest is no stage of ours, and its binds protect nothing.
        model.newest = max(model.newest, *args[1])
        named = {s for _, ss in model.running.values() for s in ss}
        dropped = {(b, s) for b, s in model.binds if s < model.newest and s not in named}
        model.binds -= dropped
        model.touched.update((b, model.ticks) for b, _ in dropped if b in model.permanent)
    elif name == "end":
        if model.running:
            job = sorted(model.running)[args[0] % len(model.running)]
            scope = model.running[job][0]
            finalizes = model.end(job, args[1], ledger.count)
            out = ledger.job_ended(job, args[1])
            assert _finals(out) == ([scope] if finalizes else [])
            return out
    elif name == "bind":
        blob = (args[0], args[1])
        assert ledger.bind(*args) == (blob in model.alive)
        named = {s for _, ss in model.running.values() for s in ss}
        late = args[2] in model.ended and args[2] not in named
        if blob in model.alive and not late:
            model.binds.add((blob, args[2]))
            if blob in model.permanent:          # a transient count is not changed by a bind
                model.touched[blob] = model.ticks
    elif name == "receive":
        blob = (args[0], args[1])
        expected = blob in model.alive and blob not in model.permanent
        assert ledger.received(*args) == expected
    elif name == "task_end":
        return ledger.task_ended(*args)
    elif name == "tick":
        model.ticks += 1
        return ledger.tick()
    else:
        ledger.forget(*args)
        model.drop((args[0], args[1]))
    return []


def _step(ledger: BlobLedger, model: Model, op: tuple[Any, ...]) -> None:
    before = {b: ledger.count(*b) for b in model.alive}
    _check(ledger, model, _apply(ledger, model, op), before)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_random_event_sequences_keep_every_cleanup_guarantee(ops: list[tuple[Any, ...]]) -> None:
    ledger, model = BlobLedger(), Model()
    ledger.open_scope("a")
    ledger.open_scope("b")
    for op in ops:
        _step(ledger, model, op)

    # Wind down: every task and job ends, pending stages get their job, user scopes close.
    for task in range(4):
        _step(ledger, model, ("task_end", task, True))
    _step(ledger, model, ("start", APPLICATION_SCOPE, [0, 1, 2, 3]))
    while model.running:
        _step(ledger, model, ("end", 0, True))
    for scope in sorted(model.open - {APPLICATION_SCOPE}):
        _step(ledger, model, ("close", scope))
    _step(ledger, model, ("tick",))
    _step(ledger, model, ("tick",))

    # Only application-scope blobs pinned on purpose remain: a failed job's permanent reference
    # or a transient message whose receivers never all succeeded.
    assert not (ledger._jobs or ledger._stages or ledger._tasks or ledger._running)
    for scope, key in model.alive:
        assert scope == APPLICATION_SCOPE and ledger.count(scope, key) > 0
        assert (scope, key) in model.pinned or (scope, key) not in model.permanent
    assert ledger.end_application() == [Deletion(APPLICATION_SCOPE, None, "application-end")]
    assert _empty_inside(ledger) and ledger.scopes() == []


def test_pinned_blob_outlives_its_jobs_and_goes_with_its_scope() -> None:
    ledger = BlobLedger()
    ledger.open_scope("s.1")
    ledger.put("s.1", "k", transient=False)
    assert ledger.pin("s.1", "k") and ledger.pin("s.1", "k")
    assert ledger.count("s.1", "k") == 1 and not ledger.is_staged("s.1", "k")
    ledger.bind("s.1", "k", stage_id=3)
    ledger.job_started(1, "s.1", [3])
    assert ledger.job_ended(1, succeeded=True) == []
    assert ledger.tick() == [] and ledger.tick() == []
    assert ledger.count("s.1", "k") == 1
    _assert_consistent(ledger)
    assert ledger.close_scope("s.1") == [Deletion("s.1", None, "scope-final")]
    assert not ledger.is_tracked("s.1", "k")


def test_pin_of_an_unknown_blob_is_refused_quietly_and_of_a_transient_loudly() -> None:
    ledger = BlobLedger()
    assert ledger.pin("_app", "missing") is False
    ledger.put("_app", "t", transient=True, receivers=2)
    with pytest.raises(ValueError, match="transient"):
        ledger.pin("_app", "t")


def test_late_bind_of_an_ended_stage_pins_nothing() -> None:
    ledger = BlobLedger()
    ledger.put("_app", "k", transient=False)
    ledger.bind("_app", "k", stage_id=5)
    ledger.job_started(1, "_app", [5])
    ledger.job_ended(1, succeeded=True)
    assert ledger.bind("_app", "k", stage_id=5)  # a straggler of stage 5 reports late
    assert ledger.count("_app", "k") == 0
    ledger.tick()
    assert ledger.tick() == [Deletion("_app", None, "staged")]
    _assert_consistent(ledger)


def test_a_stage_reused_by_a_later_job_binds_again() -> None:
    ledger = BlobLedger()
    ledger.put("_app", "k", transient=False)
    ledger.job_started(1, "_app", [5])
    ledger.job_ended(1, succeeded=True)
    ledger.job_started(2, "_app", [5, 6])
    assert ledger.bind("_app", "k", stage_id=5)
    assert ledger.count("_app", "k") == 1
    _assert_consistent(ledger)


# -- made-up use reports (issue 21) -----------------------------------------------------------------

def test_a_pending_stage_older_than_a_started_jobs_is_forgotten_with_its_reference(
        ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    assert ledger.bind(S, "jar", 3) and ledger.bind(S, "jar", 9)  # 9: a job not started yet
    assert ledger.count(S, "jar") == 2
    ledger.job_started(1, S, [5, 6])   # Spark made stage 5 after every stage of older jobs
    assert ledger.count(S, "jar") == 1 and set(ledger._pending_stages) == {9}
    ledger.job_started(2, S, [9])      # the report that beat its job-start event still counts
    assert ledger.count(S, "jar") == 1 and not ledger._pending_stages


def test_a_bind_far_ahead_of_every_started_job_binds_nothing(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.job_started(1, S, [10])
    ledger.job_ended(1, succeeded=True)
    assert ledger.bind(S, "jar", 10 + PENDING_STAGES_KEPT + 1) is True
    assert ledger.count(S, "jar") == 0 and ledger.is_staged(S, "jar")
    assert ledger.bind(S, "jar", 10 + PENDING_STAGES_KEPT)  # within reach: held
    assert ledger.count(S, "jar") == 1


def test_pending_stages_and_receipts_are_capped(ledger: BlobLedger) -> None:
    ledger.put(S, "jar", transient=False)
    ledger.put(S, "msg", transient=True, receivers=1)
    ledger.job_started(1, S, [2 * PENDING_STAGES_KEPT])  # so that every id below is in reach
    for stage in range(PENDING_STAGES_KEPT + 50):
        ledger.bind(S, "jar", stage)
    assert len(ledger._pending_stages) == PENDING_STAGES_KEPT
    assert ledger.count(S, "jar") == PENDING_STAGES_KEPT
    assert min(ledger._pending_stages) == 50  # the oldest went first
    for task in range(RECEIVING_TASKS_KEPT + 10):
        ledger.received(S, "msg", task)
    assert len(ledger._tasks) == RECEIVING_TASKS_KEPT and ledger.count(S, "msg") == 1
