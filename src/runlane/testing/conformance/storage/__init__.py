"""The storage conformance suite: every storage driver must pass all of it.

Use it from a test module of your own::

    from runlane.testing.conformance.storage import *  # noqa: F403

and provide two fixtures: ``lane_factory`` (a callable returning a new
:class:`runlane.Lane` on the same store each time it is called) and
``environment`` (a fresh environment name per test). The tests are async and
expect pytest-asyncio in ``auto`` mode.

One module per concern (producing, claiming and executing, leases, cancellation,
idempotency, operating, schedules, leadership, capacity, outbox, ...) tests through
the runtime; :mod:`.methods` and :mod:`.methods_maintenance` call each storage method
directly for its edges, so a broken driver names the method that broke. The topics
methods are called the same way (:mod:`.topics`, :mod:`.dead_letters`,
:mod:`.retention`), and claims per subscription mode are tested at the storage
boundary (:mod:`.claiming_by_mode`, :mod:`.key_wakeups`, :mod:`.claiming_model`).
"""

from __future__ import annotations

import pytest

from runlane.testing.conformance.storage import (
    bad_input,
    cancellation,
    capacity,
    claiming_by_mode,
    claiming_model,
    dead_letters,
    dependencies,
    executing,
    groups,
    idempotency,
    implied_events,
    key_wakeups,
    leadership,
    leases,
    lone_runs,
    methods,
    methods_dependencies,
    methods_maintenance,
    observing_methods,
    operating,
    outbox,
    pausing,
    priorities,
    producing,
    progress,
    queue_pause_methods,
    rate_keys,
    rate_limits,
    retention,
    run_batches,
    schedules,
    settle_and_claim,
    throughput,
    topics,
    waiting,
)
from runlane.testing.conformance.storage.bad_input import *  # noqa: F403
from runlane.testing.conformance.storage.cancellation import *  # noqa: F403
from runlane.testing.conformance.storage.capacity import *  # noqa: F403
from runlane.testing.conformance.storage.claiming_by_mode import *  # noqa: F403
from runlane.testing.conformance.storage.claiming_model import *  # noqa: F403
from runlane.testing.conformance.storage.dead_letters import *  # noqa: F403
from runlane.testing.conformance.storage.dependencies import *  # noqa: F403
from runlane.testing.conformance.storage.executing import *  # noqa: F403
from runlane.testing.conformance.storage.groups import *  # noqa: F403
from runlane.testing.conformance.storage.idempotency import *  # noqa: F403
from runlane.testing.conformance.storage.implied_events import *  # noqa: F403
from runlane.testing.conformance.storage.key_wakeups import *  # noqa: F403
from runlane.testing.conformance.storage.leadership import *  # noqa: F403
from runlane.testing.conformance.storage.leases import *  # noqa: F403
from runlane.testing.conformance.storage.lone_runs import *  # noqa: F403
from runlane.testing.conformance.storage.methods import *  # noqa: F403
from runlane.testing.conformance.storage.methods_dependencies import *  # noqa: F403
from runlane.testing.conformance.storage.methods_maintenance import *  # noqa: F403
from runlane.testing.conformance.storage.observing_methods import *  # noqa: F403
from runlane.testing.conformance.storage.operating import *  # noqa: F403
from runlane.testing.conformance.storage.outbox import *  # noqa: F403
from runlane.testing.conformance.storage.pausing import *  # noqa: F403
from runlane.testing.conformance.storage.priorities import *  # noqa: F403
from runlane.testing.conformance.storage.producing import *  # noqa: F403
from runlane.testing.conformance.storage.progress import *  # noqa: F403
from runlane.testing.conformance.storage.queue_pause_methods import *  # noqa: F403
from runlane.testing.conformance.storage.rate_keys import *  # noqa: F403
from runlane.testing.conformance.storage.rate_limits import *  # noqa: F403
from runlane.testing.conformance.storage.retention import *  # noqa: F403
from runlane.testing.conformance.storage.run_batches import *  # noqa: F403
from runlane.testing.conformance.storage.schedules import *  # noqa: F403
from runlane.testing.conformance.storage.settle_and_claim import *  # noqa: F403
from runlane.testing.conformance.storage.support import make_runtime, make_transport_runtime
from runlane.testing.conformance.storage.throughput import *  # noqa: F403
from runlane.testing.conformance.storage.topics import *  # noqa: F403
from runlane.testing.conformance.storage.waiting import *  # noqa: F403

_MODULES = (
    producing,
    bad_input,
    executing,
    leases,
    cancellation,
    idempotency,
    operating,
    schedules,
    leadership,
    capacity,
    settle_and_claim,
    outbox,
    methods,
    run_batches,
    lone_runs,
    methods_maintenance,
    observing_methods,
    methods_dependencies,
    implied_events,
    topics,
    dead_letters,
    retention,
    dependencies,
    groups,
    claiming_by_mode,
    key_wakeups,
    claiming_model,
    waiting,
    progress,
    throughput,
    pausing,
    queue_pause_methods,
    rate_limits,
    rate_keys,
    priorities,
)

__all__ = [name for module in _MODULES for name in module.__all__] + [
    "make_runtime",
    "make_transport_runtime",
    "pytestmark",
]
pytestmark = pytest.mark.asyncio
