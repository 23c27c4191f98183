"""Host-local replicas of cached tables on remote storage.

A cached table's files are read by the executors' JVMs through Hadoop. On remote storage each
host keeps a verified replica of the files it read, as entries ``table-replicas/<path>`` of the
application's working dir (:mod:`spark_steward.local.working_dir`), so later reads on that host
skip the remote read. The shim's ``ReplicaFileSystem`` does the reading side: the table is read
from ``stewardrep://<app id>/<path under the storage dir>``, which it maps to the storage dir and
serves from the replica when one verifies.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from spark_steward.local.config_keys import LOCAL_MAX_BYTES
from spark_steward.tables.config_keys import CACHE_HOST_REPLICAS
from spark_steward.tables.errors import CacheError
from spark_steward.kernel import jvm
from spark_steward.kernel.session import session_value

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_steward.kernel.runtime import DriverRuntime
    from spark_steward.storage import Storage

log = logging.getLogger(__name__)

SCHEME = "stewardrep"
FS_CLASS = "io.sparksteward.shim.tables.ReplicaFileSystem"
CONF_PREFIX = "spark.steward.replica."
_AUTHORITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")


def replicas_wanted(runtime: "DriverRuntime", session: "SparkSession", storage: "Storage") -> bool:
    """``spark.steward.cache.host-replicas`` for ``session``: ``auto`` means on when the storage
    dir is not a local filesystem (there a replica would copy a file next to itself)."""
    mode = session_value(session, CACHE_HOST_REPLICAS, runtime.conf.get(CACHE_HOST_REPLICAS))
    if mode == "false" or (mode == "auto" and storage.is_local):
        return False
    if not _AUTHORITY.fullmatch(runtime.app_id):
        log.warning("cached tables are read without host-local replicas: application id %r "
                    "cannot be a URI authority", runtime.app_id)
        return False
    return True


def read_url(runtime: "DriverRuntime", session: "SparkSession", storage: "Storage",
             data_rel: str) -> str:
    """The URL the executors read a table's folder ``data_rel`` from: the replicating view
    when replicas are wanted (configuring it in the context's Hadoop conf, which every scan
    ships to the executors), else the storage's own Hadoop URL."""
    direct = jvm.hadoop_url(storage.url_of(data_rel), "cached tables", CacheError)
    if not replicas_wanted(runtime, session, storage):
        return direct
    app = runtime.app_id
    hadoop = jvm.hadoop_conf(runtime.sc)
    hadoop.set(f"fs.{SCHEME}.impl", FS_CLASS)
    hadoop.set(f"{CONF_PREFIX}{app}.target", jvm.hadoop_url(storage.url_of(), "cached tables",
                                                             CacheError))
    hadoop.set(f"{CONF_PREFIX}{app}.workdir", str(Path(runtime.conf.local_dir()) / app))
    hadoop.set(f"{CONF_PREFIX}{app}.max-bytes", str(runtime.conf.get(LOCAL_MAX_BYTES)))
    return f"{SCHEME}://{app}/{data_rel.strip('/')}"
