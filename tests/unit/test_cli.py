"""cli.py main(): version, jar, conf, status; errors are one ``error: ...`` line and exit 2."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest
from fsspec.registry import known_implementations

from spark_steward import __version__, config
from spark_steward.applications import ApplicationRegistry
from spark_steward.cli import main
from spark_steward.storage import Storage
from tests.support.mounts import tmpfs
from tests.unit.test_storage import _uninstalled_protocol


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_error_line(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0]


# -- version, jar, conf ------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "version") == (0, f"spark-steward {__version__}\n", "")


def test_jar_prints_an_existing_jar(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "jar")
    path = Path(out.strip())
    assert code == 0 and err == "" and path.is_file() and path.suffix == ".jar"


def test_conf_markdown_is_the_config_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "conf", "--markdown")
    assert code == 0 and out == config.render_markdown_table() + "\n"


def _flags(out: str) -> dict[str, str]:
    tokens = shlex.split(out)
    assert tokens[0::2] == ["--conf"] * (len(tokens) // 2) and len(tokens) % 2 == 0
    return dict(t.split("=", 1) for t in tokens[1::2])


def test_conf_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "conf", "--storage", "memory://x")
    assert code == 0 and err == "" and out.count("\n") == 1
    flags = _flags(out)
    # Never spark.plugins or spark.jars: those would replace the platform's; the driver's
    # autoload adds both after them (tests/spark/test_platform_conf.py).
    assert flags == {"spark.steward.enabled": "true", "spark.steward.storage.dir": "memory://x"}
    # What it prints is accepted back by the package's own conf parser.
    conf = config.StewardConf.from_pairs(flags.items())
    assert conf.get(config.ENABLED) is True and conf.storage_dir() == "memory://x"


def test_conf_flags_quote_for_the_shell(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "conf", "--storage", "/data/my storage", "--local-dir", "/l d")
    flags = _flags(out)
    assert code == 0
    assert flags["spark.steward.storage.dir"] == "/data/my storage"
    assert flags["spark.steward.local.dir"] == "/l d"


def test_conf_without_storage_omits_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "conf")
    assert code == 0 and "spark.steward.storage.dir" not in _flags(out)


def test_conf_properties_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "conf", "--format", "properties", "--storage", "memory://x")
    assert code == 0
    pairs = dict(line.split(None, 1) for line in out.splitlines())
    assert set(pairs) == {"spark.steward.enabled", "spark.steward.storage.dir"}
    assert pairs["spark.steward.enabled"] == "true"
    assert pairs["spark.steward.storage.dir"] == "memory://x"
    assert len({line.index(value) for line, value in zip(out.splitlines(), pairs.values())}) == 1


def test_conf_refuses_an_unknown_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "conf", "--storage", "fiel:///x")
    _assert_one_error_line(code, out, err, "fiel:///x", "unknown protocol fiel://",
                           "did you mean file://?")


def test_conf_names_the_pip_install_of_a_known_but_missing_backend(
        capsys: pytest.CaptureFixture[str]) -> None:
    protocol = _uninstalled_protocol()
    package = known_implementations[protocol]["class"].split(".")[0]
    code, out, err = _run(capsys, "conf", "--storage", f"{protocol}://bucket/x")
    _assert_one_error_line(code, out, err, f"{protocol}://bucket/x", f"pip install {package}")


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A real read-only filesystem: root's writes fail there too (chmod would not stop them)."""
    with tmpfs(tmp_path / "read-only", "ro,size=1m") as mount_point:
        yield mount_point


def test_conf_refuses_a_storage_dir_nobody_can_write(capsys: pytest.CaptureFixture[str],
                                                     read_only_dir: Path) -> None:
    code, out, err = _run(capsys, "conf", "--storage", read_only_dir.as_uri())
    _assert_one_error_line(code, out, err, f"storage dir {read_only_dir} is not writable",
                           f"by user root (uid {os.geteuid()})", "Read-only file system",
                           "choose another storage dir")
    below = read_only_dir / "steward" / "storage"
    code, out, err = _run(capsys, "conf", "--storage", str(below))
    _assert_one_error_line(code, out, err, f"storage dir {below} is not writable",
                           f"does not exist yet and cannot be created in {read_only_dir}")
    assert "applications" not in err
    code, out, err = _run(capsys, "conf", "--storage", str(below), "--no-check")
    assert code == 0 and err == "" and f"spark.steward.storage.dir={below}" in out


def test_conf_accepts_a_writable_dir_and_leaves_nothing_in_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _run(capsys, "conf", "--storage", str(tmp_path / "new" / "storage"))
    assert code == 0 and err == "" and "spark.steward.storage.dir=" in out
    assert list(tmp_path.iterdir()) == [], "the probe is removed and nothing is created"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err


# -- status ----------------------------------------------------------------------------------------


def test_status_of_an_empty_storage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _run(capsys, "status", "--storage", str(tmp_path))
    assert code == 0 and err == ""
    assert out == f"no applications recorded in {tmp_path.as_uri()}\n"
    code, out, _ = _run(capsys, "status", "--storage", str(tmp_path), "--json")
    assert code == 0 and json.loads(out) == {"storage": tmp_path.as_uri(), "applications": []}


def test_status_of_a_missing_dir_says_it_does_not_exist_and_does_not_create_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "not-yet"
    code, out, err = _run(capsys, "status", "--storage", str(missing))
    _assert_one_error_line(code, out, err, f"storage dir {missing.as_uri()} does not exist")
    assert "no applications recorded" not in err
    assert not missing.exists()


@pytest.fixture
def populated(tmp_path: Path) -> Path:
    """A storage dir with a live, a finished and two crashed applications."""
    storage = Storage.from_url(str(tmp_path))
    here = ApplicationRegistry(storage, heartbeat_timeout=120.0)
    an_hour_ago = ApplicationRegistry(storage, heartbeat_timeout=120.0, this_host="far-away",
                                      clock=lambda: time.time() - 3600)

    here.write(here.new_record("app-live", "streaming"))
    here.finish(here.new_record("app-done", "batch"))
    an_hour_ago.write(an_hour_ago.new_record("app-stale", "silent"))
    child = subprocess.Popen(["true"])
    child.wait(timeout=10)
    here.write(replace(here.new_record("app-dead", "killed"), pid=child.pid, pid_start=None))

    storage.write_atomic("apps/app-live/shuffle/part-0", b"x" * 2048)
    storage.write_atomic("apps/app-live/shuffle/part-1", b"x" * 1024)
    storage.write_atomic("apps/app-live/cache/blob", b"x" * 10)
    return tmp_path


def test_status_json_lists_every_application(capsys: pytest.CaptureFixture[str],
                                             populated: Path) -> None:
    code, out, err = _run(capsys, "status", "--storage", str(populated), "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["storage"] == populated.as_uri()
    apps = {a["app_id"]: a for a in data["applications"]}
    assert {k: v["state"] for k, v in apps.items()} == {
        "app-live": "live", "app-done": "finished", "app-stale": "crashed",
        "app-dead": "crashed"}
    assert data["applications"][0]["app_id"] == "app-stale"  # oldest start first
    live = apps["app-live"]
    assert live["name"] == "streaming" and live["pid"] == os.getpid()
    assert live["finished_at"] is None and apps["app-done"]["finished_at"] is not None
    assert live["owns"] == {"cache": {"files": 1, "bytes": 10},
                            "shuffle": {"files": 2, "bytes": 3072}}
    assert apps["app-done"]["owns"] == {}
    assert apps["app-stale"]["host"] == "far-away"


def test_status_table(capsys: pytest.CaptureFixture[str], populated: Path) -> None:
    code, out, err = _run(capsys, "status", "--storage", str(populated))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["APPLICATION", "STATE", "HOST", "STARTED", "HEARTBEAT", "OWNS"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"app-live", "app-done", "app-stale", "app-dead"}
    assert rows["app-live"].split()[1] == "live"
    assert rows["app-done"].split()[1] == "finished"
    assert rows["app-stale"].split()[1] == "crashed"
    assert rows["app-dead"].split()[1] == "crashed"
    assert "cache: 1 files, 10 B" in rows["app-live"]
    assert "shuffle: 2 files, 3.0 KiB" in rows["app-live"]
    assert rows["app-done"].endswith("nothing")
    assert "60min ago" in rows["app-stale"]


def test_status_heartbeat_timeout_override(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    storage = Storage.from_url(str(tmp_path))
    remote = ApplicationRegistry(storage, heartbeat_timeout=120.0, this_host="far-away",
                                 clock=lambda: time.time() - 30)
    remote.write(remote.new_record("app-r", "r"))

    def state(*extra: str) -> str:
        code, out, _ = _run(capsys, "status", "--storage", str(tmp_path), "--json", *extra)
        assert code == 0
        return str(json.loads(out)["applications"][0]["state"])

    assert state() == "live"
    assert state("--heartbeat-timeout", "10s") == "crashed"
    assert state("--heartbeat-timeout", "1min") == "live"


def test_status_skips_a_corrupt_record(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    storage = Storage.from_url(str(tmp_path))
    registry = ApplicationRegistry(storage, heartbeat_timeout=120.0)
    registry.write(registry.new_record("app-ok", "ok"))
    storage.write_atomic("applications/torn.json", b'{"format": 1, "bo')
    code, out, _ = _run(capsys, "status", "--storage", str(tmp_path), "--json")
    assert code == 0
    assert [a["app_id"] for a in json.loads(out)["applications"]] == ["app-ok"]
    assert "torn.json" in caplog.text


def test_status_over_memory_storage_with_an_option(capsys: pytest.CaptureFixture[str],
                                                   memory_storage: Storage) -> None:
    registry = ApplicationRegistry(memory_storage, heartbeat_timeout=120.0)
    registry.write(registry.new_record("app-m", "m"))
    code, out, _ = _run(capsys, "status", "--storage", memory_storage.url, "--json",
                        "--option", "skip_instance_cache=true")
    assert code == 0
    assert [a["app_id"] for a in json.loads(out)["applications"]] == ["app-m"]


# -- errors --------------------------------------------------------------------------------------


def test_unknown_protocol_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "status", "--storage", "nosuchproto://bucket/x")
    _assert_one_error_line(code, out, err, "nosuchproto://bucket/x")


def test_bad_heartbeat_timeout_is_one_error_line(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    code, out, err = _run(capsys, "status", "--storage", str(tmp_path),
                          "--heartbeat-timeout", "soon")
    _assert_one_error_line(code, out, err, "spark.steward.heartbeat.timeout", "'soon'")


@pytest.mark.parametrize("option", ["no-equals-sign", "not-an-identifier=1", "=1"])
def test_bad_option_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      option: str) -> None:
    code, out, err = _run(capsys, "status", "--storage", str(tmp_path), "--option", option)
    _assert_one_error_line(code, out, err, repr(option))


def test_a_regular_file_as_storage_is_one_error_line(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    not_a_dir = tmp_path / "plain-file"
    not_a_dir.write_text("hello")
    code, out, err = _run(capsys, "status", "--storage", str(not_a_dir))
    _assert_one_error_line(code, out, err, str(not_a_dir))


def test_unreadable_storage_is_one_error_line(capsys: pytest.CaptureFixture[str],
                                             memory_storage: Storage,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ApplicationRegistry(memory_storage, heartbeat_timeout=120.0)
    registry.write(registry.new_record("app-1", "n"))

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    # fsspec caches filesystem instances, so the CLI opens this very (now failing) one.
    monkeypatch.setattr(memory_storage.fs, "ls", denied)
    code, out, err = _run(capsys, "status", "--storage", memory_storage.url)
    _assert_one_error_line(code, out, err, memory_storage.url)
