"""The key rules of EXCLUSIVE and ORDERED subscriptions through the runtime (C11-C17)."""

from __future__ import annotations

from typing import Any

from runlane import (
    DeliveryContext,
    ManualClock,
    Message,
    Outcome,
    Run,
    Runlane,
    RunStatus,
    SubscriptionMode,
)
from runlane.testing.conformance.storage.support import Factory
from runlane.testing.conformance.topics.support import drain_now, keyed_runtime, status_of


async def test_C11_exclusive_runs_one_delivery_per_key_at_a_time(make_runtime: Factory) -> None:
    inner: list[Run | None] = []
    holder: list[Runlane] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        if not inner:
            inner.append(await holder[0].execute_next())

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    holder.append(rl)
    for order_id in (1, 2):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await rl.execute_next()
    assert inner == [None]  # the key's other delivery waits while one holds it
    assert len(await drain_now(rl)) == 1


async def test_C12_exclusive_keys_run_concurrently(make_runtime: Factory) -> None:
    inner: list[Run | None] = []
    holder: list[Runlane] = []

    started: list[str] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        started.append(ctx.key or "")
        if len(started) == 1:  # the first one, whichever key it has, holds it meanwhile
            inner.append(await holder[0].execute_next())

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    holder.append(rl)
    await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c2"})
    await rl.execute_next()
    (other,) = inner
    assert other is not None and other.partition_key != started[0]
    assert other.status is RunStatus.SUCCEEDED and sorted(started) == ["c1", "c2"]


async def test_C13_exclusive_a_dead_letter_does_not_block_its_key(make_runtime: Factory) -> None:
    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        return Outcome.dead_letter("no") if message.payload.order_id == 1 else None

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    first = await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    second = await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    await drain_now(rl)
    assert await status_of(rl, first.runs[0].id) is RunStatus.DEAD_LETTERED
    assert await status_of(rl, second.runs[0].id) is RunStatus.SUCCEEDED


async def test_C14_ordered_runs_only_the_head_in_publish_order(make_runtime: Factory) -> None:
    order: list[int] = []
    inner: list[Run | None] = []
    holder: list[Runlane] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        order.append(message.payload.order_id)
        if len(inner) < 1:
            inner.append(await holder[0].execute_next())

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.ORDERED, handle)
    holder.append(rl)
    for order_id in range(1, 6):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await drain_now(rl)
    assert inner == [None]
    assert order == [1, 2, 3, 4, 5]


async def test_C15_ordered_a_head_in_retry_backoff_holds_its_key(make_runtime: Factory) -> None:
    clock = ManualClock()
    order: list[tuple[int, int]] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        order.append((message.payload.order_id, ctx.attempt))
        if message.payload.order_id == 1 and ctx.attempt == 1:
            return Outcome.retry("later", delay="60s")
        return None

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.ORDERED, handle, clock=clock)
    for order_id in (1, 2):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await drain_now(rl)
    assert order == [(1, 1)]  # message 2 waits behind its retrying head
    clock.advance("60s")
    await drain_now(rl)
    assert order == [(1, 1), (1, 2), (2, 1)]


async def test_C16_ordered_a_dead_lettered_head_halts_its_key_until_replayed(
    make_runtime: Factory,
) -> None:
    seen: list[tuple[int, int, bool]] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        seen.append((message.payload.order_id, ctx.attempt, ctx.is_replay))
        if message.payload.order_id == 1 and not ctx.is_replay:
            return Outcome.dead_letter("needs a fix")
        return None

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.ORDERED, handle)
    head = await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 3}, attributes={"customer": "c2"})
    await drain_now(rl)
    assert sorted(seen) == [(1, 1, False), (3, 1, False)]
    (halted,) = (await rl.subscriptions.halted_keys("keyed")).data
    assert (halted.key, halted.dead_letter_id, halted.waiting) == ("c1", head.runs[0].id, 1)
    stats = await rl.subscriptions.get("keyed")
    assert stats.halted_keys == 1 and stats.dead_lettered == 1 and stats.waiting == 1
    (letter,) = (await rl.dead_letters.list(key="c1")).data
    assert letter.blocks_key
    replayed = await rl.dead_letters.replay(letter.id, reason="fixed upstream", actor="ops")
    assert replayed is not None  # None only for SNS subscriptions
    assert replayed.status is RunStatus.QUEUED and replayed.replays == 1
    await drain_now(rl)
    # The attempt keeps counting across the replay; the key resumes in order.
    assert seen[-2:] == [(1, 2, True), (2, 1, False)]
    assert (await rl.subscriptions.halted_keys("keyed")).data == []


async def test_C17_ordered_discarding_the_head_frees_its_key(make_runtime: Factory) -> None:
    seen: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        seen.append(message.payload.order_id)
        return Outcome.dead_letter("bad") if message.payload.order_id == 1 else None

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.ORDERED, handle)
    head = await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    await drain_now(rl)
    assert seen == [1]
    discarded = await rl.dead_letters.discard(head.runs[0].id, reason="obsolete", actor="ops")
    assert discarded is not None and discarded.status is RunStatus.DISCARDED
    await drain_now(rl)
    assert seen == [1, 2]
    assert (await rl.dead_letters.list()).data == []


__all__ = [name for name in dir() if name.startswith("test_")]
