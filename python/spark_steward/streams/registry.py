"""The records of streaming checkpoint locations in the storage dir: ``streams/<query id>.json``.

One record per query (a query keeps its id across restarts and applications), rewritten
atomically by the driver that runs it; readers take each record whole or skip it with a reason.
"""

from __future__ import annotations

import logging
from typing import Iterator

from spark_steward.errors import StewardError
from spark_steward.streams.errors import StreamError
from spark_steward.streams.lifecycle.locations import StreamRecord, normal_location, valid_query_id
from spark_steward.storage import Storage

log = logging.getLogger(__name__)

FOLDER = "streams"


class StreamRegistry:
    """The records of streaming checkpoint locations in the storage dir, one file per query id."""
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def record_path(query_id: str) -> str:
        """The storage path of a query's record; StreamError for a malformed id."""
        if not valid_query_id(query_id):
            raise StreamError(f"{query_id!r} is not a streaming query id")
        return f"{FOLDER}/{query_id}.json"

    def write(self, record: StreamRecord) -> None:
        """Writes ``record`` (replacing the previous one)."""
        self.storage.write_record(self.record_path(record.query_id), record.to_json())

    def read(self, query_id: str) -> StreamRecord | None:
        """The record of ``query_id``, or None."""
        path = self.record_path(query_id)
        if not self.storage.exists(path):
            return None
        try:
            record = StreamRecord.from_json(self.storage.read_record(path))
        except (StewardError, ValueError) as exc:
            raise StreamError(f"stream record {self.storage.url_of(path)} is unreadable: "
                              f"{exc}") from exc
        if record.query_id != query_id:
            raise StreamError(f"stream record {self.storage.url_of(path)} names query "
                              f"{record.query_id}, not {query_id}")
        return record

    def all(self) -> Iterator[StreamRecord]:
        """Every readable record; an unreadable one is logged and skipped (never deleted)."""
        for name in self.storage.list_names(FOLDER):
            query_id = name[:-len(".json")] if name.endswith(".json") else ""
            if not valid_query_id(query_id):
                continue
            try:
                record = self.read(query_id)
            except StreamError as exc:
                log.warning("%s", exc)
                continue
            if record is not None:
                yield record

    def remove(self, query_id: str) -> None:
        """Deletes the record of ``query_id``."""
        self.storage.delete(self.record_path(query_id))

    def find(self, name_or_location: str) -> StreamRecord:
        """The one record whose query id, name or location is ``name_or_location``; locations
        compare normalised (``file:///x``, ``file:/x`` and ``/x/`` are one)."""
        wanted = normal_location(name_or_location)
        found = [r for r in self.all()
                 if name_or_location in (r.query_id, r.name)
                 or normal_location(r.location) == wanted]
        if not found:
            raise StreamError(f"no streaming checkpoint location named {name_or_location!r} is "
                              f"recorded in {self.storage.url_of(FOLDER)} (spark-steward streams "
                              f"ls lists them)")
        if len(found) > 1:
            ids = ", ".join(sorted(r.query_id for r in found))
            raise StreamError(f"{name_or_location!r} names {len(found)} streaming queries ({ids}); "
                              f"give the query id or the location instead")
        return found[0]
