"""Retry strategies for cleanup (FLIP-194's ``cleanup-strategy``, applied to checkpoints by
FLIP-270): how long to wait after the n-th failed attempt, and when to give up.

Pure: the caller counts failures and owns the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

EXPONENTIAL_DELAY = "exponential-delay"
FIXED_DELAY = "fixed-delay"
NO_RETRY = "none"
STRATEGIES = (EXPONENTIAL_DELAY, FIXED_DELAY, NO_RETRY)


@dataclass(frozen=True)
class RetryStrategy:
    """``retries`` is how often a failed attempt is retried (None: until it succeeds).

    exponential-delay waits ``initial_delay`` after the first failure and doubles the wait after
    each further one, up to ``max_delay``; fixed-delay always waits ``initial_delay``; none never
    retries.
    """

    kind: str
    initial_delay: float = 1.0
    max_delay: float = 3600.0
    retries: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in STRATEGIES:
            raise ValueError(f"unknown retry strategy {self.kind!r}")

    @classmethod
    def exponential(cls, initial: float, maximum: float, retries: int | None = None
                    ) -> "RetryStrategy":
        """Delays doubling from ``initial`` up to ``maximum``, for ``retries`` attempts (None:
        forever)."""
        return cls(EXPONENTIAL_DELAY, initial, max(initial, maximum), retries)

    @classmethod
    def fixed(cls, delay: float, retries: int | None = None) -> "RetryStrategy":
        """The same ``delay`` between attempts, for ``retries`` attempts (None: forever)."""
        return cls(FIXED_DELAY, delay, delay, retries)

    @classmethod
    def no_retry(cls) -> "RetryStrategy":
        """One attempt, no retries."""
        return cls(NO_RETRY, 0.0, 0.0, 0)

    def delay_after(self, failures: int) -> float | None:
        """Seconds to wait after ``failures`` (>= 1) failed attempts; None means give up."""
        if failures < 1:
            return 0.0
        if self.kind == NO_RETRY:
            return None
        if self.retries is not None and failures > self.retries:
            return None
        if self.kind == FIXED_DELAY:
            return self.initial_delay
        # 2 ** n overflows floats for huge n; the cap is reached long before.
        exponent = min(failures - 1, 64)
        return min(self.max_delay, self.initial_delay * (2 ** exponent))

    def describe(self) -> str:
        """The strategy in words, for log lines and ``status``."""
        tries = "until it succeeds" if self.retries is None else f"{self.retries} retries"
        if self.kind == NO_RETRY:
            return "one attempt, no retries"
        if self.kind == FIXED_DELAY:
            return f"fixed delay {self.initial_delay:g}s, {tries}"
        return f"exponential delay {self.initial_delay:g}s..{self.max_delay:g}s, {tries}"
