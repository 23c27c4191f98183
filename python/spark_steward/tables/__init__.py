"""Cached tables (FLIP-36): durable entries, manifests and cleanup of materialized DataFrames.

No Spark in here: the Spark glue writes the Parquet files and calls :class:`TableStore`.
"""
