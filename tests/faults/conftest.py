"""Fault tests that need the shared local-cluster session use the Spark tests' fixtures."""

from tests.spark.conftest import (  # noqa: F401 - fixtures and the conf hook, re-exported
    _reset_job_state, pytest_configure, recorder, runtime, spark)
