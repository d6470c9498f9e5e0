"""The engine's limits a test needs to reach past or to hold a result to.

They are defined where the engine applies them; this module names them for tests,
so that a conformance suite or a user's test states the limit it checks without
reaching into the engine, and follows it when it changes.

``TRIGGER_BATCH_SIZE``
    How many runs ``trigger_many`` hands storage in one write; a call of more
    than twice as many crosses two batch boundaries.
``MAX_TRACEBACK_CHARS``
    The most characters of a traceback a stored failure keeps
    (``failure.meta["traceback"]``, its innermost frames), before the line that
    says it was truncated.
"""

from __future__ import annotations

from runlane.core.attempt_outcomes import MAX_TRACEBACK_CHARS
from runlane.core.producing import TRIGGER_BATCH_SIZE

__all__ = ["MAX_TRACEBACK_CHARS", "TRIGGER_BATCH_SIZE"]
