"""The tables capability as spark-steward plugs it in: declared in setup.cfg's entry point
group ``spark_steward.services`` exactly as a third party's (:mod:`spark_steward.capabilities`).

Cached tables (FLIP-36): materialized DataFrames with owners and cleanup.
"""

from __future__ import annotations

from spark_steward.capabilities import Capability

CAPABILITY = Capability(
    "tables",
    service="spark_steward.tables.service:TableService",
    cli="spark_steward.tables.cli:register",
    gc="spark_steward.tables.cli:COLLECTOR",
    config="spark_steward.tables.config_keys",
    errors="spark_steward.tables.errors",
)
