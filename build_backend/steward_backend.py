"""PEP 517 backend: setuptools, plus the two things a plain wheel cannot do.

1. Compile the JVM shim (jvm-shim/) with javac against Spark's jars and put the jar inside the
   package. There is no Maven: an installed pyspark (or SPARK_HOME) is the classpath; only when
   neither is there does the build ask pip for pyspark.
2. Put ``spark_steward_autoload.pth`` at the root of the wheel, so an unmodified script run with
   ``--conf spark.steward.enabled=true`` is seen without importing spark-steward.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import zipfile
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools

ROOT = Path(__file__).resolve().parent.parent
PTH_NAME = "spark_steward_autoload.pth"
PTH_LINE = "import _spark_steward_autoload\n"


def _shim_build() -> Any:
    path = ROOT / "python" / "spark_steward" / "kernel" / "shim_build.py"
    spec = importlib.util.spec_from_file_location("_steward_shim_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spark_requirements() -> list[str]:
    shim_build = _shim_build()
    try:
        shim_build.find_spark_jars()
        return []
    except shim_build.ShimBuildError:
        return ["pyspark>=3.5,<5"]


def _compile_jar() -> None:
    shim_build = _shim_build()
    out = ROOT / "python" / "spark_steward" / "jars" / shim_build.JAR_NAME
    try:
        shim_build.compile_shim(ROOT / "jvm-shim" / "src" / "main" / "java", out)
    except shim_build.ShimBuildError as exc:
        raise SystemExit(f"spark-steward build failed: {exc}") from None


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _add_pth(wheel_directory: str, wheel_name: str) -> None:
    """Adds the .pth file to the wheel and to its RECORD."""
    path = Path(wheel_directory) / wheel_name
    tmp = path.with_suffix(".tmp")
    data = PTH_LINE.encode()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            content = src.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = content.decode().splitlines()
                lines.insert(0, f"{PTH_NAME},{_record_hash(data)},{len(data)}")
                content = ("\n".join(lines) + "\n").encode()
            dst.writestr(item, content)
        dst.writestr(PTH_NAME, data)
    os.replace(tmp, path)


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return _setuptools.get_requires_for_build_wheel(config_settings) + _spark_requirements()


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    return _setuptools.get_requires_for_build_editable(config_settings) + _spark_requirements()


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    return _setuptools.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str,
                                        config_settings: Any = None) -> str:
    return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Any = None,
                metadata_directory: str | None = None) -> str:
    _compile_jar()
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    _add_pth(wheel_directory, name)
    return name


def build_editable(wheel_directory: str, config_settings: Any = None,
                   metadata_directory: str | None = None) -> str:
    _compile_jar()
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    _add_pth(wheel_directory, name)
    return name


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    return _setuptools.build_sdist(sdist_directory, config_settings)
