"""What maintenance removes of topics at the storage boundary:
``release_expired_deduplication_keys``, and ``prune_runs`` of deliveries and the
messages they leave.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.ports.storage import Storage
from runlane.testing.conformance.storage.methods import NOW
from runlane.testing.conformance.storage.topics import (
    WINDOW,
    dead_letter_run,
    delivery,
    discard_transition,
    message,
    message_store,
)

# -- release_expired_deduplication_keys ------------------------------------------------------


async def test_release_expired_deduplication_keys_drops_entries_whose_window_ended(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(
        environment,
        [
            message("m1", deduplication_key="k1"),
            message("m2", deduplication_key="k2", at=NOW + timedelta(minutes=30)),
            message("m3"),
        ],
        NOW,
    )
    release = topics.release_expired_deduplication_keys
    assert await release(environment, NOW + WINDOW - timedelta(microseconds=1)) == 0
    assert await release(environment, NOW + WINDOW) == 1
    assert await release(environment, NOW + WINDOW) == 0
    assert await release(environment, NOW + WINDOW + timedelta(minutes=30)) == 1


# -- prune_runs -----------------------------------------------------------------------------


async def test_prune_runs_deletes_discarded_deliveries_and_messages_left_without_runs(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(
        environment,
        [message("m1", delivery("d1")), message("m2", delivery("d2")), message("m3")],
        NOW,
    )
    for run_id in ("d1", "d2"):
        await dead_letter_run(storage, environment, run_id)
    d1 = await storage.get_run(environment, "d1")
    assert d1 is not None
    await storage.apply_transitions(environment, [discard_transition(d1)], NOW)
    finished = [RunStatus.DISCARDED, RunStatus.SUCCEEDED]
    later = NOW + WINDOW + timedelta(days=1)
    assert await storage.prune_runs(environment, later, finished, 10) == 1
    assert await storage.get_run(environment, "d1") is None
    dead = await storage.get_run(environment, "d2")
    assert dead is not None and dead.status is RunStatus.DEAD_LETTERED
    # m1 and m3 are gone (their ids are free again); m2 still has its dead letter.
    for message_id in ("m1", "m3"):
        (again,) = await topics.publish_messages(
            environment, [message(message_id, payload="new", at=later)], later
        )
        assert not again.duplicate
    with pytest.raises(RunlaneError) as refused:
        await topics.publish_messages(environment, [message("m2", payload="new", at=later)], later)
    assert refused.value.code is ErrorCode.MESSAGE_ID_CONFLICT


async def test_prune_runs_keeps_messages_within_their_window(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1")], NOW)
    assert await storage.prune_runs(environment, NOW + WINDOW, [RunStatus.DISCARDED], 10) == 0
    with pytest.raises(RunlaneError) as refused:
        await topics.publish_messages(environment, [message("m1", payload="new")], NOW + WINDOW)
    assert refused.value.code is ErrorCode.MESSAGE_ID_CONFLICT


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
