"""Every shim class the conformance suite reaches by name is a class of the shim's sources: a
class moved without java_names.py following fails here, by name, before any JVM starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import java_names

SOURCES = Path(__file__).resolve().parents[2] / "jvm-shim" / "src" / "main" / "java"
NAMES = sorted({value for key, value in vars(java_names).items()
                if key.isupper() and isinstance(value, str) and ".shim." in value})


@pytest.mark.parametrize("name", NAMES)
def test_a_named_class_is_in_the_shim_sources(name: str) -> None:
    outer, _, nested = name.partition("$")
    source = SOURCES / (outer.replace(".", "/") + ".java")
    assert source.is_file(), f"{name} (tests/conformance/java_names.py) is not at {source}"
    if nested:
        assert f"class {nested} " in source.read_text(), f"{source} has no class {nested}"
