"""The checkpoints capability as spark-steward plugs it in: declared in setup.cfg's entry point
group ``spark_steward.services`` exactly as a third party's (:mod:`spark_steward.capabilities`).

Checkpoint store (FLIP-270): checkpoint series with repeatable cleanup.
"""

from __future__ import annotations

from spark_steward.capabilities import Capability

CAPABILITY = Capability(
    "checkpoints",
    service="spark_steward.checkpoint.service:CheckpointService",
    cli="spark_steward.checkpoint.cli:register",
    gc="spark_steward.checkpoint.cli:COLLECTOR",
    config="spark_steward.checkpoint.config_keys",
    errors="spark_steward.checkpoint.errors",
)
