"""Dead letters at the storage boundary (contract 5.12): the delivery transitions (dead
letter, replay, discard) through ``apply_transitions``, ``list_dead_letters``,
``subscription_stats`` and ``list_halted_keys``, and listings and statistics with the
delivery statuses.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.model.transitions import project
from runlane.ports.storage import DeadLetterFilter, QueuePolicy, RunFilter, Storage
from runlane.testing.conformance.storage.methods import LEASE, NOW, new_run
from runlane.testing.conformance.storage.topics import (
    BOOM,
    dead_letter_run,
    delivery,
    discard_transition,
    message,
    message_store,
    replay_transition,
)
from runlane.types.runs import RunEventType, SubscriptionMode

# -- dead letter, replay and discard through apply_transitions ------------------------------


async def test_a_dead_letter_keeps_its_reason_time_and_failure_and_is_not_claimable(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1", delivery("d1"))], NOW)
    dead = await dead_letter_run(storage, environment, "d1", reason="handler_refused")
    assert dead.status is RunStatus.DEAD_LETTERED and dead.lease is None
    assert (dead.dead_letter_reason, dead.dead_lettered_at) == ("handler_refused", NOW)
    assert dead.failure == BOOM and dead.failure_count == 1 and dead.attempt == 1
    later = NOW + timedelta(hours=1)
    assert await storage.claim_run(environment, "d1", LEASE, later) is None
    assert await storage.claim_due_runs(environment, [QueuePolicy("main")], 5, LEASE, later) == []
    assert await storage.list_expired_leases(environment, later, 10) == []
    types = [e.type for e in await storage.list_run_events(environment, "d1")]
    assert types == [RunEventType.CREATED, RunEventType.STARTED, RunEventType.DEAD_LETTERED]


async def test_a_replay_queues_the_dead_letter_again_with_a_fresh_budget(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1", delivery("d1"))], NOW)
    dead = await dead_letter_run(storage, environment, "d1")
    replay = replay_transition(dead)
    assert await storage.apply_transitions(environment, [replay], NOW) == [True]
    replayed = await storage.get_run(environment, "d1")
    assert replayed == project(dead, replay, NOW)
    assert replayed is not None and replayed.status is RunStatus.QUEUED
    assert (replayed.failure_count, replayed.replays, replayed.failure) == (0, 1, BOOM)
    assert replayed.message_sequence == dead.message_sequence
    again = await storage.claim_run(environment, "d1", LEASE, NOW)
    assert again is not None and again.attempt == 2 and again.replays == 1
    events = await storage.list_run_events(environment, "d1")
    assert events[3].type is RunEventType.REPLAYED and events[4].type is RunEventType.STARTED


async def test_a_discard_ends_the_dead_letter_for_good(storage: Storage, environment: str) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1", delivery("d1"))], NOW)
    dead = await dead_letter_run(storage, environment, "d1")
    discard = discard_transition(dead)
    assert await storage.apply_transitions(environment, [discard], NOW) == [True]
    discarded = await storage.get_run(environment, "d1")
    assert discarded == project(dead, discard, NOW)
    assert discarded is not None and discarded.status is RunStatus.DISCARDED
    assert discarded.is_terminal and discarded.dead_letter_reason == "max_attempts"


async def test_of_a_replay_and_a_discard_from_one_read_exactly_one_applies(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1", delivery("d1"))], NOW)
    dead = await dead_letter_run(storage, environment, "d1")
    results = await asyncio.gather(
        storage.apply_transitions(environment, [replay_transition(dead)], NOW),
        storage.apply_transitions(environment, [discard_transition(dead)], NOW),
    )
    assert sorted(r for (r,) in results) == [False, True]
    final = await storage.get_run(environment, "d1")
    assert final is not None
    assert final.status is (RunStatus.QUEUED if results[0] == [True] else RunStatus.DISCARDED)


# -- list_dead_letters -------------------------------------------------------------------


async def _three_dead_letters(storage: Storage, environment: str) -> None:
    topics = message_store(storage)
    ordered = SubscriptionMode.ORDERED
    await topics.publish_messages(
        environment,
        [
            message("m1", delivery("a1", "ship", mode=ordered, key="k1")),
            # EXCLUSIVE (published after a mode change, 5.7.2): a2 may run, and be
            # dead-lettered, while the ORDERED a1 before it still waits.
            message(
                "m2",
                delivery("a2", "ship", mode=SubscriptionMode.EXCLUSIVE, key="k1"),
                topic="invoices",
            ),
            message(
                "m3",
                delivery("b3", "bill", mode=SubscriptionMode.EXCLUSIVE, key="k1"),
                attributes={"x": "y"},
            ),
        ],
        NOW,
    )
    # a2 is dead-lettered first, but a1 (before it in k1's order) is its key's head.
    await dead_letter_run(storage, environment, "a2", at=NOW)
    await dead_letter_run(storage, environment, "b3", at=NOW + timedelta(seconds=1))
    await dead_letter_run(storage, environment, "a1", at=NOW + timedelta(seconds=2))


async def test_list_dead_letters_lists_oldest_first_with_message_and_head(
    storage: Storage, environment: str
) -> None:
    await _three_dead_letters(storage, environment)
    page = await message_store(storage).list_dead_letters(environment, DeadLetterFilter(), 10, None)
    assert page.next_cursor is None
    assert [(d.run.id, d.blocks_key) for d in page.data] == [
        ("a2", False), ("b3", False), ("a1", True),
    ]  # fmt: skip
    b3 = page.data[1]
    assert (b3.message.id, b3.message.topic, b3.message.attributes) == ("m3", "orders", {"x": "y"})
    assert b3.message.payload == {"order": "m3"} and b3.message.published_at == NOW
    assert b3.message.sequence == b3.run.message_sequence
    assert b3.run.dead_lettered_at == NOW + timedelta(seconds=1)
    assert b3.run.dead_letter_reason == "max_attempts" and b3.run.failure == BOOM


async def test_list_dead_letters_filters_by_topic_subscription_and_key(
    storage: Storage, environment: str
) -> None:
    await _three_dead_letters(storage, environment)
    topics = message_store(storage)

    async def ids(**filters: Any) -> list[str]:
        page = await topics.list_dead_letters(environment, DeadLetterFilter(**filters), 10, None)
        return [d.run.id for d in page.data]

    assert await ids(topic="invoices") == ["a2"]
    assert await ids(subscription="ship") == ["a2", "a1"]
    assert await ids(subscription="ship", topic="orders") == ["a1"]
    assert await ids(partition_key="k1") == ["a2", "b3", "a1"]
    assert await ids(partition_key="k2") == []
    assert await ids(topic="unknown") == []
    assert await ids(run_id="b3") == ["b3"]
    assert await ids(run_id="b3", subscription="ship") == []
    assert await ids(run_id="missing") == []


async def test_list_dead_letters_pages_with_its_cursor_and_refuses_a_foreign_one(
    storage: Storage, environment: str
) -> None:
    await _three_dead_letters(storage, environment)
    topics = message_store(storage)
    first = await topics.list_dead_letters(environment, DeadLetterFilter(), 2, None)
    assert [d.run.id for d in first.data] == ["a2", "b3"] and first.next_cursor is not None
    second = await topics.list_dead_letters(environment, DeadLetterFilter(), 2, first.next_cursor)
    assert ([d.run.id for d in second.data], second.next_cursor) == (["a1"], None)
    for foreign in ("a1", "nope:a1", ":", "12:"):
        with pytest.raises(RunlaneError) as refused:
            await topics.list_dead_letters(environment, DeadLetterFilter(), 2, foreign)
        assert refused.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_list_dead_letters_leaves_out_replayed_and_discarded_deliveries(
    storage: Storage, environment: str
) -> None:
    await _three_dead_letters(storage, environment)
    b3 = await storage.get_run(environment, "b3")
    a1 = await storage.get_run(environment, "a1")
    assert b3 is not None and a1 is not None
    both = [replay_transition(b3), discard_transition(a1)]
    assert await storage.apply_transitions(environment, both, NOW) == [True, True]
    page = await message_store(storage).list_dead_letters(environment, DeadLetterFilter(), 10, None)
    # a1 is discarded; a2, an EXCLUSIVE delivery, blocks nothing either way.
    assert [(d.run.id, d.blocks_key) for d in page.data] == [("a2", False)]


# -- subscription_stats and list_halted_keys ------------------------------------------------


async def test_subscription_stats_counts_deliveries_per_status_and_halted_keys(
    storage: Storage, environment: str
) -> None:
    await _three_dead_letters(storage, environment)
    topics = message_store(storage)
    await topics.publish_messages(
        environment,
        [message("m4", delivery("a4", "ship", mode=SubscriptionMode.ORDERED, key="k2"))],
        NOW,
    )
    await storage.create_runs(
        environment,
        [
            # A task run named like a subscription is not a delivery.
            new_run("task-run", task_id="ship")
        ],
        NOW,
    )
    ship, bill, none = await topics.subscription_stats(environment, ["ship", "bill", "none"])
    assert (ship.subscription, ship.counts, ship.halted_keys) == (
        "ship", {RunStatus.DEAD_LETTERED: 2, RunStatus.QUEUED: 1}, 1,
    )  # fmt: skip
    assert (bill.counts, bill.halted_keys) == ({RunStatus.DEAD_LETTERED: 1}, 0)
    assert (none.subscription, none.counts, none.halted_keys) == ("none", {}, 0)
    assert await topics.subscription_stats(environment, []) == []


async def test_list_halted_keys_lists_ordered_keys_whose_head_is_dead_lettered(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    ordered = SubscriptionMode.ORDERED
    await topics.publish_messages(
        environment,
        [
            message(f"m{i}", delivery(f"{key}{i}", "ship", mode=ordered, key=key))
            for i, key in enumerate(["b", "a", "b", "c", "b"])
        ],
        NOW,
    )
    for run_id in ("b0", "a1", "c3"):
        await dead_letter_run(storage, environment, run_id)
    page = await topics.list_halted_keys(environment, "ship", 2, None)
    assert [(h.key, h.dead_letter_id, h.waiting) for h in page.data] == [
        ("a", "a1", 0),
        ("b", "b0", 2),
    ]
    assert page.data[0].subscription == "ship" and page.data[0].dead_lettered_at == NOW
    assert page.next_cursor == "b"
    rest = await topics.list_halted_keys(environment, "ship", 2, page.next_cursor)
    assert ([h.key for h in rest.data], rest.next_cursor) == (["c"], None)
    a1 = await storage.get_run(environment, "a1")
    assert a1 is not None
    await storage.apply_transitions(environment, [replay_transition(a1)], NOW)
    assert [h.key for h in (await topics.list_halted_keys(environment, "ship", 10, None)).data] == [
        "b", "c",
    ]  # fmt: skip
    assert (await topics.list_halted_keys(environment, "bill", 10, None)).data == []


async def test_list_halted_keys_is_empty_for_exclusive_and_none_subscriptions(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(
        environment,
        [message("m1", delivery("x1", "bill", mode=SubscriptionMode.EXCLUSIVE, key="k"))],
        NOW,
    )
    await dead_letter_run(storage, environment, "x1")
    assert (await topics.list_halted_keys(environment, "bill", 10, None)).data == []
    (bill,) = await topics.subscription_stats(environment, ["bill"])
    assert bill.halted_keys == 0


# -- listing and stats with the delivery statuses ---------------------------------------------


async def test_listing_and_stats_count_dead_lettered_and_discarded_deliveries(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(
        environment, [message("m1", delivery("d1")), message("m2", delivery("d2"))], NOW
    )
    for run_id in ("d1", "d2"):
        await dead_letter_run(storage, environment, run_id)
    d1 = await storage.get_run(environment, "d1")
    assert d1 is not None
    await storage.apply_transitions(environment, [discard_transition(d1)], NOW)
    (stats,) = await storage.queue_stats(environment, [QueuePolicy("main")], NOW)
    assert stats.counts == {RunStatus.DISCARDED: 1, RunStatus.DEAD_LETTERED: 1}
    assert (stats.waiting, stats.running, stats.occupied, stats.due) == (0, 0, 0, 0)
    dead = RunFilter(statuses=[RunStatus.DEAD_LETTERED])
    assert [r.id for r in (await storage.list_runs(environment, dead, 10, None)).data] == ["d2"]
    finished = await storage.count_finished_runs(environment, NOW)
    assert finished == {"main": {RunStatus.DISCARDED: 1}}


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
