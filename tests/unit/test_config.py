"""config.py: typed parsing of every key type, one-line errors, unknown-key hints, the table."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward import config
from spark_steward.config import (
    BOOL,
    DURATION,
    EVENTS_BATCH_SIZE,
    EVENTS_BUFFER_CAPACITY,
    EVENTS_POLL_INTERVAL,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    INT,
    KEYS,
    SIZE,
    STRING,
    ConfigKey,
    StewardConf,
)
from spark_steward.errors import ConfigError, StewardError

# -- the key types ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["true", "TRUE", "True", " true "])
def test_bool_true_spellings(raw: str) -> None:
    assert BOOL.parse(raw) is True


@pytest.mark.parametrize("raw", ["false", "FALSE", " False\t"])
def test_bool_false_spellings(raw: str) -> None:
    assert BOOL.parse(raw) is False


# Spark refuses these for its own boolean keys, and so does the JVM shim: accepting them on the
# Python side alone would turn spark-steward on in one process and off (or failing) in another.
@pytest.mark.parametrize("raw", ["", "maybe", "2", "y", "tru", "t", "yes", "on", "1", "no",
                                 "off", "0"])
def test_bool_rejects_anything_else(raw: str) -> None:
    with pytest.raises(ValueError):
        BOOL.parse(raw)


@pytest.mark.parametrize("raw, expected", [("0", 0), ("42", 42), (" 7 ", 7), ("-3", -3),
                                           ("100000", 100000)])
def test_int(raw: str, expected: int) -> None:
    assert INT.parse(raw) == expected


@pytest.mark.parametrize("raw", ["", "1.5", "ten", "1k", "0x10"])
def test_int_rejects_non_integers(raw: str) -> None:
    with pytest.raises(ValueError):
        INT.parse(raw)


@pytest.mark.parametrize("raw, seconds", [
    ("500ms", 0.5),
    ("10s", 10.0),
    ("5min", 300.0),
    ("5m", 300.0),
    ("1h", 3600.0),
    ("2d", 172800.0),
    ("30", 30.0),
    ("1.5s", 1.5),
    ("0.25", 0.25),
    (" 10 s ", 10.0),
    ("10S", 10.0),
    ("100MS", 0.1),
    ("2MIN", 120.0),
])
def test_duration(raw: str, seconds: float) -> None:
    assert DURATION.parse(raw) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["", "s", "10x", "10 sec", "ten seconds", "-5s", "1h30m", "1e3s",
                                 "10ms5"])
def test_duration_rejects_malformed(raw: str) -> None:
    with pytest.raises(ValueError):
        DURATION.parse(raw)


@pytest.mark.parametrize("raw, size", [
    ("0", 0),
    ("100", 100),
    ("100b", 100),
    ("512k", 512 * 1024),
    ("512kb", 512 * 1024),
    ("64m", 64 * 1024 ** 2),
    ("64MB", 64 * 1024 ** 2),
    ("1g", 1024 ** 3),
    ("1G", 1024 ** 3),
    ("2t", 2 * 1024 ** 4),
    ("1.5k", 1536),
])
def test_size(raw: str, size: int) -> None:
    value = SIZE.parse(raw)
    assert value == size and isinstance(value, int)


@pytest.mark.parametrize("raw", ["", "k", "12q", "1 gigabyte", "-1k", "1kib"])
def test_size_rejects_malformed(raw: str) -> None:
    with pytest.raises(ValueError):
        SIZE.parse(raw)


def test_string_is_stripped() -> None:
    assert STRING.parse("  memory://x \n") == "memory://x"
    assert STRING.parse("") == ""


@given(st.integers(min_value=0, max_value=10 ** 6),
       st.sampled_from(sorted(config._DURATION_UNITS.items())))
def test_duration_property_every_unit_scales(n: int, unit: tuple[str, float]) -> None:
    name, factor = unit
    assert math.isclose(DURATION.parse(f"{n}{name}"), n * factor)
    assert math.isclose(DURATION.parse(f"{n}{name.upper()}"), n * factor)


@given(st.integers(min_value=0, max_value=10 ** 6),
       st.sampled_from(sorted(config._SIZE_UNITS.items())))
def test_size_property_every_unit_scales(n: int, unit: tuple[str, int]) -> None:
    name, factor = unit
    assert SIZE.parse(f"{n}{name}") == n * factor


# -- errors: one line naming key, value and the rule ------------------------------------------


def _one_line_error(key: ConfigKey[object], raw: str) -> str:
    with pytest.raises(ConfigError) as info:
        key.parse(raw)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    assert key.name in message, message
    return message


@pytest.mark.parametrize("key, raw, rule", [
    (config.ENABLED, "maybe", "true or false"),
    (EVENTS_BATCH_SIZE, "lots", "a whole number"),
    (HEARTBEAT_INTERVAL, "10 parsecs", "a duration such as 500ms, 10s, 5min or 1h"),
    (HEARTBEAT_TIMEOUT, "", "a duration such as 500ms, 10s, 5min or 1h"),
])
def test_bad_value_error_names_key_value_and_rule(key: ConfigKey[object], raw: str, rule: str
                                                  ) -> None:
    message = _one_line_error(key, raw)
    assert repr(raw) in message and rule in message


def test_bad_size_error_names_what_is_allowed() -> None:
    key = ConfigKey("spark.steward.test.size", SIZE, "1m", "test only")
    message = _one_line_error(key, "huge")
    assert "'huge'" in message and "512k, 64m or 1g" in message


def test_value_with_newline_still_gives_a_one_line_error() -> None:
    message = _one_line_error(config.ENABLED, "tr\nue")
    assert r"'tr\nue'" in message


def test_config_error_is_a_steward_error_and_a_value_error() -> None:
    with pytest.raises(ConfigError) as info:
        EVENTS_BATCH_SIZE.parse("x")
    assert isinstance(info.value, StewardError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("key, raw, minimum", [
    (EVENTS_BUFFER_CAPACITY, "0", "1"),
    (EVENTS_BATCH_SIZE, "-5", "1"),
    (EVENTS_POLL_INTERVAL, "0ms", "0.001"),
    (HEARTBEAT_INTERVAL, "9ms", "0.01"),
    (HEARTBEAT_TIMEOUT, "0", "0.01"),
])
def test_minimum_is_enforced(key: ConfigKey[object], raw: str, minimum: str) -> None:
    message = _one_line_error(key, raw)
    assert repr(raw) in message and f"must be at least {minimum}" in message


@pytest.mark.parametrize("key, raw", [
    (EVENTS_BUFFER_CAPACITY, "1"),
    (EVENTS_BATCH_SIZE, "1"),
    (EVENTS_POLL_INTERVAL, "1ms"),
    (HEARTBEAT_INTERVAL, "10ms"),
    (HEARTBEAT_TIMEOUT, "0.01"),
])
def test_minimum_itself_is_allowed(key: ConfigKey[object], raw: str) -> None:
    assert key.parse(raw) >= key.minimum  # type: ignore[operator]


def test_choices_are_enforced_and_listed() -> None:
    key = ConfigKey("spark.steward.test.mode", STRING, "fast", "test only", ("fast", "safe"))
    assert key.parse(" safe ") == "safe"
    message = _one_line_error(key, "slow")
    assert "'slow'" in message and "one of fast, safe" in message


# -- defaults and the table --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KEYS))
def test_every_default_parses(name: str) -> None:
    key = KEYS[name]
    value = key.default
    assert isinstance(value, {"boolean": bool, "int": int, "duration": float, "size": int, "number": float,
                              "string": str, "int or `infinite`": (int, type(None))
                              }[key.type.name])
    if key.minimum is not None:
        assert value >= key.minimum
    assert key.name.startswith(config.PREFIX) and key.doc


def test_known_defaults() -> None:
    assert config.ENABLED.default is False
    assert EVENTS_POLL_INTERVAL.default == pytest.approx(0.1)
    assert HEARTBEAT_INTERVAL.default == 10.0
    assert HEARTBEAT_TIMEOUT.default == 120.0
    assert EVENTS_BUFFER_CAPACITY.default == 100000


def test_markdown_table_has_one_row_per_key() -> None:
    lines = config.render_markdown_table().splitlines()
    assert lines[0] == "| key | type | default | meaning |"
    assert lines[1] == "|---|---|---|---|"
    rows = lines[2:]
    assert all(row.startswith("| ") and row.endswith(" |") for row in rows)
    # One row per key, in KEYS order, plus the storage-option pattern row at the end.
    assert len(rows) == len(KEYS) + 1
    for row, name in zip(rows, KEYS):
        assert row.startswith(f"| `{name}` |")
    assert rows[-1].startswith("| `spark.steward.storage.option.<name>` |")
    for name in KEYS:
        assert sum(f"`{name}`" in row for row in rows) == 1


def test_markdown_table_shows_empty_defaults_as_empty() -> None:
    row = next(r for r in config.render_markdown_table().splitlines()
               if r.startswith("| `spark.steward.storage.dir` |"))
    assert "| (empty) |" in row
    row = next(r for r in config.render_markdown_table().splitlines()
               if r.startswith("| `spark.steward.heartbeat.timeout` |"))
    assert "| duration | `2min` |" in row


# -- StewardConf ---------------------------------------------------------------------------------


def test_from_pairs_types_values_and_ignores_other_keys(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_steward.config"):
        conf = StewardConf.from_pairs([
            ("spark.app.name", "x"),
            ("spark.stewardship", "not ours"),
            ("spark.steward.enabled", "TRUE"),
            ("spark.steward.heartbeat.interval", "3s"),
            ("spark.steward.storage.dir", " memory://s "),
        ])
    assert caplog.records == []
    assert conf.get(config.ENABLED) is True
    assert conf.get(HEARTBEAT_INTERVAL) == 3.0
    assert conf.storage_dir() == "memory://s"
    assert conf.is_set(HEARTBEAT_INTERVAL) and not conf.is_set(HEARTBEAT_TIMEOUT)
    assert conf.get(HEARTBEAT_TIMEOUT) == 120.0
    assert conf.as_dict().keys() == KEYS.keys()
    assert conf.as_dict()["spark.steward.heartbeat.interval"] == 3.0


def test_from_pairs_last_value_wins() -> None:
    conf = StewardConf.from_pairs([("spark.steward.events.batch-size", "5"),
                                   ("spark.steward.events.batch-size", "6")])
    assert conf.get(EVENTS_BATCH_SIZE) == 6


def test_from_pairs_raises_on_a_bad_value() -> None:
    with pytest.raises(ConfigError, match=r"spark\.steward\.events\.batch-size='0'"):
        StewardConf.from_pairs([("spark.steward.events.batch-size", "0")])


@pytest.mark.parametrize("typo, closest", [
    ("spark.steward.storage.dirr", "spark.steward.storage.dir"),
    ("spark.steward.enable", "spark.steward.enabled"),
    ("spark.steward.heartbeat.intervall", "spark.steward.heartbeat.interval"),
    ("spark.steward.events.batchsize", "spark.steward.events.batch-size"),
])
def test_unknown_key_warns_naming_the_closest_key(caplog: pytest.LogCaptureFixture, typo: str,
                                                  closest: str) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_steward.config"):
        conf = StewardConf.from_pairs([(typo, "whatever")])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert typo in message and f"did you mean {closest}?" in message
    assert conf.as_dict() == StewardConf({}).as_dict()


def test_unknown_key_without_a_close_match_points_at_the_table() -> None:
    message = config.unknown_key_message("spark.steward.shuffle.compression.codec")
    assert "spark.steward.shuffle.compression.codec" in message
    assert "did you mean" not in message and "spark-steward conf --markdown" in message


@pytest.mark.parametrize("name", ["spark.steward.foo", "spark.steward.cleanup.retries"])
def test_unrelated_unknown_key_gets_no_misleading_suggestion(name: str) -> None:
    # The shared "spark.steward." prefix alone must not make an unrelated key "close".
    message = config.unknown_key_message(name)
    assert name in message and "spark-steward conf --markdown" in message, message


def test_unknown_key_warning_can_be_silenced(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_steward.config"):
        StewardConf.from_pairs([("spark.steward.storage.dirr", "x")], warn_unknown=False)
    assert caplog.records == []


def test_storage_options_are_typed() -> None:
    conf = StewardConf.from_pairs([
        ("spark.steward.storage.option.endpoint_url", "http://127.0.0.1:9000"),
        ("spark.steward.storage.option.anon", "TRUE"),
        ("spark.steward.storage.option.use_ssl", "false"),
        ("spark.steward.storage.option.max_attempts", "-3"),
    ])
    assert conf.storage_options() == {"endpoint_url": "http://127.0.0.1:9000", "anon": True,
                                      "use_ssl": False, "max_attempts": -3}
    # A copy: callers cannot change the conf through it.
    conf.storage_options()["anon"] = False
    assert conf.storage_options()["anon"] is True


def test_storage_option_name_must_be_a_keyword() -> None:
    with pytest.raises(ConfigError, match=r"spark\.steward\.storage\.option\.not-a-name"):
        StewardConf.from_pairs([("spark.steward.storage.option.not-a-name", "1")])


def test_default_dirs_are_used_when_empty() -> None:
    conf = StewardConf({})
    assert conf.storage_dir() == config.default_storage_dir()
    assert conf.storage_dir().startswith("file://")
    assert conf.local_dir() == config.default_local_dir()


def test_a_pack_member_bound_above_what_the_jvm_reads_is_refused() -> None:
    """The JVM refuses a packed member over 256 MiB: a larger max-member would let the packer
    settle a pack Spark cannot read (found by tests/conformance)."""
    from spark_steward.config import ConfigError
    from spark_steward.streams.config_keys import STREAMS_PACK_MAX_MEMBER
    from spark_steward.streams.packs import MAX_MEMBER_BYTES

    assert STREAMS_PACK_MAX_MEMBER.maximum == MAX_MEMBER_BYTES
    assert STREAMS_PACK_MAX_MEMBER.parse("256m") == MAX_MEMBER_BYTES
    with pytest.raises(ConfigError, match="max-member='257m' is not valid: must be at most"):
        STREAMS_PACK_MAX_MEMBER.parse("257m")
