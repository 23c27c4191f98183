"""The local capability as spark-steward plugs it in: declared in setup.cfg's entry point
group ``spark_steward.services`` exactly as a third party's (:mod:`spark_steward.capabilities`).

Host-local files: the working directory and its manifest, and local.state stores.
"""

from __future__ import annotations

from spark_steward.capabilities import Capability

CAPABILITY = Capability(
    "local",
    service="spark_steward.local.service:LocalService",
    gc="spark_steward.local.cli:COLLECTOR",
    config="spark_steward.local.config_keys",
    errors="spark_steward.local.errors",
)
