"""File-merged checkpoints (FLIP-306): logical segments inside shared physical files, and which
physical files are still needed. Pure: records in, decisions out.

A merged checkpoint's partitions are *segments*: byte ranges of physical files. A save writes
its new segments into files below its own *creator folder* (``.../merged/<series>/<number>``)
and, across checkpoints, may reuse the unchanged segments of earlier checkpoints in their files.

What is referenced is derived from the durable entries each time, never counted (Flink moved
from counters that drift on a lost notification to this, FLINK-38347):

- a live entry (pending or completed) references every physical file in its ``physical`` list;
  a pending entry lists the files it reuses before it writes anything;
- a pending entry also protects its whole creator folder: it may be writing there now;
- an entry marked for deletion references nothing.

A physical file is deletable exactly when no live entry references it and no pending entry's
creator folder holds it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping

from spark_steward.checkpoint.lifecycle import CheckpointEntry, CheckpointState


@dataclass(frozen=True)
class Segment:
    """One partition of a merged checkpoint: ``length`` bytes at ``offset`` of ``file``.

    ``file`` is relative to the storage root. The bytes are one Arrow IPC stream; ``crc32c``
    (8 hex digits) is checked on every read; ``sha256`` keys reuse across checkpoints.
    """

    partition: int
    file: str
    offset: int
    length: int
    rows: int
    crc32c: str
    sha256: str

    @property
    def end(self) -> int:
        """The offset just past the segment in its physical file."""
        return self.offset + self.length

    def to_json(self) -> dict[str, object]:
        """The segment as a JSON-able dict."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, body: Mapping[str, object]) -> "Segment":
        """The segment a JSON dict describes."""
        def number(name: str) -> int:
            return int(str(body[name]))

        return cls(partition=number("partition"), file=str(body["file"]),
                   offset=number("offset"), length=number("length"), rows=number("rows"),
                   crc32c=str(body["crc32c"]), sha256=str(body["sha256"]))


def creator_folder(file: str) -> str:
    """The folder of the save that wrote ``file``."""
    return posixpath.dirname(file)


def is_live(entry: CheckpointEntry) -> bool:
    """True when ``entry``'s segments still count (it is not being discarded)."""
    return entry.state is not CheckpointState.DISCARDING


def referenced_files(entries: Iterable[CheckpointEntry]) -> set[str]:
    """Physical files some live entry lists."""
    found: set[str] = set()
    for entry in entries:
        if is_live(entry):
            found.update(entry.physical)
    return found


def protected_folders(entries: Iterable[CheckpointEntry]) -> set[str]:
    """Creator folders of pending merged saves: whatever is in them may be being written."""
    return {entry.data for entry in entries
            if entry.state is CheckpointState.PENDING and entry.merged}


def deletable_files(files: Iterable[str], entries: Iterable[CheckpointEntry]) -> list[str]:
    """Of ``files`` (listed *before* ``entries`` were read), those nothing needs any more.

    Listing first and reading entries second is what makes this safe against a concurrent
    save: its pending entry is durable before its first file exists, and its reuse list is in
    that entry, so a file listed here has its owners among ``entries``.
    """
    entries = list(entries)
    referenced = referenced_files(entries)
    protected = protected_folders(entries)
    return sorted(f for f in files
                  if f not in referenced and creator_folder(f) not in protected)


# -- space amplification ----------------------------------------------------------------------


@dataclass(frozen=True)
class Amplification:
    """Physical bytes over live logical bytes of one series."""

    physical_bytes: int
    live_bytes: int

    @property
    def ratio(self) -> float:
        """Physical bytes over live bytes (1.0 when nothing is stored; inf when nothing is live)."""
        if self.live_bytes <= 0:
            return 1.0 if self.physical_bytes <= 0 else float("inf")
        return self.physical_bytes / self.live_bytes


def live_bytes_by_file(segments: Iterable[Segment]) -> dict[str, int]:
    """Bytes of distinct segments per physical file (a segment shared by several checkpoints
    counts once)."""
    seen: set[tuple[str, int]] = set()
    by_file: dict[str, int] = {}
    for seg in segments:
        if (seg.file, seg.offset) in seen:
            continue
        seen.add((seg.file, seg.offset))
        by_file[seg.file] = by_file.get(seg.file, 0) + seg.length
    return by_file


def amplification(file_sizes: Mapping[str, int], live_segments: Iterable[Segment]
                  ) -> Amplification:
    """Amplification of a series whose physical files have ``file_sizes`` and whose live
    checkpoints use ``live_segments``."""
    live = live_bytes_by_file(live_segments)
    return Amplification(sum(file_sizes.values()), sum(live.values()))


def choose_rewrites(file_sizes: Mapping[str, int], live_segments: Iterable[Segment],
                    candidates: Iterable[Segment], bound: float) -> list[str]:
    """Physical files whose ``candidates`` (the segments of the checkpoint being completed)
    should be copied into a new file so the series gets back under ``bound``.

    The state judged is the one after retention catches up: only ``live_segments`` (what the
    retained checkpoints, this one included, use) stay referenced. The most wasteful files
    (lowest live share) go first; copying a file's live bytes into a new file replaces its
    whole size by those bytes. ``bound`` below 1 disables rewriting.
    """
    if bound < 1:
        return []
    live_segments = list(live_segments)
    live = live_bytes_by_file(live_segments)
    mine = live_bytes_by_file(candidates)
    sizes = {f: file_sizes.get(f, 0) for f in live}
    total_live = sum(live.values())
    physical = sum(sizes.values())
    if total_live <= 0 or physical <= bound * total_live:
        return []
    order = sorted((f for f in mine if live.get(f) == mine[f] and sizes.get(f, 0) > mine[f]),
                   key=lambda f: (mine[f] / max(1, sizes[f]), f))
    chosen = []
    for f in order:
        if physical <= bound * total_live:
            break
        physical -= sizes[f] - mine[f]
        chosen.append(f)
    return chosen
