"""Topics at the storage boundary (contract 5.12): ``publish_messages`` and
``get_messages`` of :class:`~runlane.ports.storage.StoresMessages` called directly,
and the messages, deliveries and transitions the other topics modules build on.

Claims per subscription mode are not here: the key rules of claiming are tested
with the claim statements (:mod:`.claiming_by_mode`).
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.model.transitions import project
from runlane.ports.storage import (
    NewDelivery,
    NewEvent,
    NewMessage,
    RunChanges,
    RunFilter,
    Storage,
    StoresMessages,
    Transition,
)
from runlane.testing.conformance.storage.methods import LEASE, NOW, new_run
from runlane.topics.publishing import canonical_envelope
from runlane.types.runs import Run, RunEventType, RunFailure, RunSourceType, SubscriptionMode

WINDOW = timedelta(hours=1)
BOOM = RunFailure("task_failed", "it broke", retryable=True)


def delivery(
    run_id: str,
    subscription: str = "audit",
    *,
    mode: SubscriptionMode = SubscriptionMode.NONE,
    key: str | None = None,
    queue: str = "main",
    request: bool = False,
) -> NewDelivery:
    """One delivery of a message to ``subscription``."""
    return NewDelivery(run_id, subscription, queue, mode, key, request_delivery=request)


def message(
    message_id: str,
    *deliveries: NewDelivery,
    topic: str = "orders",
    payload: Any = None,
    attributes: dict[str, str] | None = None,
    deduplication_key: str | None = None,
    at: Any = NOW,
) -> NewMessage:
    """A message of ``topic`` with ``deliveries``; its window ends :data:`WINDOW` after ``at``."""
    body = {"order": message_id} if payload is None else payload
    attrs = dict(attributes or {})
    return NewMessage(
        id=message_id,
        topic=topic,
        payload=body,
        payload_json=json.dumps(body, separators=(",", ":")),
        attributes=attrs,
        envelope=canonical_envelope(topic, body, attrs),
        window_ends_at=at + WINDOW,
        deduplication_key=deduplication_key,
        trace_carrier={"traceparent": "00-abc-def-01"},
        deliveries=tuple(deliveries),
    )


def message_store(store: Storage) -> StoresMessages:
    """``store`` as the topics methods' protocol; the driver must have ``stores_messages``."""
    assert store.capabilities.stores_messages
    assert isinstance(store, StoresMessages)
    return cast(StoresMessages, store)


async def all_runs(store: Storage, environment: str) -> list[Run]:
    """Every run of ``environment`` (the cases here store fewer than a hundred)."""
    return (await store.list_runs(environment, RunFilter(), 100, None)).data


async def dead_letter_run(
    store: Storage, environment: str, run_id: str, *, at: Any = NOW, reason: str = "max_attempts"
) -> Run:
    """Claim ``run_id`` and dead-letter it as a spent retry budget does."""
    run = await store.claim_run(environment, run_id, LEASE, at)
    assert run is not None and run.lease is not None
    transition = Transition(
        run_id,
        run.event_sequence,
        RunChanges(
            RunStatus.DEAD_LETTERED,
            failure=BOOM,
            add_failure=True,
            dead_letter_reason=reason,
            dead_lettered_at=at,
        ),
        (NewEvent(RunEventType.DEAD_LETTERED, {"attempt": run.attempt, "reason": reason}),),
        lease_token=run.lease.token,
    )
    assert await store.apply_transitions(environment, [transition], at) == [True]
    stored = await store.get_run(environment, run_id)
    assert stored == project(run, transition, at)
    return stored


def replay_transition(run: Run, replays: int | None = None, *, at: datetime = NOW) -> Transition:
    """The replay of dead letter ``run`` as read: queued at ``at`` with a fresh budget."""
    return Transition(
        run.id,
        run.event_sequence,
        RunChanges(
            RunStatus.QUEUED,
            run_at=at,
            failure=run.failure,
            replays=run.replays + 1 if replays is None else replays,
            reset_failures=True,
        ),
        (NewEvent(RunEventType.REPLAYED, {"reason": None, "actor": None}),),
    )


def discard_transition(run: Run) -> Transition:
    """The discard of dead letter ``run`` as read."""
    return Transition(
        run.id,
        run.event_sequence,
        RunChanges(RunStatus.DISCARDED, failure=run.failure),
        (NewEvent(RunEventType.DISCARDED, {"reason": "obsolete", "actor": None}),),
    )


# -- publish_messages --------------------------------------------------------------------


async def test_publish_messages_stores_the_message_and_one_queued_run_per_delivery(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    published = message(
        "m1",
        delivery("d-audit"),
        delivery("d-ship", "ship", mode=SubscriptionMode.ORDERED, key="cust-1", queue="other"),
        attributes={"kind": "new"},
    )
    (outcome,) = await topics.publish_messages(environment, [published], NOW)
    assert not outcome.duplicate and outcome.outbox == ()
    stored = outcome.message
    assert (stored.id, stored.topic, stored.payload, stored.attributes) == (
        "m1", "orders", {"order": "m1"}, {"kind": "new"},
    )  # fmt: skip
    assert stored.published_at == NOW and stored.sequence >= 1
    assert stored.trace_carrier == {"traceparent": "00-abc-def-01"}
    audit, ship = outcome.runs
    assert (audit.id, audit.task_id, audit.queue, audit.mode, audit.partition_key) == (
        "d-audit", "audit", "main", SubscriptionMode.NONE, None,
    )  # fmt: skip
    assert (ship.id, ship.task_id, ship.queue, ship.mode, ship.partition_key) == (
        "d-ship", "ship", "other", SubscriptionMode.ORDERED, "cust-1",
    )  # fmt: skip
    for run in outcome.runs:
        assert run.status is RunStatus.QUEUED and run.run_at == NOW and run.attempt == 0
        assert run.payload == {"order": "m1"} and run.replays == 0
        assert run.message_sequence == stored.sequence and run.is_delivery
        assert run.source.type is RunSourceType.PUBLISH
        assert (run.source.topic, run.source.message_id) == ("orders", "m1")
        assert run.trace_carrier == {"traceparent": "00-abc-def-01"}
        assert await storage.get_run(environment, run.id) == run
        (created,) = await storage.list_run_events(environment, run.id)
        assert created.type is RunEventType.CREATED
        assert created.data["source"] == {"type": "publish", "topic": "orders", "message_id": "m1"}


async def test_publish_messages_draws_increasing_sequences_in_publish_order(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    first = await topics.publish_messages(environment, [message("a"), message("b")], NOW)
    (second,) = await topics.publish_messages(environment, [message("c")], NOW)
    sequences = [o.message.sequence for o in [*first, second]]
    assert sequences == sorted(set(sequences)) and sequences[0] >= 1


async def test_publish_messages_with_no_deliveries_still_stores_the_message(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    (outcome,) = await topics.publish_messages(environment, [message("lonely")], NOW)
    assert outcome.runs == [] and not outcome.duplicate
    (again,) = await topics.publish_messages(environment, [message("lonely")], NOW)
    assert again.duplicate and again.message == outcome.message and again.runs == []


async def test_publish_messages_of_a_known_id_with_equal_content_is_the_originals_duplicate(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    (original,) = await topics.publish_messages(
        environment, [message("m1", delivery("d1"), attributes={"b": "2", "a": "1"})], NOW
    )
    await dead_letter_run(storage, environment, "d1")
    later = NOW + timedelta(minutes=5)
    (again,) = await topics.publish_messages(
        environment,
        [message("m1", delivery("d2"), attributes={"a": "1", "b": "2"}, at=later)],
        later,
    )
    assert again.duplicate and again.message == original.message and again.outbox == ()
    assert [(r.id, r.status) for r in again.runs] == [("d1", RunStatus.DEAD_LETTERED)]
    assert [r.id for r in await all_runs(storage, environment)] == ["d1"]


async def test_publish_messages_of_a_known_id_with_other_content_is_refused_writing_nothing(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1", delivery("d1"))], NOW)
    for changed in (
        message("m1", payload={"order": "other"}),
        message("m1", topic="invoices"),
        message("m1", attributes={"kind": "new"}),
    ):
        with pytest.raises(RunlaneError) as refused:
            await topics.publish_messages(
                environment, [message("fresh", delivery("d-fresh")), changed], NOW
            )
        assert refused.value.code is ErrorCode.MESSAGE_ID_CONFLICT
        assert refused.value.meta == {"message_id": "m1"}
    assert [r.id for r in await all_runs(storage, environment)] == ["d1"]
    # The batch's first message was taken back too: its id is still free.
    (fresh,) = await topics.publish_messages(environment, [message("fresh", payload=1)], NOW)
    assert not fresh.duplicate


async def test_publish_messages_refuses_a_delivery_run_id_named_twice_or_taken_writing_nothing(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await storage.create_runs(environment, [new_run("taken")], NOW)
    for batch in (
        [message("m1", delivery("d1"), delivery("d1", "ship"))],
        [message("m1", delivery("d1")), message("m2", delivery("d1", "ship"))],
        [message("m1", delivery("d1")), message("m2", delivery("taken"))],
        [message("m1", delivery("d1"), delivery("taken", "ship"))],
        [message("m1", delivery("taken", mode=SubscriptionMode.ORDERED, key="k"))],
    ):
        with pytest.raises(RunlaneError) as refused:
            await topics.publish_messages(environment, batch, NOW)
        assert refused.value.code is ErrorCode.STORAGE_CONFLICT
    assert [r.id for r in await all_runs(storage, environment)] == ["taken"]
    (fresh,) = await topics.publish_messages(environment, [message("m1", delivery("d1"))], NOW)
    assert not fresh.duplicate


async def test_publish_messages_sees_message_ids_of_its_own_environment_only(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1")], NOW)
    (elsewhere,) = await topics.publish_messages(
        f"{environment}-other", [message("m1", payload=2)], NOW
    )
    assert not elsewhere.duplicate


async def test_publish_messages_with_a_held_deduplication_key_is_a_duplicate_whatever_it_carries(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    (original,) = await topics.publish_messages(
        environment, [message("m1", delivery("d1"), deduplication_key="k")], NOW
    )
    within = NOW + WINDOW - timedelta(microseconds=1)
    (again,) = await topics.publish_messages(
        environment,
        [message("m2", delivery("d2"), payload=[1], deduplication_key="k", at=within)],
        within,
    )
    assert again.duplicate and again.message == original.message
    assert [r.id for r in again.runs] == ["d1"]
    (other_topic,) = await topics.publish_messages(
        environment, [message("m3", topic="invoices", deduplication_key="k")], within
    )
    assert not other_topic.duplicate
    # At exactly the window's end the key is free again: a new message fans out.
    (renewed,) = await topics.publish_messages(
        environment,
        [message("m4", delivery("d4"), deduplication_key="k", at=NOW + WINDOW)],
        NOW + WINDOW,
    )
    assert not renewed.duplicate and [r.id for r in renewed.runs] == ["d4"]
    assert renewed.message.sequence > original.message.sequence
    (held,) = await topics.publish_messages(
        environment, [message("m5", deduplication_key="k", at=within)], NOW + WINDOW
    )
    assert held.duplicate and held.message.id == "m4"


async def test_publish_messages_checks_the_deduplication_key_before_the_message_id(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    await topics.publish_messages(environment, [message("m1", deduplication_key="k")], NOW)
    await topics.publish_messages(environment, [message("m2")], NOW)
    (outcome,) = await topics.publish_messages(
        environment, [message("m2", payload="changed", deduplication_key="k")], NOW
    )
    assert outcome.duplicate and outcome.message.id == "m1"


async def test_publish_messages_dedupes_within_one_call(storage: Storage, environment: str) -> None:
    topics = message_store(storage)
    first, second = await topics.publish_messages(
        environment,
        [
            message("m1", delivery("d1"), deduplication_key="k"),
            message("m2", delivery("d2"), deduplication_key="k"),
        ],
        NOW,
    )
    assert (first.duplicate, second.duplicate) == (False, True)
    assert second.message == first.message and [r.id for r in second.runs] == ["d1"]


async def test_publish_messages_answers_stored_and_repeated_ids_of_one_call_as_duplicates(
    storage: Storage, environment: str
) -> None:
    # Concurrent publishes share one call (one statement on PostgreSQL): a message whose
    # id is stored, or repeats an earlier message of the call, is that one's duplicate,
    # and the others of the call are written beside it.
    topics = message_store(storage)
    (stored,) = await topics.publish_messages(environment, [message("s", delivery("d-s"))], NOW)
    fresh, again, repeated, other = await topics.publish_messages(
        environment,
        [
            message("new", delivery("d-new", request=True), delivery("d-new-2", "ship")),
            message("s", delivery("d-x")),
            message("new", delivery("d-y")),
            message("other", attributes={"kind": "a"}),
        ],
        NOW,
        outbox_claimed_until=NOW + timedelta(seconds=30),
    )
    assert not fresh.duplicate and not other.duplicate
    assert [r.id for r in fresh.runs] == ["d-new", "d-new-2"]
    assert [o.run_id for o in fresh.outbox] == ["d-new"]
    assert again.duplicate and again.message == stored.message
    assert [r.id for r in again.runs] == ["d-s"] and again.outbox == ()
    assert repeated.duplicate and repeated.message == fresh.message
    assert [r.id for r in repeated.runs] == ["d-new", "d-new-2"]
    assert other.runs == [] and other.message.attributes == {"kind": "a"}
    sequences = [stored.message.sequence, fresh.message.sequence, other.message.sequence]
    assert sequences == sorted(set(sequences))
    assert sorted(r.id for r in await all_runs(storage, environment)) == [
        "d-new", "d-new-2", "d-s",
    ]  # fmt: skip
    by_id = await topics.get_messages(environment, ["new", "other"])
    assert by_id["new"] == fresh.message and by_id["other"] == other.message
    (run,) = [r for r in await all_runs(storage, environment) if r.id == "d-new"]
    assert run == fresh.runs[0]
    # Distinct ids, one of them stored: the stored one is a duplicate, the other written.
    again, third = await topics.publish_messages(
        environment, [message("s", delivery("d-z")), message("third", delivery("d-3"))], NOW
    )
    assert again.duplicate and [r.id for r in again.runs] == ["d-s"]
    assert not third.duplicate and [r.id for r in third.runs] == ["d-3"]
    assert third.message.sequence is not None and other.message.sequence is not None
    assert third.message.sequence > other.message.sequence
    assert "d-z" not in {r.id for r in await all_runs(storage, environment)}


async def test_publish_messages_requests_delivery_only_for_deliveries_claimable_at_once(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    ordered = SubscriptionMode.ORDERED
    exclusive = SubscriptionMode.EXCLUSIVE
    (first,) = await topics.publish_messages(
        environment,
        [
            message(
                "m1",
                delivery("o1", "ship", mode=ordered, key="k", request=True),
                delivery("x1", "bill", mode=exclusive, key="k", request=True),
                delivery("n1", "audit", request=True),
                delivery("quiet", "audit-2"),
            )
        ],
        NOW,
    )
    assert sorted(m.run_id for m in first.outbox) == ["n1", "o1", "x1"]
    assert all(m.id == f"{m.run_id}.2" and m.queue == "main" for m in first.outbox)
    assert {r.id: r.event_sequence for r in first.runs} == {"o1": 2, "x1": 2, "n1": 2, "quiet": 1}
    events = await storage.list_run_events(environment, "o1")
    assert [e.type for e in events] == [RunEventType.CREATED, RunEventType.DELIVERY_REQUESTED]
    # x1 holds the EXCLUSIVE key; o1 is the ORDERED key's unfinished head.
    assert await storage.claim_run(environment, "x1", LEASE, NOW) is not None
    (second,) = await topics.publish_messages(
        environment,
        [
            message(
                "m2",
                delivery("o2", "ship", mode=ordered, key="k", request=True),
                delivery("x2", "bill", mode=exclusive, key="k", request=True),
                delivery("x2-other", "bill", mode=exclusive, key="k2", request=True),
                delivery("o2-keyless", "ship", mode=ordered, request=True),
            )
        ],
        NOW,
    )
    assert sorted(m.run_id for m in second.outbox) == ["o2-keyless", "x2-other"]
    assert {r.id: r.event_sequence for r in second.runs}["o2"] == 1
    # An expired lease does not hold an EXCLUSIVE key.
    after_lease = LEASE.expires_at + timedelta(seconds=1)
    (third,) = await topics.publish_messages(
        environment,
        [message("m3", delivery("x3", "bill", mode=exclusive, key="k", request=True))],
        after_lease,
    )
    assert [m.run_id for m in third.outbox] == ["x3"]


async def test_publish_messages_writes_claimed_requests_when_the_caller_publishes_them(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    until = NOW + timedelta(seconds=30)
    (outcome,) = await topics.publish_messages(
        environment, [message("m1", delivery("d1", request=True))], NOW, outbox_claimed_until=until
    )
    assert [m.run_id for m in outcome.outbox] == ["d1"]
    assert await storage.claim_outbox(environment, NOW, 10, until) == []
    await topics.publish_messages(environment, [message("m2", delivery("d2", request=True))], NOW)
    claimed = await storage.claim_outbox(environment, NOW, 10, until)
    assert [m.run_id for m in claimed] == ["d2"]


async def test_concurrent_publishes_of_one_deduplication_key_fan_out_once(
    storage: Storage, environment: str
) -> None:
    topics = message_store(storage)
    outcomes = await asyncio.gather(
        *(
            topics.publish_messages(
                environment, [message(f"m{i}", delivery(f"d{i}"), deduplication_key="k")], NOW
            )
            for i in range(6)
        )
    )
    fresh = [o for (o,) in outcomes if not o.duplicate]
    assert len(fresh) == 1
    assert all(o.message.id == fresh[0].message.id for (o,) in outcomes)
    assert [r.id for r in await all_runs(storage, environment)] == [fresh[0].runs[0].id]


# -- get_messages ----------------------------------------------------------------------------


async def test_get_messages_reads_stored_messages_by_id(storage: Storage, environment: str) -> None:
    topics = message_store(storage)
    published = await topics.publish_messages(
        environment,
        [message("m1", attributes={"kind": "new"}), message("m2", payload=[1, 2.5, None])],
        NOW,
    )
    found = await topics.get_messages(environment, ["m2", "m1", "missing"])
    assert found == {o.message.id: o.message for o in published}
    assert await topics.get_messages(environment, []) == {}
    assert await topics.get_messages(f"{environment}-other", ["m1"]) == {}


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
