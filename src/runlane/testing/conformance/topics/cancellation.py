"""Cancelling a delivery: in flight, with a key, and with its worker gone (C24-C26)."""

from __future__ import annotations

from typing import Any

from runlane import DeliveryContext, ManualClock, Message, Run, Runlane, RunStatus, SubscriptionMode
from runlane.testing.conformance.storage.support import Factory
from runlane.testing.conformance.topics.support import (
    claim_and_vanish,
    drain_now,
    keyed_runtime,
    orders_topic,
    runtime_for,
    status_of,
    subscribe,
)


async def test_C24_cancelling_in_flight_fences_the_settle_and_ends_cancelled(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    holder: list[Runlane] = []
    statuses: list[RunStatus] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        statuses.append((await holder[0].runs.cancel(ctx.run_id, reason="stop")).status)
        raise RuntimeError("would have retried")

    rl = await runtime_for(make_runtime, [subscribe("s", handle, orders)])
    holder.append(rl)
    await rl.publish(orders, {"order_id": 1})
    (run,) = await drain_now(rl)
    assert statuses == [RunStatus.CANCELLATION_REQUESTED]
    assert run.status is RunStatus.CANCELLED and run.cancel_reason == "stop"
    assert (await rl.dead_letters.list()).data == []


async def test_C25_a_cancelled_key_frees_when_its_handler_returns(make_runtime: Factory) -> None:
    holder: list[Runlane] = []
    inner: list[Run | None] = []
    seen: list[str] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        seen.append(ctx.run_id)
        if len(seen) == 1:  # the first claimed (EXCLUSIVE promises no order) cancels itself
            await holder[0].runs.cancel(ctx.run_id)
            inner.append(await holder[0].execute_next())

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    holder.append(rl)
    for order_id in (1, 2):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await rl.execute_next()
    assert inner == [None]  # still held while the cancelled handler runs
    assert await status_of(rl, seen[0]) is RunStatus.CANCELLED
    await drain_now(rl)
    assert len(seen) == 2
    assert await status_of(rl, seen[1]) is RunStatus.SUCCEEDED


async def test_C26_a_cancelled_delivery_whose_worker_is_gone_frees_at_lease_expiry(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    seen: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        seen.append(message.payload.order_id)

    rl, orders = await keyed_runtime(make_runtime, SubscriptionMode.ORDERED, handle, clock=clock)
    await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    lost = await claim_and_vanish(rl)
    cancelling = await rl.runs.cancel(lost.id)
    assert cancelling.status is RunStatus.CANCELLATION_REQUESTED
    assert await drain_now(rl) == []
    clock.advance("31s")
    report = await rl.tick()
    assert report.cancellations_finished == 1
    assert await status_of(rl, lost.id) is RunStatus.CANCELLED  # never retried
    await drain_now(rl)
    assert seen == [2]


__all__ = [name for name in dir() if name.startswith("test_")]
