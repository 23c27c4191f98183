"""The streams capability as spark-steward plugs it in: declared in setup.cfg's entry point
group ``spark_steward.services`` exactly as a third party's (:mod:`spark_steward.capabilities`).

Structured Streaming checkpoint locations, owned.
"""

from __future__ import annotations

from spark_steward.capabilities import Capability

CAPABILITY = Capability(
    "streams",
    service="spark_steward.streams.service:StreamService",
    cli="spark_steward.streams.cli:register",
    gc="spark_steward.streams.cli:COLLECTOR",
    config="spark_steward.streams.config_keys",
    errors="spark_steward.streams.errors",
)
