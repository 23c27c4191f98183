"""The blobs capability as spark-steward plugs it in: declared in setup.cfg's entry point
group ``spark_steward.services`` exactly as a third party's (:mod:`spark_steward.capabilities`).

BLOB service (FLIP-19): verified blobs served by the driver, cached on executors.
"""

from __future__ import annotations

from spark_steward.capabilities import Capability

CAPABILITY = Capability(
    "blobs",
    service="spark_steward.blob.service:BlobService",
    cli="spark_steward.blob.cli:register",
    gc="spark_steward.blob.cli:COLLECTOR",
    config="spark_steward.blob.config_keys",
    errors="spark_steward.blob.errors",
)
