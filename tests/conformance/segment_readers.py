"""A merged checkpoint's segment read back by byte range, by either runtime.

- :class:`PythonSegmentReader`: ``segment_files.read_segment`` (compactions on the driver,
  restores from storage only Python reaches).
- :class:`JavaSegmentReader`: the shim's ``SegmentFiles`` reader of one listing line, as a
  restore's JVM task runs it on a filesystem, in the conformance JVM. The line is built as
  ``dataframes.read_merged`` builds it (``segment_line``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

from spark_steward.checkpoint.merging.dataframes import segment_line
from spark_steward.checkpoint.merging.lifecycle import Segment
from spark_steward.checkpoint.merging.segment_files import read_segment
from spark_steward.errors import StewardError
from spark_steward.storage import Storage
from tests.conformance import java_names
from tests.conformance.jvm import JvmDriver, decoded


class Read(NamedTuple):
    """What a read delivered before it ended, and the error it ended with (None: none)."""

    data: bytes
    error: str | None


class SegmentReader(ABC):
    runtime: ClassVar[str]

    @abstractmethod
    def read(self, storage: Storage, segment: Segment, label: str) -> Read:
        """Reads ``segment`` of ``storage`` to its end or its first error."""


class PythonSegmentReader(SegmentReader):
    runtime = "python"

    def __init__(self, chunk_size: int) -> None:
        self.chunk_size = chunk_size

    def read(self, storage: Storage, segment: Segment, label: str) -> Read:
        got = bytearray()
        try:
            for piece in read_segment(storage, segment, label=label, chunk_size=self.chunk_size):
                got += piece
        except StewardError as e:
            return Read(bytes(got), str(e))
        return Read(bytes(got), None)


class JavaSegmentReader(SegmentReader):
    runtime = "java"

    def __init__(self, jvm: JvmDriver) -> None:
        self.jvm = jvm

    def read(self, storage: Storage, segment: Segment, label: str) -> Read:
        reply = self.jvm.answer("segment.read", spec_class=java_names.SEGMENT_SPEC,
                                pieces_class=java_names.SEGMENT_PIECES,
                                line=segment_line(storage, segment), label=label)
        data = decoded(reply) if "data" in reply else b""
        return Read(data, reply.get("message") if "error" in reply else None)
