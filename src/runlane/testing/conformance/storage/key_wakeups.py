"""Keyed deliveries on a transport lane (contract 5.7.5): which deliveries get a wakeup,
and a woken delivery whose key is busy is ignored and woken again once it frees.
"""

from __future__ import annotations

from typing import Any

from runlane import DeliveryContext, ManualClock, Message, RunStatus, subscription, topic
from runlane.ports.storage import Storage
from runlane.ports.transport import DeliveryMessage, DeliveryOutcome, IgnoredReason
from runlane.testing.conformance.storage.claiming_by_mode import (
    EXCLUSIVE,
    MAIN,
    NONE,
    ORDERED,
    apply_one,
    claim_one,
    dead_letter_transition,
    new_wakeups,
    publish_each,
    stored_run,
    succeed_transition,
)
from runlane.testing.conformance.storage.methods import NOW
from runlane.testing.conformance.storage.support import TransportFactory
from runlane.testing.conformance.storage.topics import discard_transition, message_store

# -- transport lanes (5.7.5) ------------------------------------------------------------


async def test_mark_key_unavailable_clears_the_request_and_says_whether_the_key_blocks(
    storage: Storage, environment: str
) -> None:
    store = storage
    topics = message_store(store)
    await publish_each(
        store, environment, ("d1", ORDERED, "k"), ("d2", ORDERED, "k"), ("t1", NONE, None),
        request=True,
    )  # fmt: skip
    # Only the head and the keyless delivery were claimable at publish: they got requests.
    assert await new_wakeups(store, environment) == ["d1", "t1"]
    assert await topics.mark_key_unavailable(environment, "d2", NOW) is True
    assert await topics.mark_key_unavailable(environment, "d1", NOW) is False
    assert await topics.mark_key_unavailable(environment, "t1", NOW) is False
    assert await topics.mark_key_unavailable(environment, "missing", NOW) is False
    # d1 lost its request (it is claimable, so tick requests it again); d2 had none and
    # is still blocked; t1 keeps its request.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 1
    assert await new_wakeups(store, environment) == ["d1"]


async def test_delivery_requests_follow_the_key_rule_one_per_key(
    storage: Storage, environment: str
) -> None:
    store = storage
    await publish_each(
        store,
        environment,
        ("e1", EXCLUSIVE, "e"),
        ("e2", EXCLUSIVE, "e"),
        ("o1", ORDERED, "o"),
        ("o2", ORDERED, "o"),
        ("n1", NONE, None),
    )
    # Tick's search requests one delivery per key, and each run once.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 3
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 0
    assert await new_wakeups(store, environment) == ["e1", "n1", "o1"]
    e1 = await claim_one(store, environment, "e1")
    o1 = await claim_one(store, environment, "o1")
    # While e1 and o1 run, neither key gets another request.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 0
    await apply_one(store, environment, succeed_transition(e1), NOW)
    await apply_one(store, environment, dead_letter_transition(o1, NOW), NOW)
    # e's key is free: e2 is requested; o is halted by its dead-lettered head.
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 1
    assert await new_wakeups(store, environment) == ["e2"]
    await apply_one(
        store, environment, discard_transition(await stored_run(store, environment, "o1")), NOW
    )
    assert await store.request_due_deliveries(environment, [MAIN], NOW, 10) == 1
    assert await new_wakeups(store, environment) == ["o2"]


async def test_execute_delivery_ignores_a_blocked_delivery_as_key_unavailable_and_wakes_it_later(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    handled: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        handled.append(message.payload["n"])

    orders = topic("orders")
    keyed = subscription("keyed", topic=orders, handler=handle, mode=ORDERED, key="customer")
    rl, transport = await make_transport_runtime(
        [], clock=clock, topics=[orders], subscriptions=[keyed]
    )
    first = await rl.publish(orders, {"n": 1}, attributes={"customer": "c1"})
    second = await rl.publish(orders, {"n": 2}, attributes={"customer": "c1"})
    (head,), (follower,) = first.runs, second.runs
    # Only the head was claimable at publish: only it got a wakeup.
    assert [a.message.run_id for a in transport.published] == [head.id]
    # A wakeup for the follower anyway (a stale or duplicated one) is acknowledged
    # without running, and its delivery request is cleared.
    stray = DeliveryMessage(environment=rl.environment, run_id=follower.id, queue=follower.queue)
    ignored = await rl.execute_delivery(stray)
    assert (ignored.outcome, ignored.reason) == (
        DeliveryOutcome.IGNORED, IgnoredReason.KEY_UNAVAILABLE,
    )  # fmt: skip
    assert (await rl.runs.get(follower.id)).status is RunStatus.QUEUED
    assert (await rl.tick()).outbox_published == 0  # the head holds the key
    executed = await rl.execute_delivery(transport.published[0].message)
    assert executed.executed and handled == [1]
    # The key is free: the next tick wakes the follower, which then runs.
    clock.advance("1s")
    await rl.tick()
    assert [a.message.run_id for a in transport.published] == [head.id, follower.id]
    assert (await rl.execute_delivery(transport.published[1].message)).executed
    assert handled == [1, 2]


async def test_a_requested_delivery_whose_key_turns_busy_is_woken_again_once_it_frees(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    inner: list[Any] = []
    holder: list[Any] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        if message.payload["n"] == 1:
            # While this delivery holds the key, the other one's wakeup arrives.
            rl, transport = holder
            inner.append(await rl.execute_delivery(transport.published[1].message))

    orders = topic("orders")
    keyed = subscription("keyed", topic=orders, handler=handle, mode=EXCLUSIVE, key="customer")
    rl, transport = await make_transport_runtime(
        [], clock=clock, topics=[orders], subscriptions=[keyed]
    )
    holder.extend([rl, transport])
    first = await rl.publish(orders, {"n": 1}, attributes={"customer": "c1"})
    second = await rl.publish(orders, {"n": 2}, attributes={"customer": "c1"})
    # Both were claimable when published (nothing held the key): both got a wakeup.
    assert [a.message.run_id for a in transport.published] == [
        first.runs[0].id, second.runs[0].id,
    ]  # fmt: skip
    assert (await rl.execute_delivery(transport.published[0].message)).executed
    (blocked,) = inner
    assert blocked.reason is IgnoredReason.KEY_UNAVAILABLE
    # Its request was cleared when it was ignored, so tick requests it again.
    clock.advance("1s")
    assert (await rl.tick()).outbox_published == 1
    again = transport.published[-1].message
    assert again.run_id == second.runs[0].id
    assert (await rl.execute_delivery(again)).executed
    assert (await rl.runs.get(second.runs[0].id)).status is RunStatus.SUCCEEDED


__all__ = [name for name in dir() if name.startswith("test_")]
