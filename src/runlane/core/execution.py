"""The attempt runner's old module, split by concern: import from the new modules.

- :mod:`runlane.core.attempts`: ``AttemptRunner``, ``OpenAttempt``, ``MAX_SETTLE_ATTEMPTS``
- :mod:`runlane.core.lease_keeping`: ``LeaseSettings``, ``DEFAULT_LEASE_DURATION``
- :mod:`runlane.core.attempt_outcomes`: ``MAX_RESULT_DEPTH``, ``MAX_TRACEBACK_CHARS``,
  ``format_traceback``

``runlane.testing.limits`` still takes ``MAX_TRACEBACK_CHARS`` from here (an import
contract allows it that one import). The pytest plugin imports it in every test
session of every user, so this module re-exports without the DeprecationWarning the
other old paths give. Once that import names :mod:`runlane.core.attempt_outcomes`,
this module becomes a forwarding stub (``runlane.types.moved``) for one release.
"""

from runlane.core.attempt_outcomes import MAX_RESULT_DEPTH, MAX_TRACEBACK_CHARS, format_traceback
from runlane.core.attempts import MAX_SETTLE_ATTEMPTS, AttemptRunner, OpenAttempt
from runlane.core.lease_keeping import DEFAULT_LEASE_DURATION, LeaseSettings

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "MAX_RESULT_DEPTH",
    "MAX_SETTLE_ATTEMPTS",
    "MAX_TRACEBACK_CHARS",
    "AttemptRunner",
    "LeaseSettings",
    "OpenAttempt",
    "format_traceback",
]
