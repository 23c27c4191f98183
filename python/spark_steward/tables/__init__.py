"""Cached tables (FLIP-36): materialized DataFrames with owners, manifests and cleanup.

``lifecycle`` (the pure state machine and key scheme), ``manifest``/``store`` (durable entries
and the files' checks), ``service`` (the driver's catalog and the resolver the shim's rule asks),
``cached_table`` (``spark_steward.cache`` and the CachedTable DataFrame), ``hooks`` (transparent
``df.cache()``), ``code_identity`` (the identity of a plan's Python code, for sharing),
``replicas`` (host-local replicas of remote tables) and ``gc``.
"""
