"""``spark_steward.blobs``: the blob service's public API, importable under the name users are
told to use (``import spark_steward.blobs`` works like ``import spark_steward.local``).

A thin re-export of :mod:`spark_steward.blob.api`, where the calls are defined and documented.
"""

from __future__ import annotations

from spark_steward.blob.api import (BlobKey, BlobRef, Offloaded, get, ls, offload, open,
                                    put, read_bytes)

__all__ = ["BlobRef", "BlobKey", "put", "get", "open", "read_bytes", "offload", "Offloaded",
           "ls"]
