"""The conformance JVM, shared by every suite of a session (one standalone JVM: no Spark
application)."""

from __future__ import annotations

import shutil
from typing import Iterator

import pytest

from tests.conformance.jvm import JvmDriver


@pytest.fixture(scope="session")
def jvm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JvmDriver]:
    if shutil.which("java") is None:
        pytest.skip("needs a JVM")
    driver = JvmDriver(tmp_path_factory.mktemp("conformance-jvm") / "jvm.stderr")
    try:
        yield driver
    finally:
        driver.close()
