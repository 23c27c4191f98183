"""The local capability's ``spark.steward.*`` key (``spark.steward.local.dir`` is the kernel's:
every process needs it before any capability runs).

Declared here, listed with every other key by :data:`spark_steward.config.KEYS` (this module is
the ``config`` of the capability's declaration), and read typed through
:meth:`spark_steward.config.StewardConf.get`.
"""

from __future__ import annotations

from spark_steward.config import SIZE, ConfigKey

LOCAL_MAX_BYTES = ConfigKey(
    "spark.steward.local.max-bytes", SIZE, "0",
    "Most bytes of host-local files (blob cache, `local.state` values, table replicas) one "
    "application keeps "
    "on each host (`0`: unbounded). The least recently used entries no task uses are evicted "
    "first; when that cannot make room a `put` fails with `LocalSpaceFull` and a blob read streams "
    "into a file of the task instead.", minimum=0)
