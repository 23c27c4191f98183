"""One application of the differential test of shared cached tables (identity_kinds.py).

    shared_identity_job.py base|raced|variant WORKDIR OUT_JSON

For every kind, in a session of its own: the kind's DataFrame computed directly, then through
``spark_steward.cache(df, shared=True)``, with the storage key it got. ``base`` builds the kinds'
bases, ``variant`` their variants (the test changed files and modules in between).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import SparkSession

import identity_kinds
import spark_steward

# The kinds' own functions travel by value, like a notebook's; modules under mods/ by reference.
cloudpickle.register_pickle_by_value(identity_kinds)


def _rows(df: Any) -> tuple[list[list[str]] | None, str | None]:
    try:
        return sorted([repr(v) for v in row] for row in df.collect()), None
    except Exception as exc:  # a plan that fails must fail the same way cached
        return None, type(exc).__name__


def main() -> None:
    role, workdir, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    spark = SparkSession.builder.appName(f"shared-identity-{role}").getOrCreate()
    report: dict[str, Any] = {"app_id": spark.sparkContext.applicationId, "kinds": {}}
    for kind in identity_kinds.KINDS:
        if role == "raced" and kind.name not in identity_kinds.RACED:
            continue
        session = spark.newSession()
        is_variant = role == "variant"
        for key, value in (kind.variant_conf if is_variant else kind.base_conf).items():
            session.conf.set(key, value)
        direct, direct_error = _rows(kind.build(session, workdir, is_variant))
        table = spark_steward.cache(kind.build(session, workdir, is_variant), shared=True)
        cached, cached_error = _rows(table)
        report["kinds"][kind.name] = {
            "direct": direct, "direct_error": direct_error, "cached": cached,
            "cached_error": cached_error, "key": table.storage_key}
    Path(out).write_text(json.dumps(report, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
