"""The conformance JVM, shared by every suite of a session: one standalone JVM (no Spark
application), started with the folder's first test so that its start overlaps the Python
side's tests."""

from __future__ import annotations

import shutil
from typing import Iterator

import pytest

from tests.conformance.jvm import JvmDriver


@pytest.fixture(scope="session", autouse=True)
def _jvm_started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JvmDriver | None]:
    if shutil.which("java") is None:
        yield None
        return
    driver = JvmDriver(tmp_path_factory.mktemp("conformance-jvm") / "jvm.stderr")
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def jvm(_jvm_started: JvmDriver | None) -> JvmDriver:
    if _jvm_started is None:
        pytest.skip("needs a JVM")
    return _jvm_started
