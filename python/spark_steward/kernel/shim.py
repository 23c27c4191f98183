"""Finds the JVM shim jar: the one installed inside the package, or, from a source checkout, one
compiled on first use into a cache directory. Errors say where it looked."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from spark_steward.errors import SetupError
from spark_steward.kernel import shim_build

log = logging.getLogger(__name__)

def packaged_jar() -> Path:
    """Where the wheel ships the shim jar."""
    return Path(__file__).resolve().parent.parent / "jars" / shim_build.JAR_NAME


def _source_dir() -> Path | None:
    candidate = Path(__file__).resolve().parents[3] / "jvm-shim" / "src" / "main" / "java"
    return candidate if candidate.is_dir() else None


def jar_path(override: str = "") -> Path:
    """Path of the shim jar; builds it from a source checkout when nothing is installed."""
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise SetupError(f"spark.steward.shim.jar={override!r}: no such file")
        return path
    packaged = packaged_jar()
    if packaged.is_file():
        return packaged
    source = _source_dir()
    if source is None:
        raise SetupError(
            f"the spark-steward JVM shim jar is missing: looked for {packaged} and for sources "
            "beside the package; reinstall spark-steward (pip install --force-reinstall "
            "spark-steward)")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spark-steward"
    built = cache / shim_build.source_digest(source) / shim_build.JAR_NAME
    if not built.is_file():
        log.info("compiling the spark-steward JVM shim from %s into %s", source, built)
        try:
            shim_build.compile_shim(source, built)
        except shim_build.ShimBuildError as exc:
            raise SetupError(str(exc)) from None
    return built


def jar_has_class(jar: Path, name: str) -> bool:
    """Whether ``jar`` holds class ``name`` (dotted): the Connect extension is compiled only
    against Spark lines with Connect (shim_build.has_connect)."""
    import zipfile

    try:
        with zipfile.ZipFile(jar) as archive:
            return name.replace(".", "/") + ".class" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
