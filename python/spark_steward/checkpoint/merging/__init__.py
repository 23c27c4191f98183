"""File-merged checkpoints (FLIP-306), a sub-part of the checkpoint store: ``lifecycle`` (the
pure segment relation: which physical files are still needed), ``segment_files`` (executor-side
IO of segments) and ``dataframes`` (saving and restoring DataFrames as merged segments)."""
