"""kernel.services over capabilities.declared(): capabilities found by name (entry points,
register_service), the built-in ones required, a broken third party's skipped; and the executor
setup run once per process."""

from __future__ import annotations

import logging
import sys
import types
from importlib import metadata
from typing import Any

import pytest

from spark_steward import capabilities
from spark_steward.capabilities import Capability
from spark_steward.errors import SetupError
from spark_steward.kernel import executor, patches, services
from spark_steward.kernel.runtime import RuntimeService, build_services


class Point:
    """An entry point stand-in: name, value, load()."""

    def __init__(self, name: str, loaded: Any) -> None:
        self.name, self.value, self._loaded = name, f"fake:{name}", loaded

    def load(self) -> Any:
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


class Fake(RuntimeService):
    name = "fake"


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capabilities, "_declared", None)
    monkeypatch.setattr(services, "_entry_points", None)
    monkeypatch.setattr(services, "_REGISTERED", [])


def with_points(monkeypatch: pytest.MonkeyPatch, *points: Point) -> None:
    monkeypatch.setattr(metadata, "entry_points", lambda group: list(points))


def built_ins() -> list[Point]:
    return [Point(name, Capability(name, service=Fake)) for name in services.BUILT_IN]


def test_the_installed_package_registers_every_built_in_in_start_order(
        fresh_registry: None) -> None:
    names = [service.name for service in build_services()]
    assert names == ["local", "blobs", "checkpoints", "tables", "streams"]


def test_missing_built_ins_fail_attach_with_the_fix(fresh_registry: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with_points(monkeypatch, Point("local", Fake))
    with pytest.raises(SetupError, match="blobs, checkpoints, tables, streams are not registered.*"
                                         "pip install"):
        services.discover()


def test_a_broken_built_in_fails_attach_naming_it(fresh_registry: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with_points(monkeypatch, *built_ins()[1:], Point("local", ImportError("no module x")))
    with pytest.raises(SetupError, match="'local'.*cannot be loaded.*no module x"):
        services.discover()


def test_a_built_in_whose_service_cannot_be_imported_fails_attach_naming_it(
        fresh_registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with_points(monkeypatch, *built_ins()[1:],
                Point("local", Capability("local", service="no_such_module_x:Service")))
    with pytest.raises(SetupError, match="'local' \\(no_such_module_x:Service\\) cannot be "
                                         "loaded.*no_such_module_x.*reinstall"):
        services.discover()


def test_a_third_party_declared_by_its_service_class_alone_is_attached(
        fresh_registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with_points(monkeypatch, *built_ins(), Point("audit", Fake))
    specs = services.discover()
    assert [s.name for s in specs] == [*services.BUILT_IN, "audit"]
    assert {s.name: s.factory for s in specs}["audit"] is Fake
    assert capabilities.declared().capabilities[-1] == Capability("audit", service=Fake)


def test_a_declaration_under_another_name_is_a_broken_entry_point(
        fresh_registry: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    with_points(monkeypatch, *built_ins(), Point("audit", Capability("other", service=Fake)))
    with caplog.at_level(logging.WARNING, logger=services.__name__):
        found = [spec.name for spec in services.discover()]
    assert found == list(services.BUILT_IN)
    assert "'audit'" in caplog.text and "declares the capability 'other'" in caplog.text


def test_a_broken_third_party_is_skipped_with_a_warning(
        fresh_registry: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    with_points(monkeypatch, *built_ins(), Point("audit", RuntimeError("boom")))
    with caplog.at_level(logging.WARNING, logger=services.__name__):
        found = [spec.name for spec in services.discover()]
    assert found == list(services.BUILT_IN)
    assert "'audit'" in caplog.text and "boom" in caplog.text


def test_registered_services_follow_entry_points_and_a_name_is_taken_once(
        fresh_registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with_points(monkeypatch, *built_ins())
    services.register_service("audit", Fake)
    services.register_service("audit", RuntimeService)  # idempotent per name
    services.register_service("blobs", RuntimeService)  # the entry point wins
    specs = services.discover()
    assert [s.name for s in specs] == [*services.BUILT_IN, "audit"]
    assert {s.name: s.factory for s in specs}["audit"] is Fake
    assert {s.name: s.factory for s in specs}["blobs"] is Fake


def test_a_factory_that_builds_no_runtime_service_is_refused(
        fresh_registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with_points(monkeypatch, *built_ins())
    services.register_service("odd", object)
    with pytest.raises(SetupError, match="'odd'.*built a object, not a RuntimeService"):
        build_services()


# -- executor setup ---------------------------------------------------------------------------

@pytest.fixture
def setup_module(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    module = types.ModuleType("steward_fake_setup")

    def ok() -> None:
        calls.append("ok")

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("setup failed")

    module.ok, module.broken = ok, broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(patches, "install", lambda points=None: calls.append("install"))
    executor._reset_after_fork()
    return calls


def test_executor_setup_runs_once_per_process_then_installs_patches(
        setup_module: list[str]) -> None:
    names = ("steward_fake_setup:ok",)
    executor._run_setup(names)
    executor._run_setup(names)
    assert setup_module == ["ok", "install", "install"]
    executor._reset_after_fork()  # a forked worker runs it again
    executor._run_setup(names)
    assert setup_module.count("ok") == 2


def test_a_failing_executor_setup_is_logged_and_not_retried(
        setup_module: list[str], caplog: pytest.LogCaptureFixture) -> None:
    names = ("steward_fake_setup:broken", "steward_fake_setup:ok")
    with caplog.at_level(logging.ERROR, logger=executor.__name__):
        executor._run_setup(names)
        executor._run_setup(names)
    assert setup_module.count("broken") == 1 and setup_module.count("ok") == 1
    assert "steward_fake_setup:broken failed" in caplog.text
