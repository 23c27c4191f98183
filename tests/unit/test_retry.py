"""Cleanup retry strategies: exact delay sequences, retry counts, and the config keys."""

from __future__ import annotations

from typing import Any

import pytest

from spark_steward.config import (CLEANUP_EXPONENTIAL_ATTEMPTS, CLEANUP_EXPONENTIAL_INITIAL,
                                  CLEANUP_EXPONENTIAL_MAX, CLEANUP_FIXED_ATTEMPTS,
                                  CLEANUP_FIXED_DELAY, CLEANUP_STRATEGY, ConfigKey,
                                  StewardConf)
from spark_steward.errors import ConfigError
from spark_steward.lifecycle.retry import (EXPONENTIAL_DELAY, FIXED_DELAY, NO_RETRY,
                                           RetryStrategy)


def delays(strategy: RetryStrategy, failures: int) -> list[float | None]:
    return [strategy.delay_after(n) for n in range(1, failures + 1)]


def attempts_until_given_up(strategy: RetryStrategy, limit: int = 1000) -> int | None:
    """Attempts made when every attempt fails (None: still retrying after ``limit``)."""
    for failures in range(1, limit + 1):
        if strategy.delay_after(failures) is None:
            return failures
    return None


# -- delay sequences ---------------------------------------------------------------------------


def test_exponential_doubles_from_the_initial_delay_up_to_the_cap() -> None:
    strategy = RetryStrategy.exponential(1.0, 10.0)
    assert delays(strategy, 7) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_exponential_with_fractional_initial_delay() -> None:
    strategy = RetryStrategy.exponential(0.25, 3.0)
    assert delays(strategy, 6) == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_exponential_stays_at_the_cap_for_huge_failure_counts() -> None:
    strategy = RetryStrategy.exponential(0.001, 3600.0)
    assert strategy.delay_after(10_000) == 3600.0
    assert strategy.delay_after(10**9) == 3600.0


def test_exponential_cap_below_the_initial_delay_is_raised_to_it() -> None:
    strategy = RetryStrategy.exponential(5.0, 1.0)
    assert strategy.max_delay == 5.0
    assert delays(strategy, 3) == [5.0, 5.0, 5.0]


def test_fixed_delay_waits_the_same_every_time() -> None:
    strategy = RetryStrategy.fixed(7.5)
    assert delays(strategy, 5) == [7.5] * 5
    assert strategy.delay_after(100_000) == 7.5


def test_none_gives_up_after_the_first_failure() -> None:
    strategy = RetryStrategy.no_retry()
    assert strategy.delay_after(1) is None
    assert strategy.delay_after(2) is None
    assert attempts_until_given_up(strategy) == 1


def test_none_spelled_directly_also_never_retries() -> None:
    assert RetryStrategy(NO_RETRY).delay_after(1) is None


def test_no_failures_yet_means_no_wait() -> None:
    for strategy in (RetryStrategy.exponential(1, 10), RetryStrategy.fixed(3),
                     RetryStrategy.no_retry()):
        assert strategy.delay_after(0) == 0.0


def test_unknown_kind_is_rejected_with_its_name() -> None:
    with pytest.raises(ValueError, match="'linear-delay'"):
        RetryStrategy("linear-delay")


# -- retry counts ------------------------------------------------------------------------------


@pytest.mark.parametrize("retries", [0, 1, 3, 10])
def test_fixed_attempts_n_means_n_retries_after_the_first_attempt(retries: int) -> None:
    strategy = RetryStrategy.fixed(1.0, retries)
    assert attempts_until_given_up(strategy) == retries + 1
    assert delays(strategy, retries + 1) == [1.0] * retries + [None]


@pytest.mark.parametrize("retries", [0, 1, 4])
def test_exponential_attempts_n_means_n_retries_after_the_first_attempt(retries: int) -> None:
    strategy = RetryStrategy.exponential(1.0, 100.0, retries)
    assert attempts_until_given_up(strategy) == retries + 1
    assert delays(strategy, retries + 1) == [2.0 ** i for i in range(retries)] + [None]


def test_exponential_with_three_retries_gives_exact_sequence_then_gives_up() -> None:
    strategy = RetryStrategy.exponential(2.0, 5.0, retries=3)
    assert delays(strategy, 5) == [2.0, 4.0, 5.0, None, None]


def test_infinite_retries_never_give_up() -> None:
    assert attempts_until_given_up(RetryStrategy.fixed(1.0), limit=10_000) is None
    assert attempts_until_given_up(RetryStrategy.exponential(1.0, 60.0), limit=10_000) is None
    assert RetryStrategy.fixed(1.0).delay_after(10**9) == 1.0


def test_describe_names_the_strategy_and_its_limits() -> None:
    assert RetryStrategy.no_retry().describe() == "one attempt, no retries"
    assert RetryStrategy.fixed(2.0, 3).describe() == "fixed delay 2s, 3 retries"
    assert RetryStrategy.exponential(1.0, 60.0).describe() == \
        "exponential delay 1s..60s, until it succeeds"


# -- configuration ---------------------------------------------------------------------------


def strategy_of(*pairs: tuple[str, str]) -> RetryStrategy:
    return StewardConf.from_pairs(list(pairs)).retry_strategy()


def test_default_strategy_is_exponential_1s_to_1h_retrying_forever() -> None:
    strategy = StewardConf.from_pairs([]).retry_strategy()
    assert strategy == RetryStrategy(EXPONENTIAL_DELAY, 1.0, 3600.0, None)
    assert delays(strategy, 3) == [1.0, 2.0, 4.0]


def test_exponential_keys_are_read() -> None:
    strategy = strategy_of(
        (CLEANUP_STRATEGY.name, "exponential-delay"),
        (CLEANUP_EXPONENTIAL_INITIAL.name, "100ms"),
        (CLEANUP_EXPONENTIAL_MAX.name, "1s"),
        (CLEANUP_EXPONENTIAL_ATTEMPTS.name, "5"))
    assert strategy == RetryStrategy(EXPONENTIAL_DELAY, 0.1, 1.0, 5)
    got = delays(strategy, 7)
    assert got[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0]) and got[5:] == [None, None]


def test_fixed_keys_are_read_and_exponential_keys_ignored() -> None:
    strategy = strategy_of(
        (CLEANUP_STRATEGY.name, "fixed-delay"),
        (CLEANUP_FIXED_DELAY.name, "250ms"),
        (CLEANUP_FIXED_ATTEMPTS.name, "2"),
        (CLEANUP_EXPONENTIAL_INITIAL.name, "9s"))
    assert strategy == RetryStrategy(FIXED_DELAY, 0.25, 0.25, 2)
    assert delays(strategy, 3) == [0.25, 0.25, None]


def test_fixed_defaults_to_one_minute_forever() -> None:
    strategy = strategy_of((CLEANUP_STRATEGY.name, "fixed-delay"))
    assert strategy == RetryStrategy(FIXED_DELAY, 60.0, 60.0, None)


def test_none_strategy_from_config() -> None:
    strategy = strategy_of((CLEANUP_STRATEGY.name, "none"),
                           (CLEANUP_FIXED_ATTEMPTS.name, "9"))
    assert strategy.kind == NO_RETRY
    assert attempts_until_given_up(strategy) == 1


@pytest.mark.parametrize("raw", ["infinite", "INFINITE", " inf ", "unlimited"])
def test_attempts_infinite_spellings(raw: str) -> None:
    strategy = strategy_of((CLEANUP_STRATEGY.name, "fixed-delay"),
                           (CLEANUP_FIXED_ATTEMPTS.name, raw))
    assert strategy.retries is None


def test_attempts_zero_means_a_single_attempt() -> None:
    strategy = strategy_of((CLEANUP_STRATEGY.name, "exponential-delay"),
                           (CLEANUP_EXPONENTIAL_ATTEMPTS.name, "0"))
    assert strategy.retries == 0
    assert attempts_until_given_up(strategy) == 1


def test_bogus_strategy_names_key_value_and_choices() -> None:
    with pytest.raises(ConfigError) as info:
        strategy_of((CLEANUP_STRATEGY.name, "bogus"))
    message = str(info.value)
    assert "spark.steward.cleanup-strategy='bogus'" in message
    for choice in ("exponential-delay", "fixed-delay", "none"):
        assert choice in message


@pytest.mark.parametrize("key", [CLEANUP_FIXED_ATTEMPTS, CLEANUP_EXPONENTIAL_ATTEMPTS])
@pytest.mark.parametrize("raw", ["-1", "1.5", "forever", ""])
def test_bad_attempts_name_key_and_value(key: ConfigKey[Any], raw: str) -> None:
    name = key.name
    with pytest.raises(ConfigError) as info:
        strategy_of((name, raw))
    message = str(info.value)
    assert f"{name}={raw!r}" in message
    assert "infinite" in message


def test_negative_attempts_say_zero_or_more() -> None:
    with pytest.raises(ConfigError, match=r"0 or more"):
        strategy_of((CLEANUP_FIXED_ATTEMPTS.name, "-1"))


@pytest.mark.parametrize("key", [CLEANUP_EXPONENTIAL_INITIAL, CLEANUP_EXPONENTIAL_MAX,
                                 CLEANUP_FIXED_DELAY])
def test_zero_delay_is_rejected_naming_the_key(key: ConfigKey[Any]) -> None:
    name = key.name
    with pytest.raises(ConfigError, match=rf"^{name}='0s' is not valid: must be at least 0.001"):
        strategy_of((name, "0s"))


def test_bad_duration_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"fixed-delay\.delay='soon'.*duration"):
        strategy_of((CLEANUP_FIXED_DELAY.name, "soon"))


def test_checkpoint_keys_parse_and_validate() -> None:
    pairs = StewardConf.from_pairs([("spark.steward.checkpoints.retained", "3"),
                                    ("spark.steward.checkpoints.orphan-grace", "90s")])
    assert pairs.as_dict()["spark.steward.checkpoints.retained"] == 3
    assert pairs.as_dict()["spark.steward.checkpoints.orphan-grace"] == 90.0
    with pytest.raises(ConfigError, match=r"spark.steward.checkpoints.retained='0'"):
        StewardConf.from_pairs([("spark.steward.checkpoints.retained", "0")])
    with pytest.raises(ConfigError, match=r"spark.steward.cleanup.io-threads='0'"):
        StewardConf.from_pairs([("spark.steward.cleanup.io-threads", "0")])
    defaults = StewardConf.from_pairs([]).as_dict()
    assert defaults["spark.steward.checkpoints.retained"] == 1
    assert defaults["spark.steward.checkpoints.orphan-grace"] == 3600.0
    assert defaults["spark.steward.cleanup.shutdown-timeout"] == 30.0
    assert defaults["spark.steward.cleanup.io-threads"] == 4
