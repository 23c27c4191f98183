"""The cached-table capability's ``spark.steward.cache.*`` keys.

Declared here, listed with every other key by :data:`spark_steward.config.KEYS` (this module is
the ``config`` of the capability's declaration), and read typed through
:meth:`spark_steward.config.StewardConf.get`.
"""

from __future__ import annotations

from spark_steward.config import BOOL, DURATION, SIZE, STRING, ConfigKey

CACHE_MAX_BYTES = ConfigKey(
    "spark.steward.cache.max-bytes", SIZE, "0",
    "Most bytes of materialized cached tables an application keeps (`0`: unbounded). A new "
    "materialization that would exceed it first evicts the least recently used caches no live "
    "`CachedTable` object refers to, with a log line; when that cannot make room the table is used uncached "
    "with a warning, never a failed job.", minimum=0)
CACHE_HOST_REPLICAS = ConfigKey(
    "spark.steward.cache.host-replicas", STRING, "auto",
    "Executors keep a verified host-local replica of each cached-table file they read, in the "
    "working dir (`local.dir`, bounded by `local.max-bytes`), so later reads on that host skip "
    "the storage dir: `auto` (on unless the storage dir is a local filesystem), `true` or "
    "`false`. Settable per session.",
    choices=("auto", "true", "false"))
CACHE_TRANSPARENT = ConfigKey(
    "spark.steward.cache.transparent", BOOL, "false",
    "Routes `df.cache()` and `df.persist()` of sessions with spark-steward on through "
    "spark-steward's cached tables (materialized once as Parquet in the storage dir, verified, "
    "cleaned up); `df.unpersist()` invalidates.")
CACHE_ORPHAN_GRACE = ConfigKey(
    "spark.steward.cache.orphan-grace", DURATION, "1h",
    "Cached-table data, manifests and user records that no entry owns are deleted at attach and "
    "by `spark-steward gc` once they are this old (a safety window for writers on storage that "
    "lists new objects late).", minimum=0)
CACHE_SHARED_RETENTION = ConfigKey(
    "spark.steward.cache.shared-retention", DURATION, "1h",
    "A shared cached table no running application uses any more is kept this long for the "
    "next application computing the same plan, then deleted by the next attach or "
    "`spark-steward gc` (staged cleanup; `0`: deleted when its last user stops).", minimum=0)
