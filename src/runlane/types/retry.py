"""Retry policy and backoff arithmetic (pure functions, no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import configuration_error

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_INITIAL_DELAY = "1s"
DEFAULT_MAX_DELAY = "5m"


class BackoffType(StrEnum):
    """How the delay grows between attempts."""

    EXPONENTIAL = "exponential"
    FIXED = "fixed"


@dataclass(frozen=True, slots=True, init=False)
class RetryPolicy:
    """How often a failing run is tried and how long it waits in between.

    ``max_attempts`` counts the first attempt. Exponential backoff doubles from
    ``initial_delay`` up to ``max_delay``; with ``jitter`` each delay is drawn
    uniformly from its upper half so that failed runs do not retry in lockstep.

    >>> RetryPolicy(max_attempts=5, initial_delay="1s", max_delay="5m")
    """

    max_attempts: int
    initial_delay: float
    max_delay: float
    backoff: BackoffType
    jitter: bool

    def __init__(
        self,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        initial_delay: Duration = DEFAULT_INITIAL_DELAY,
        max_delay: Duration = DEFAULT_MAX_DELAY,
        backoff: BackoffType | str = BackoffType.EXPONENTIAL,
        jitter: bool = True,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise configuration_error(
                f"max_attempts must be a whole number of at least 1, got {max_attempts!r}."
            )
        initial = parse_duration(initial_delay, name="initial_delay")
        maximum = parse_duration(max_delay, name="max_delay")
        if maximum < initial:
            raise configuration_error("max_delay must not be shorter than initial_delay.")
        try:
            backoff_type = BackoffType(backoff)
        except ValueError:
            raise configuration_error(
                f"backoff must be 'exponential' or 'fixed', got {backoff!r}."
            ) from None
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "initial_delay", initial)
        object.__setattr__(self, "max_delay", maximum)
        object.__setattr__(self, "backoff", backoff_type)
        object.__setattr__(self, "jitter", bool(jitter))

    def has_budget(self, failures_so_far: int) -> bool:
        """Whether a run that has now failed ``failures_so_far`` times may try again."""
        return failures_so_far < self.max_attempts

    def delay_after(self, failures_so_far: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``failures_so_far``-th failure (1-based)."""
        if self.backoff is BackoffType.FIXED:
            delay = self.initial_delay
        else:
            exponent = max(0, failures_so_far - 1)
            delay = self.max_delay if exponent > 60 else self.initial_delay * (2**exponent)
        delay = min(delay, self.max_delay)
        if self.jitter and delay > 0:
            delay = (rng or random).uniform(delay / 2, delay)
        return delay


DEFAULT_RETRY_POLICY = RetryPolicy()
