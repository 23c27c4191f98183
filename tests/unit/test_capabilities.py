"""Capabilities plug in whole: config lists the keys each declares in its folder, under the names
they always had, in a stable order; a key this process cannot list is still read as set; the
command line adds each capability's group and gc collector; importing config, errors or the
CLI stays cheap; and a third party's capability joins all of it the same way."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib import metadata
from typing import Any

import pytest

from spark_steward import capabilities, cli, config
from spark_steward.capabilities import BUILT_IN, Capability
from spark_steward.commands import Collector
from spark_steward.config import BOOL, KEYS, ConfigKey, StewardConf
from spark_steward.errors import ConfigError

FOLDERS = {"local": "local", "blobs": "blob", "checkpoints": "checkpoint", "tables": "tables",
           "streams": "streams"}


class Point:
    """An entry point stand-in: name, value, load()."""

    def __init__(self, name: str, loaded: Any) -> None:
        self.name, self.value, self._loaded = name, f"fake:{name}", loaded

    def load(self) -> Any:
        return self._loaded


@pytest.fixture
def declared_as(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Makes the entry points those given, for this test only."""
    def declare(*points: Point) -> None:
        monkeypatch.setattr(capabilities, "_declared", None)
        monkeypatch.setattr(metadata, "entry_points", lambda group: list(points))
    return declare


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    vars(module).update(attributes)
    return module


def _in_fresh_interpreter(code: str) -> Any:
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={"SPARK_STEWARD_AUTOLOAD": "0", "PATH": "",
                                         "PYTHONPATH": ":".join(sys.path)})
    return json.loads(out.stdout)


def test_every_built_in_declares_its_keys_in_its_own_folder() -> None:
    for capability in capabilities.declared().capabilities:
        assert capability.config == f"spark_steward.{FOLDERS[capability.name]}.config_keys"


def test_keys_are_the_kernels_then_each_capabilitys_in_capability_order() -> None:
    owners = ["kernel" if key in config.capability_keys(config) else None for key in KEYS.values()]
    for capability, module in capabilities.loaded("config"):
        for key in config.capability_keys(module):
            owners[list(KEYS).index(key.name)] = capability.name
    assert None not in owners
    ranks = [0 if owner == "kernel" else 1 + BUILT_IN.index(owner) for owner in owners]
    assert ranks == sorted(ranks) and set(ranks) == set(range(len(BUILT_IN) + 1))


def test_a_capability_key_keeps_its_name_in_config() -> None:
    from spark_steward.blob.config_keys import BLOB_HA
    from spark_steward.config import STREAMS_ENABLED
    from spark_steward.streams import config_keys

    assert config.BLOB_HA is BLOB_HA and STREAMS_ENABLED is config_keys.STREAMS_ENABLED
    assert KEYS[BLOB_HA.name] is BLOB_HA
    with pytest.raises(AttributeError, match="NO_SUCH_KEY"):
        config.NO_SUCH_KEY


def test_importing_config_imports_no_capability() -> None:
    loaded = _in_fresh_interpreter(
        "import json, sys, spark_steward.config\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('spark_steward.'))))")
    assert loaded == ["spark_steward._version", "spark_steward.capabilities",
                      "spark_steward.config", "spark_steward.errors", "spark_steward.lifecycle",
                      "spark_steward.lifecycle.retry"]


def test_a_third_partys_keys_are_listed_and_validated(declared_as: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    audit = ConfigKey("spark.steward.audit.enabled", BOOL, "false", "Audits.")
    monkeypatch.setitem(sys.modules, "audit_keys", _module("audit_keys", AUDIT_ENABLED=audit))
    declared_as(Point("audit", Capability("audit", service=object, config="audit_keys")))
    assert list(KEYS)[-1] == audit.name and config.AUDIT_ENABLED is audit
    assert StewardConf.from_pairs([(audit.name, "TRUE")]).get(audit) is True
    with pytest.raises(ConfigError, match="spark.steward.audit.enabled='sometimes'"):
        StewardConf.from_pairs([(audit.name, "sometimes")])


def test_a_key_declared_twice_fails_naming_both(declared_as: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    clash = ConfigKey(config.ENABLED.name, BOOL, "true", "Mine.")
    monkeypatch.setitem(sys.modules, "clash_keys", _module("clash_keys", ENABLED=clash))
    declared_as(Point("clash", Capability("clash", service=object, config="clash_keys")))
    with pytest.raises(ConfigError, match="spark.steward.enabled is declared twice: by "
                                          "spark_steward.config and by clash_keys"):
        KEYS.get("spark.steward.enabled")


def test_a_value_of_a_key_this_process_cannot_list_is_still_read_as_set(
        declared_as: Any) -> None:
    from spark_steward.blob.config_keys import BLOB_FETCH_ATTEMPTS

    declared_as()  # no metadata, as in a package shipped to executors by hand
    assert BLOB_FETCH_ATTEMPTS.name not in KEYS
    conf = StewardConf.from_pairs([(BLOB_FETCH_ATTEMPTS.name, "7")], warn_unknown=False)
    assert conf.get(BLOB_FETCH_ATTEMPTS) == 7 and conf.is_set(BLOB_FETCH_ATTEMPTS)


# -- the command line ------------------------------------------------------------------------


def test_every_built_in_brings_its_cli_group_and_gc_collector_from_its_folder() -> None:
    groups = {"blobs": "blobs", "checkpoints": "checkpoints", "tables": "cache",
              "streams": "streams"}
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for capability in capabilities.declared().capabilities:
        folder = FOLDERS[capability.name]
        assert capability.gc == f"spark_steward.{folder}.cli:COLLECTOR"
        if capability.name in groups:
            assert capability.cli == f"spark_steward.{folder}.cli:register"
            assert groups[capability.name] in commands
    assert [c.name for c in cli.gc_collectors()] == ["blobs", "checkpoints", "caches", "streams",
                                                     "local"]


def test_help_imports_neither_pyspark_nor_fsspec() -> None:
    loaded = _in_fresh_interpreter(
        "import contextlib, io, json, sys\n"
        "from spark_steward import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    cli.main(['--help'])\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pyspark', 'py4j', 'fsspec'})))")
    assert loaded == []


def test_a_third_partys_group_and_collector_join_the_command_line(
        declared_as: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    from spark_steward.gc import GcReport

    def register(sub: Any) -> None:
        sub.add_parser("audit", help="audit trails").set_defaults(
            run=lambda args: print("hi") or 0)

    collector = Collector("audits", lambda registry, args, progress: GcReport(dry_run=True))
    monkeypatch.setitem(sys.modules, "audit_cli", _module("audit_cli", register=register,
                                                          COLLECTOR=collector))
    declared_as(*[Point(c.name, c) for c in capabilities.declared().capabilities],
                Point("audit", Capability("audit", service=object, cli="audit_cli:register",
                                          gc="audit_cli:COLLECTOR")))
    assert cli.main(["audit"]) == 0 and capsys.readouterr().out == "hi\n"
    assert cli.main(["gc", "--storage", (tmp_path / "s").as_uri(), "--dry-run", "--json"]) == 0
    names = [c["name"] for c in json.loads(capsys.readouterr().out)["collectors"]]
    assert names == ["blobs", "checkpoints", "caches", "streams", "audits"]


def test_with_stale_metadata_the_cli_warns_with_the_fix_and_still_runs(
        declared_as: Any, capsys: pytest.CaptureFixture[str]) -> None:
    declared_as()
    assert cli.main(["version"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("spark-steward ")
    assert err.startswith("warning: spark-steward's built-in capabilities local, blobs, ")
    assert "pip install -e ." in err
