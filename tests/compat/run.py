"""The compatibility tier on chosen pyspark lines (plain ``pytest`` runs 3.5 and 3.4).

    python -m tests.compat.run --lines 3.5,4.0,4.1,4.2 [pytest options]
    python -m tests.compat.run --lines 3.4          # only the older Spark (plain pytest runs it too)

Each line's pyspark is installed once per machine (tests/compat/harness.py); the same as
``SPARK_STEWARD_COMPAT_LINES=3.5,4.0 python -m pytest tests/compat``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from tests.compat.lines import DEFAULT_LINES, LINES, LINES_ENV, OLDER, requested_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compat.run", description=__doc__)
    parser.add_argument("--lines", default=",".join(DEFAULT_LINES),
                        help=f"comma-separated pyspark lines, of {', '.join(LINES)} (and "
                             f"{', '.join(OLDER)}, which spark-steward refuses; default "
                             f"{','.join(DEFAULT_LINES)})")
    args, pytest_args = parser.parse_known_args(argv)
    try:
        requested_lines(args.lines)
    except ValueError as exc:
        parser.error(str(exc))
    os.environ[LINES_ENV] = args.lines
    return int(pytest.main([str(Path(__file__).parent), *pytest_args]))


if __name__ == "__main__":
    sys.exit(main())
