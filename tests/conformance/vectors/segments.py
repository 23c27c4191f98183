"""Test vectors of merged checkpoint segments: physical files of several segments, in folders
whose names a listing must carry through (a space, non-ASCII letters, a literal ``%20``), and
the damage storage can do to them.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from pathlib import Path

from spark_steward.checkpoint.merging.lifecycle import Segment
from spark_steward.checksum import crc32c_of, format_crc
from spark_steward.storage import Storage

#: Storage roots by vector id (under a test's temporary folder).
ROOTS: dict[str, str] = {
    "plain": "checkpoints",
    "space": "my checkpoints",
    "non-ascii": "pr\u00fcfung-\u8868",
    "percent": "a%20b",
}
FOLDER = "checkpoints/merged/s/0000000007"
LABEL = "checkpoint pagerank/7"
#: Segment sizes: small, past the JVM's 4 MiB read piece, one byte, empty, small.
SIZES = (3000, (4 << 20) + 5, 1, 0, 2000)


def storage_at(base: Path, root: str = "plain") -> Storage:
    path = base / ROOTS[root]
    path.mkdir(parents=True, exist_ok=True)
    return Storage.from_url(str(path))


def segment_file(storage: Storage, name: str = "h-0000.arrows", seed: int = 1
                 ) -> tuple[list[Segment], list[bytes]]:
    """A physical file of segments of :data:`SIZES`, one after another; their records and
    bytes, by partition."""
    rng = random.Random(seed)
    parts = [rng.randbytes(size) for size in SIZES]
    rel = f"{FOLDER}/{name}"
    target = Path(storage.path(rel))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"".join(parts))
    segments, offset = [], 0
    for partition, data in enumerate(parts):
        segments.append(Segment(partition=partition, file=rel, offset=offset, length=len(data),
                                rows=len(data) // 10, crc32c=format_crc(crc32c_of(data)),
                                sha256=hashlib.sha256(data).hexdigest()))
        offset += len(data)
    return segments, parts


def what(storage: Storage, segment: Segment) -> str:
    """How both readers name a segment in an error."""
    return (f"{LABEL}: segment of partition {segment.partition} in "
            f"{storage.url_of(segment.file)} (bytes {segment.offset}..{segment.end})")


def past_the_end(segment: Segment, size: int) -> Segment:
    """``segment`` moved to start past a file of ``size`` bytes."""
    return replace(segment, offset=size + 10)


#: Where the runtimes are known to disagree: (runtime, vector) -> the difference. The suite
#: expects these to fail (strictly: a fix makes the entry go).
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {
    ("java", "empty-past-the-end"):
        "an empty segment whose offset lies past the end of its file: Python fails it as "
        "truncated, the JVM delivers nothing and no error (it never opens the file for 0 "
        "bytes). No empty segment is written (each is an Arrow stream, its schema first), and "
        "a restore checks the files' sizes first (check_segments_exist)",
}
