"""What a checkpoint storage dir holds after a crash and its recovery: every file owned, or a
named problem. Shared by the SIGKILL matrix (tests/faults/test_checkpoint_crashes.py) and the
crash model (tests/unit/test_checkpoint_crash_model.py)."""

from __future__ import annotations

from typing import Any

from spark_steward.checkpoint import metadata as layout
from spark_steward.checkpoint.lifecycle import CheckpointKind, CheckpointState
from spark_steward.checkpoint.metadata import CheckpointMetadata
from spark_steward.storage import Storage


def owned_files(storage: Storage, series: str = "s"
                ) -> tuple[list[str], dict[int, dict[str, Any]]]:
    """Problems with the files under ``checkpoints/``, and the artifacts of the completed
    checkpoints of ``series`` by number. Every file must be a completed entry of a series, its
    artifact, or a file its artifact lists in its data folder, with the listed size."""
    meta = CheckpointMetadata(storage)
    problems: list[str] = []
    artifacts: dict[int, dict[str, Any]] = {}
    files = {f.path: f.size for f in storage.walk_files(layout.ROOT)}
    entries, corrupt = meta.load()
    problems += [f"corrupt entry {p}" for p in corrupt]
    owned: set[str] = set()
    for entry in entries:
        owned.add(layout.entry_path(entry.series, entry.number))
        if entry.state is not CheckpointState.COMPLETED or entry.kind is not CheckpointKind.SERIES:
            problems.append(f"entry {entry.id} is {entry.state.value} ({entry.kind.value}, "
                            f"app {entry.app_id})")
            continue
        artifact_rel = layout.artifact_path(entry.series, entry.number)
        if artifact_rel not in files:
            problems.append(f"completed {entry.id} has no artifact")
            continue
        owned.add(artifact_rel)
        artifact = meta.read_artifact(entry.series, entry.number)
        listed = {f["name"]: f["bytes"] for f in artifact["files"]}
        present = {path.rsplit("/", 1)[1]: size for path, size in files.items()
                   if path.startswith(entry.data + "/")}
        if present != listed:
            problems.append(f"data of {entry.id}: {sorted(present.items())} on disk, "
                            f"{sorted(listed.items())} listed")
        owned |= {f"{entry.data}/{name}" for name in present if name in listed}
        if entry.series == series:
            artifacts[entry.number] = artifact
    problems += [f"unowned file {path} ({size} bytes)" for path, size in sorted(files.items())
                 if path not in owned]
    return problems, artifacts
