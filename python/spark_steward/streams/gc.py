"""``spark-steward gc`` for streaming checkpoint locations: what crashed drivers left.

Recorded drops are finished; a location no run holds any more (stopped, or its application
proven dead) gets its recorded failed deletes retried and Spark's leftover temp files swept;
the record of a location whose folder is gone is removed after the drop grace (a removed record
is reported deleted as one file). Running queries are skipped: their own driver cleans them.
"""

from __future__ import annotations

from spark_steward.errors import StewardError
from spark_steward.gc import Deleted, Failed, GcReport, Progress, Skipped
from spark_steward.streams.lifecycle.locations import LocationCheck, StreamState
from spark_steward.streams.store import StreamStore


def collect_streams(store: StreamStore, *, dry_run: bool,
                    progress: Progress | None = None) -> GcReport:
    """``spark-steward gc`` for streaming locations: finishes recorded drops, retries failed deletes
    and sweeps temp files of locations no run holds; ``dry_run`` only reports."""
    report = GcReport(dry_run=dry_run)
    statuses = store.statuses(survey=True)
    for done, status in enumerate(statuses, 1):
        record = status.record
        if progress is not None:
            progress(done, len(statuses), record.location)
        if status.state is StreamState.RUNNING:
            report.skipped.append(Skipped(record.location, f"query {record.name or record.query_id} "
                                          f"runs in application {record.app_id}"))
            continue
        survey = status.survey
        try:
            if status.state is StreamState.DROPPING:
                files = survey.files if survey else 0
                size = survey.bytes if survey else 0
                if not dry_run:
                    result = store.finish_drop(record)
                    files, size = result.files, result.bytes
                report.deleted.append(Deleted(record.location, files, size))
            elif store.presence(record)[0] is LocationCheck.ABSENT:
                why = store.forget_gone(record, dry_run=dry_run)
                if why is None:
                    report.deleted.append(Deleted(record.location, 1, 0))
                else:
                    report.skipped.append(Skipped(record.location, why))
            elif survey is None:
                report.failed.append(Failed(record.location, status.problem or "not listable"))
            elif survey.intents or survey.temps:
                files = survey.intents + len(survey.temps)
                if not dry_run:
                    files = store.clean(record, active=False)
                report.deleted.append(Deleted(record.location, files, 0))
        except StewardError as exc:
            report.failed.append(Failed(record.location, str(exc)))
    return report
