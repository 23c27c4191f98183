"""The JVM shim compiles with javac against pyspark's jars; a missing JDK says what to install."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from spark_steward.kernel import shim_build

SOURCES = Path(__file__).resolve().parents[2] / "jvm-shim" / "src" / "main" / "java"


def test_compiles_every_class_into_the_jar(tmp_path: Path) -> None:
    jar = shim_build.compile_shim(SOURCES, tmp_path / "shim.jar")
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        manifest = z.read("META-INF/MANIFEST.MF").decode()
    for cls in ("StewardPlugin", "PythonFacade", "kernel/EventBridge", "kernel/EventBuffer",
                "kernel/EventEncoder", "kernel/StewardListener", "blob/PeerServer",
                "tables/ReplicaFileSystem", "streams/StreamCheckpointFiles",
                "streams/StreamCheckpointFilesV40",
                # the managers' names before the shim had packages, kept for confs that hold them
                "StreamCheckpointFiles", "StreamCheckpointFilesV40"):
        assert f"io/sparksteward/shim/{cls}.class" in names
    # The compile-time stand-ins of Spark's traits never ship: Spark's own classes must load.
    assert not [n for n in names if n.startswith("org/")], names
    assert f"Spark-Steward-Source: {shim_build.source_digest(SOURCES)}" in manifest
    assert not list(tmp_path.glob("*.tmp"))


def test_missing_javac_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.setattr(shim_build.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(shim_build.ShimBuildError) as info:
        shim_build.compile_shim(SOURCES, tmp_path / "shim.jar")
    assert "`javac` was not found" in str(info.value)
    assert "openjdk-17-jdk-headless" in str(info.value)
    assert not (tmp_path / "shim.jar").exists()


def test_no_spark_jars_says_where_it_looked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
                                           ) -> None:
    monkeypatch.setattr(shim_build, "candidate_jar_dirs", lambda: [tmp_path / "nowhere"])
    with pytest.raises(shim_build.ShimBuildError) as info:
        shim_build.find_spark_jars()
    assert str(tmp_path / "nowhere") in str(info.value) and "pip install pyspark" in str(info.value)


def test_javac_errors_are_reported_not_swallowed(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "Broken.java").write_text("class Broken { int x = ; }")
    with pytest.raises(shim_build.ShimBuildError, match="javac failed"):
        shim_build.compile_shim(src, tmp_path / "out.jar")


def test_installed_jar_is_the_packaged_one() -> None:
    import spark_steward

    path = Path(spark_steward.jar_path())
    assert path.is_file() and os.path.getsize(path) > 0
