"""The pyspark lines of the compatibility tier and which of them a run asks for (no imports
beyond the standard library: ``python -m tests.compat.run`` reads it before pytest starts)."""

from __future__ import annotations

import os

#: The release each line is tested with.
LINES = {"3.5": "3.5.9", "4.0": "4.0.5", "4.1": "4.1.4", "4.2": "4.2.1", "4.3": "4.3.0"}
#: Older lines, for the guard: spark-steward warns once there and the job runs as plain Spark.
OLDER = {"3.4": "3.4.4"}
#: What plain ``pytest`` runs (the CI budget, about a minute each): the oldest supported line
#: (the installed pyspark's line runs in every other tier) and the newest unsupported one,
#: where spark-steward must step aside with one warning.
DEFAULT_LINES = ("3.5", "3.4")
LINES_ENV = "SPARK_STEWARD_COMPAT_LINES"


def requested_lines(value: str | None = None) -> list[str]:
    """The lines named in ``value`` (else ``$SPARK_STEWARD_COMPAT_LINES``, else the default),
    e.g. ``"3.5,4.0"``; ValueError naming the known lines for any other."""
    raw = value if value is not None else os.environ.get(LINES_ENV, "")
    lines = [item.strip() for item in raw.split(",") if item.strip()] or list(DEFAULT_LINES)
    unknown = [line for line in lines if line not in LINES and line not in OLDER]
    if unknown:
        raise ValueError(f"{LINES_ENV}: unknown pyspark line(s) {', '.join(unknown)}; "
                         f"known: {', '.join([*LINES, *OLDER])}")
    return lines
