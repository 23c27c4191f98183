"""The suite's own machinery: how pytest -n shares the files (tests/support/schedule.py) and the
test JVMs' options (tests/support/class_cache.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import class_cache, schedule

IDS = ["tests/unit/test_a.py::t1", "tests/unit/test_a.py::t2",
       "tests/spark/test_b.py::t1", "tests/cluster/test_c.py::t1",
       "tests/unit/test_new.py::t1", "tests/cluster/test_d.py::t1",
       "tests/spark/test_b.py::t2", "tests/faults/test_e.py::Case::t1"]


def test_a_file_is_one_unit_and_the_cluster_folder_is_one() -> None:
    assert schedule.unit_of("tests/spark/test_b.py::t1[x-y]") == "tests/spark/test_b.py"
    assert schedule.unit_of("tests/faults/test_e.py::Case::t1") == "tests/faults/test_e.py"
    assert schedule.unit_of("tests/cluster/test_c.py::t1") == schedule.unit_of(
        "tests/cluster/test_d.py::t9") == "tests/cluster"


def test_units_go_longest_first_each_whole_in_its_collected_order() -> None:
    recorded = {"tests/unit/test_a.py": 3.0, "tests/spark/test_b.py": 50.0,
                "tests/cluster/test_c.py": 40.0, "tests/cluster/test_d.py": 30.0,
                "tests/faults/test_e.py": 1.0}
    order = schedule.longest_first(IDS, recorded)
    assert sorted(order) == sorted(IDS)
    units = [schedule.unit_of(n) for n in order]
    # cluster: 40 + 30 = 70; spark 50; an unrecorded unit file: its folder's 2 s
    # the folders without a session first; then cluster: 40 + 30 = 70, spark 50, faults 1
    assert units == ["tests/unit/test_a.py"] * 2 + ["tests/unit/test_new.py"] + [
        "tests/cluster"] * 2 + ["tests/spark/test_b.py"] * 2 + ["tests/faults/test_e.py"]
    assert order[3:5] == ["tests/cluster/test_c.py::t1", "tests/cluster/test_d.py::t1"]
    assert order[5:7] == ["tests/spark/test_b.py::t1", "tests/spark/test_b.py::t2"]


def test_without_recorded_durations_folders_decide() -> None:
    units = []
    for n in schedule.longest_first(IDS, {}):
        if schedule.unit_of(n) not in units:
            units.append(schedule.unit_of(n))
    assert units == ["tests/unit/test_a.py", "tests/unit/test_new.py", "tests/cluster",
                     "tests/faults/test_e.py", "tests/spark/test_b.py"]


def test_durations_come_per_file_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_test_support" name="a" time="1.25"/>'
        '<testcase classname="tests.unit.test_test_support" name="b" time="0.5"/>'
        '<testcase classname="tests.conformance.test_blob_serving.TestJavaBlobServer" '
        'name="c" time="2"/>'
        '<testcase classname="tests.unit.no_such_file" name="d" time="9"/>'
        '</testsuite></testsuites>')
    assert schedule.durations_from_junit(report) == {
        "tests/conformance/test_blob_serving.py": 2.0, "tests/unit/test_test_support.py": 1.8}


def test_the_recorded_durations_name_files_that_exist() -> None:
    root = schedule.DURATIONS.parent.parent
    recorded = schedule.load_durations()
    assert len(recorded) > 50
    gone = [path for path in recorded if not (root / path).is_file()]
    assert not gone, f"rewrite tests/durations.json (python -m tests.support.schedule): {gone}"


def test_the_test_jvms_conf_dir_is_empty_and_the_archive_joins_the_options_once_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env: dict[str, str] = {}
    class_cache.install(env)
    conf = Path(env["SPARK_CONF_DIR"])
    assert conf.is_dir() and list(conf.iterdir()) == [], "Java maps no archive past a file"
    assert tmp_path in conf.parents
    assert env["SPARK_SUBMIT_OPTS"] == (f'{class_cache.QUICK_JVM} '
                                        f'"-Dspark.executor.extraJavaOptions='
                                        f'{class_cache.QUICK_JVM}"')
    archive = class_cache.folder() / "spark.jsa"
    archive.write_bytes(b"dumped")
    class_cache.install(env)
    wanted = f"{class_cache.QUICK_JVM} -XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    assert env["SPARK_SUBMIT_OPTS"] == f'{wanted} "-Dspark.executor.extraJavaOptions={wanted}"'
    assert class_cache.ensure_archive() == archive  # there: nothing dumped again
