"""Shared test set-up: keep the user's own Spark and spark-steward config out of every test."""

from __future__ import annotations

import os
import tempfile

# Before any JVM starts: local-cluster workers write under SPARK_WORKER_DIR (else inside the
# pyspark install), and a developer's SPARK_CONF_DIR must not leak into the tests.
_WORK = tempfile.mkdtemp(prefix="spark-steward-tests-")
os.environ["SPARK_WORKER_DIR"] = os.path.join(_WORK, "worker")
os.environ.pop("SPARK_CONF_DIR", None)
os.environ.pop("SPARK_REMOTE", None)
os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
TEST_ROOT = _WORK
