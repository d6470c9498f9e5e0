"""How long a loop waits after a storage error before trying again. Workers, processes
started during an outage and the SQS consumer share it; it lives here because a
transport may not import the engine."""

from __future__ import annotations

import random

#: The first wait after an error, in seconds; it doubles with each error in a row.
ERROR_BACKOFF_INITIAL = 0.5
#: The longest wait, in seconds: well under the default lease (30 s), so that a worker
#: whose server was restarted or unreachable is back at work within a few seconds of
#: its return, long before the leases it holds (renewed every third of a lease) expire.
ERROR_BACKOFF_MAX = 5.0


class ErrorBackoff:
    """Waits that double from ``initial`` to ``maximum`` while errors come in a row, each
    drawn between half and all of its step (jitter), so that the workers a restart hit
    all at once do not all reconnect at once.

    >>> backoff = ErrorBackoff(); delay = backoff.next_delay(); backoff.reset()
    """

    __slots__ = ("_initial", "_maximum", "_step")

    def __init__(
        self, initial: float = ERROR_BACKOFF_INITIAL, maximum: float = ERROR_BACKOFF_MAX
    ) -> None:
        self._initial = initial
        self._maximum = maximum
        self._step = initial

    def next_delay(self) -> float:
        """The wait after one more error in a row."""
        step = self._step
        self._step = min(step * 2, self._maximum)
        return random.uniform(step / 2, step)

    def reset(self) -> None:
        """An operation succeeded: the next error waits ``initial`` again."""
        self._step = self._initial
