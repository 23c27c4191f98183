"""The multi-host harness (``harness.py``) for tests: one session cluster of three worker hosts
with S3, shared by every test of this folder that asks for ``cluster``.

Every test here is marked ``cluster``. Where the harness cannot run (not root, no ``ip netns``,
no Java...) the fixture skips with the one-line reason from :func:`harness.unavailable`.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Iterator

import pytest

from tests.cluster.harness import Cluster, HarnessError, unavailable

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A started cluster: driver, master, w1..w3 (1 core, 1 GiB each) and s3 (moto)."""
    reason = unavailable()
    if reason:
        pytest.skip(f"cluster harness unavailable: {reason}")
    c = Cluster(workers=3, s3=True)
    atexit.register(c.close)  # the harness registers one too; both are idempotent
    try:
        c.start()
    except HarnessError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield c
    finally:
        c.close()
