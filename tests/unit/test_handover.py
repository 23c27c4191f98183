"""The values the JVM shim acts on, as Python resolves and encodes them (kernel/handover.py).

The Java side decodes the same records in tests/spark/test_handover_jvm.py; here: what Python
writes, for one input varied at a time against the value config.py parses directly."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from spark_steward.config import (
    BLOB_NETWORK_TIMEOUT,
    BLOB_PEER_MAX_CONNECTIONS,
    BLOB_PEER_RATE,
    BLOB_SERVER_HANDSHAKE_TIMEOUT,
    EVENTS_BUFFER_CAPACITY,
    RESOLVED_KEY,
    StewardConf,
)
from spark_steward.kernel import handover
from spark_steward.kernel.handover import OFF, Handover, encode_pairs

ON = [("spark.steward.enabled", "true")]


def decoded(pairs: list[tuple[str, str]]) -> dict[str, object]:
    record = Handover.decode(encode_pairs(ON + pairs))
    assert record is not None
    return record.fields


def test_defaults_are_configs_defaults() -> None:
    record = decoded([])
    conf = StewardConf.from_pairs(ON)
    assert record == {
        "enabled": True, "local_dir": conf.local_dir(),
        "events_buffer_capacity": EVENTS_BUFFER_CAPACITY.default,
        "blob_peer_enabled": True, "blob_peer_max_connections": BLOB_PEER_MAX_CONNECTIONS.default,
        "blob_peer_rate": BLOB_PEER_RATE.default,
        "blob_network_timeout_ms": round(BLOB_NETWORK_TIMEOUT.default * 1000),
        "blob_handshake_timeout_ms": round(BLOB_SERVER_HANDSHAKE_TIMEOUT.default * 1000),
        "streams_enabled": True}


@pytest.mark.parametrize("key, raw, field, expected", [
    ("spark.steward.events.buffer-capacity", " 7 ", "events_buffer_capacity", 7),
    ("spark.steward.events.buffer-capacity", "1_000", "events_buffer_capacity", 1000),
    ("spark.steward.blob.peer.enabled", "FALSE", "blob_peer_enabled", False),
    ("spark.steward.blob.peer.max-connections", "3", "blob_peer_max_connections", 3),
    ("spark.steward.blob.peer.rate", "1.5m", "blob_peer_rate", 1572864),
    ("spark.steward.blob.peer.rate", "512", "blob_peer_rate", 512),
    ("spark.steward.blob.network-timeout", "2min", "blob_network_timeout_ms", 120_000),
    ("spark.steward.blob.network-timeout", "10.0001ms", "blob_network_timeout_ms", 11),
    ("spark.steward.blob.server.handshake-timeout", "0.05", "blob_handshake_timeout_ms", 50),
    ("spark.steward.blob.server.handshake-timeout", "1500ms", "blob_handshake_timeout_ms", 1500),
    ("spark.steward.streams.enabled", " False", "streams_enabled", False),
    ("spark.steward.local.dir", " /data/a b&c=d%e/ünï ", "local_dir", "/data/a b&c=d%e/ünï"),
])
def test_one_key_varied_reaches_its_field_as_config_parses_it(
        key: str, raw: str, field: str, expected: object) -> None:
    record = decoded([(key, raw)])
    assert record[field] == expected
    baseline = decoded([])
    # Nothing else moved.
    assert {f: v for f, v in record.items() if f != field} == \
        {f: v for f, v in baseline.items() if f != field}


def test_durations_round_up_never_down() -> None:
    from spark_steward.blob.config_keys import _millis

    assert _millis(0.0101) == 11
    assert _millis(0.01) == 10
    assert _millis(60.0) == 60_000


def test_a_field_declared_twice_or_of_the_wrong_type_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_steward.config import ConfigError, JvmValue

    twice = JvmValue("local_dir", str, lambda conf: "x")
    monkeypatch.setattr(handover, "jvm_values", lambda: [twice])
    with pytest.raises(ConfigError, match="'local_dir' is declared twice"):
        encode_pairs(ON)
    wrong = JvmValue("third_party_rate", int, lambda conf: 1.5)
    monkeypatch.setattr(handover, "jvm_values", lambda: [wrong])
    with pytest.raises(TypeError, match="third_party_rate resolved to float, declared int"):
        encode_pairs(ON)


def test_the_encoding_is_canonical_and_percent_encoded() -> None:
    raw = encode_pairs(ON + [("spark.steward.local.dir", "/x&y=z%")])
    assert raw.startswith(f"v={handover.VERSION}&enabled=true&")
    assert "local_dir=%2Fx%26y%3Dz%25&" in raw
    assert all(part.count("=") == 1 for part in raw.split("&"))


def test_off_validates_nothing_else() -> None:
    assert encode_pairs([("spark.steward.enabled", "false"),
                         ("spark.steward.blob.peer.rate", "fast")]) == OFF
    assert encode_pairs([]) == OFF
    assert Handover.decode(OFF) is None


def test_a_bad_value_names_its_key() -> None:
    from spark_steward.errors import ConfigError

    with pytest.raises(ConfigError, match=r"spark.steward.blob.peer.max-connections='0'"):
        encode_pairs(ON + [("spark.steward.blob.peer.max-connections", "0")])


def test_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="not a version"):
        Handover.decode("v=0&enabled=true")


class FakeConf:
    """A JVM SparkConf as py4j shows it: getAll() of tuples with _1()/_2()."""

    class Pair:
        def __init__(self, k: str, v: str) -> None:
            self.k, self.v = k, v

        def _1(self) -> str:
            return self.k

        def _2(self) -> str:
            return self.v

    def __init__(self, pairs: dict[str, str]) -> None:
        self.pairs = dict(pairs)

    def getAll(self) -> list["FakeConf.Pair"]:
        return [self.Pair(k, v) for k, v in self.pairs.items()]

    def set(self, k: str, v: str) -> None:
        self.pairs[k] = v


def test_install_replaces_a_record_copied_from_another_context() -> None:
    conf = FakeConf({"spark.steward.enabled": "true", RESOLVED_KEY: "v=1&enabled=false",
                     "spark.steward.events.buffer-capacity": "9"})
    handover.install(conf)
    record = Handover.decode(conf.pairs[RESOLVED_KEY])
    assert record is not None and record.fields["events_buffer_capacity"] == 9
    conf.set("spark.steward.enabled", "false")
    handover.install(conf)
    assert conf.pairs[RESOLVED_KEY] == OFF


def test_the_resolved_key_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    StewardConf.from_pairs([(RESOLVED_KEY, OFF), ("spark.steward.enabeld", "true")])
    assert [r.getMessage() for r in caplog.records] == [
        "unknown spark-steward key spark.steward.enabeld; did you mean spark.steward.enabled?"]


def test_the_subprocess_form_answers_and_names_a_bad_value() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert handover.main(io.StringIO(json.dumps(ON)), out, err) == 0
    assert Handover.decode(out.getvalue()) == Handover(decoded([]))
    bad = ON + [["spark.steward.blob.peer.rate", "fast"]]  # type: ignore[list-item]
    out, err = io.StringIO(), io.StringIO()
    assert handover.main(io.StringIO(json.dumps(bad)), out, err) == handover.EXIT_CONFIG_ERROR
    assert out.getvalue() == "" and "spark.steward.blob.peer.rate='fast'" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert handover.main(io.StringIO("{not json"), out, err) == 1
    assert "not a JSON list of pairs" in err.getvalue()


def test_the_subprocess_form_runs_as_the_shim_runs_it() -> None:
    done = subprocess.run([sys.executable, "-m", "spark_steward.kernel.handover"],
                          input=json.dumps(ON), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert Handover.decode(done.stdout) == Handover(decoded([]))
