"""What a store's failover (``recover``) found at attach or in ``spark-steward gc``: shared by
:class:`~spark_steward.checkpoint.store.CheckpointStore` and
:class:`~spark_steward.tables.store.TableStore`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecoveryReport:
    """``kept`` and ``discarding`` name entries (checkpoint ids ``series/number``, cached table
    keys); ``orphans`` and ``corrupt`` are paths relative to the storage root."""

    kept: list[str] = field(default_factory=list)
    discarding: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
