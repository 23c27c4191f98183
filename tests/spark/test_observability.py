"""spark-steward where Spark users look (issue 22, point 4), through real spark-submit runs: its
metrics in a configured Spark metrics sink (CSV), its Python log records in the driver's log4j
output in Spark's layout at log4j's level, its cleanup in `spark-steward status`.

log4j at WARN keeping those records out is checked in the plain job's application
test_submit.py already runs (test_log4j_at_warn_keeps_steward_info_records_out there), with
this file's log4j configuration.

The run has Python worker reuse off, and carries test_bootstrap's check that every worker then
starts a runtime of its own (test_worker_reuse_off_starts_a_runtime_in_every_worker here)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_steward.kernel.metrics import COUNTERS, GAUGES, NAMES
from tests.spark.conftest import SCRIPTS, run_spark_submit, steward_conf

JOB = SCRIPTS / "observability_job.py"
SOURCE = "plugin.io.sparksteward.shim.StewardPlugin"
#: Spark's default log4j2 layout (conf/log4j2.properties.template).
SPARK_PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR|DEBUG) \S+: ",
                        re.MULTILINE)


def log4j_properties(path: Path, steward_level: str) -> Path:
    """A log4j2 configuration: Spark's layout on stderr, Spark itself at WARN, spark_steward at
    ``steward_level``."""
    path.write_text(
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        f"appender.console.layout.pattern = {SPARK_PATTERN}\n"
        "logger.steward.name = spark_steward\n"
        f"logger.steward.level = {steward_level}\n")
    return path


def log_flags(conf: Path) -> list[str]:
    return ["--driver-java-options", f"-Dlog4j2.configurationFile={conf.as_uri()}"]


def csv_sink_flags(directory: Path) -> list[str]:
    prefix = "spark.metrics.conf.*.sink.csv"
    flags: list[str] = []
    for key, value in (("class", "org.apache.spark.metrics.sink.CsvSink"), ("period", "1"),
                       ("unit", "seconds"), ("directory", str(directory))):
        flags += ["--conf", f"{prefix}.{key}={value}"]
    return flags


def read_metric(directory: Path, app_id: str, name: str) -> list[int]:
    """Every value the CSV sink wrote for metric ``name``, oldest first."""
    path = directory / f"{app_id}.driver.{SOURCE}.{name}.csv"
    assert path.exists(), f"no CSV of {name}: {sorted(p.name for p in directory.iterdir())}"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    column = "count" if name in COUNTERS else "value"
    return [int(float(row[column])) for row in rows]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run with a CSV sink, log4j at INFO for spark_steward and Python worker reuse off."""
    tmp = tmp_path_factory.mktemp("observed")
    metrics_dir = tmp / "metrics"
    metrics_dir.mkdir()
    storage = tmp / "storage"
    flags = steward_conf(storage, "spark.steward.heartbeat.interval=300ms",
                         "spark.python.worker.reuse=false") \
        + csv_sink_flags(metrics_dir) + log_flags(log4j_properties(tmp / "info.properties",
                                                                   "info"))
    result = run_spark_submit(JOB, flags, str(tmp / "out.json"), "--linger", "3")
    assert result.returncode == 0, result.stderr[-4000:]
    job = json.loads((tmp / "out.json").read_text())
    return {"job": job, "metrics": metrics_dir, "stderr": result.stderr, "storage": storage}


def test_every_documented_metric_is_in_the_sink(observed: dict[str, Any]) -> None:
    app = observed["job"]["app_id"]
    for name in NAMES:
        assert read_metric(observed["metrics"], app, name), f"{name} was never reported"


def test_sink_reports_blobs_tables_and_checkpoints(observed: dict[str, Any]) -> None:
    job, where = observed["job"], observed["metrics"]
    app = job["app_id"]
    assert job["sizes"] == [job["blob_bytes"]] * 4 and job["counts"] == [1000, 143]

    def levels(name: str) -> list[int]:
        return read_metric(where, app, name)

    def total(name: str) -> int:
        return read_metric(where, app, name)[-1]

    # Levels while the job lingered: one blob of its bytes, one table, one checkpoint.
    assert 1 in levels("blobs.held") and job["blob_bytes"] in levels("blobs.bytes")
    assert 1 in levels("tables.cached") and max(levels("tables.bytes")) > 0
    assert 1 in levels("checkpoints.completed")
    assert max(levels("checkpoints.pending")) <= 1
    # Totals: the executors' copies of the blob came from somewhere; the table's first query
    # materialized it, the second read its files; nothing fell back, dropped or was given up.
    assert sum(total(f"blobs.transfers.{s}") for s in ("server", "ha", "linked", "peers")) >= 1
    assert total("tables.misses") >= 1 and total("tables.hits") >= 1
    assert total("tables.fallbacks") == 0
    assert total("events.dropped") == 0
    assert max(levels("cleanup.given_up")) == 0
    # At spark.stop() the table was released: the last report says so.
    assert levels("tables.cached")[-1] == 0


def test_metrics_have_the_sink_types(observed: dict[str, Any]) -> None:
    """Levels are gauges (CSV column ``value``), totals counters (column ``count``)."""
    app, where = observed["job"]["app_id"], observed["metrics"]
    for name in GAUGES + COUNTERS:
        header = (where / f"{app}.driver.{SOURCE}.{name}.csv").read_text().splitlines()[0]
        assert header == ("t,count" if name in COUNTERS else "t,value"), (name, header)


def test_driver_log_has_steward_info_records_in_sparks_layout(observed: dict[str, Any]
                                                              ) -> None:
    stderr = observed["stderr"]
    app = observed["job"]["app_id"]
    attached = re.search(rf"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO runtime: spark-steward \S+ "
                         rf"attached to {re.escape(app)} ", stderr, re.MULTILINE)
    assert attached, stderr[-4000:]
    assert re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO observability: observability job "
                     r"ran$", stderr, re.MULTILINE), stderr[-4000:]
    # exc_info travels with the record: the traceback follows the message.
    warned = re.search(r"WARN observability: logged with a traceback\nTraceback \(most recent "
                       r"call last\):\n(.*\n)*?ValueError: a failure the job logs", stderr)
    assert warned, stderr[-4000:]


def test_status_shows_the_finished_application_without_backlog(observed: dict[str, Any]
                                                               ) -> None:
    out = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                          observed["storage"].as_uri(), "--json"],
                         check=True, capture_output=True, text=True).stdout
    [app] = json.loads(out)["applications"]
    assert app["app_id"] == observed["job"]["app_id"] and app["state"] == "finished"
    assert app["cleanup"] is not None and app["cleanup"]["given_up"] == []


def test_worker_reuse_off_starts_a_runtime_in_every_worker(observed: dict[str, Any]) -> None:
    """(From test_bootstrap.) With ``spark.python.worker.reuse=false`` every task has a fresh
    worker, each with a runtime created in it, on both executors."""
    job = observed["job"]
    rows = job["workers"]
    assert sorted(r["partition"] for r in rows) == list(range(12))
    assert {r["app_id"] for r in rows} == {job["app_id"]}
    assert {r["executor_dir"] for r in rows} == {"0", "1"}
    # No reuse: a fresh worker per task, each with a runtime created in it.
    assert len({r["pid"] for r in rows}) == 12
    assert all(r["runtime_pid"] == r["pid"] for r in rows)
