"""The SparkSession the blob and checkpoint benchmarks run in: local-cluster[2,1,1024] with
spark-steward enabled through its conf flags, every folder under one temp dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def steward_session(tmp: Path, app_name: str, **extra: str) -> Any:
    """A new session; ``extra`` are further Spark conf pairs (they win over the defaults)."""
    from pyspark.sql import SparkSession

    import spark_steward

    conf = {
        "spark.jars": str(spark_steward.jar_path()),
        "spark.plugins": "io.sparksteward.shim.StewardPlugin",
        "spark.steward.enabled": "true",
        "spark.steward.local.dir": str(tmp / "steward-local"),
        "spark.steward.storage.dir": (tmp / "steward-storage").as_uri(),
        "spark.local.dir": str(tmp / "spark-local"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.executor.cores": "1",
        **extra,
    }
    builder = SparkSession.builder.master("local-cluster[2,1,1024]").appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
