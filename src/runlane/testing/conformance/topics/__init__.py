"""The topics conformance suite: publishing, deliveries, modes and dead letters, through
the runtime (``rl.publish``, workers' attempts, ``rl.tick``, ``rl.dead_letters``,
``rl.subscriptions``) on the store under test.

Use it like the storage suite (same fixtures)::

    from runlane.testing.conformance.topics import *  # noqa: F403

One module per concern (delivering, dead-lettering, modes, cancellation,
publishing, operating, bad input). Each test of a case ported from
MemberJunction's work-queue suite names it (``C01`` ... ``C26``); the others are
this project's own cases.
"""

from __future__ import annotations

from runlane.testing.conformance.storage.support import make_runtime
from runlane.testing.conformance.topics import (
    bad_input,
    cancellation,
    dead_lettering,
    delivering,
    modes,
    operating,
    publishing,
)
from runlane.testing.conformance.topics.bad_input import *  # noqa: F403
from runlane.testing.conformance.topics.cancellation import *  # noqa: F403
from runlane.testing.conformance.topics.dead_lettering import *  # noqa: F403
from runlane.testing.conformance.topics.delivering import *  # noqa: F403
from runlane.testing.conformance.topics.modes import *  # noqa: F403
from runlane.testing.conformance.topics.operating import *  # noqa: F403
from runlane.testing.conformance.topics.publishing import *  # noqa: F403

_MODULES = (delivering, dead_lettering, modes, publishing, cancellation, operating, bad_input)

__all__ = [name for module in _MODULES for name in module.__all__] + ["make_runtime"]
