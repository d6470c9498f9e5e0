"""Publishing: message ids, concurrent publishes and deduplication keys (C18-C20)."""

from __future__ import annotations

import asyncio
from typing import Any

from runlane import DeliveryContext, ErrorCode, ManualClock, Message, RunlaneError, RunStatus, topic
from runlane.testing.conformance.storage.support import Factory
from runlane.testing.conformance.topics.support import (
    count_runs,
    drain_now,
    orders_topic,
    refused_with,
    runtime_for,
    subscribe,
)


async def test_C18_a_pending_delivery_can_be_dropped(make_runtime: Factory) -> None:
    orders = orders_topic()
    calls: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        calls.append(1)

    rl = await runtime_for(make_runtime, [subscribe("s", handle, orders)])
    receipt = await rl.publish(orders, {"order_id": 1})
    cancelled = await rl.runs.cancel(receipt.runs[0].id, reason="not needed")
    assert cancelled.status is RunStatus.CANCELLED
    assert await drain_now(rl) == [] and calls == []


async def test_C19_a_republished_message_id_with_equal_content_is_a_duplicate(
    make_runtime: Factory,
) -> None:
    orders = topic("plain")

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(make_runtime, [subscribe("s", noop, orders)])
    first = await rl.publish(
        orders, {"a": 1, "b": {"x": 1, "y": 2}}, attributes={"k": "v", "j": "w"}, message_id="m-1"
    )
    again = await rl.publish(
        orders, {"b": {"y": 2, "x": 1}, "a": 1}, attributes={"j": "w", "k": "v"}, message_id="m-1"
    )
    assert again.duplicate and not first.duplicate
    assert again.message_id == "m-1" and again.sequence == first.sequence
    assert [r.id for r in again.runs] == [r.id for r in first.runs]
    assert await count_runs(rl) == 1


async def test_C20_a_reused_message_id_with_other_content_is_refused(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    other = topic("other-topic")

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(
        make_runtime, [subscribe("s", noop, orders), subscribe("t", noop, other)]
    )
    await rl.publish(orders, {"order_id": 1}, attributes={"event": "a"}, message_id="m-1")
    for call in (
        rl.publish(orders, {"order_id": 1}, attributes={"event": "b"}, message_id="m-1"),
        rl.publish(orders, {"order_id": 2}, attributes={"event": "a"}, message_id="m-1"),
        rl.publish(other, {"order_id": 1}, attributes={"event": "a"}, message_id="m-1"),
    ):
        error = await refused_with(call, ErrorCode.MESSAGE_ID_CONFLICT)
        assert error.meta["message_id"] == "m-1"
    assert await count_runs(rl) == 1


async def test_concurrent_publishes_share_writes_and_only_a_conflicting_one_fails(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(make_runtime, [subscribe("s", noop, orders)])
    await rl.publish(orders, {"order_id": 0}, message_id="taken")
    calls = [rl.publish(orders, {"order_id": n}) for n in range(1, 30)]
    calls.insert(10, rl.publish(orders, {"order_id": 99}, message_id="taken"))
    calls.insert(20, rl.publish(orders, {"order_id": 0}, message_id="taken"))
    calls.append(rl.publish(orders, {"order_id": 50}, message_id="twice"))
    calls.append(rl.publish(orders, {"order_id": 50}, message_id="twice"))
    results = await asyncio.gather(*calls, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], RunlaneError)
    assert errors[0].code is ErrorCode.MESSAGE_ID_CONFLICT
    receipts = [r for r in results if not isinstance(r, BaseException)]
    assert sum(r.duplicate for r in receipts) == 2  # "taken" repeated, "twice" twice
    sequences = [r.sequence for r in receipts if not r.duplicate]
    assert len(set(sequences)) == len(sequences) == 30
    assert await count_runs(rl) == 31


async def test_a_deduplication_key_holds_for_its_window_then_frees(make_runtime: Factory) -> None:
    orders = orders_topic()  # a 1 h window
    clock = ManualClock()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(make_runtime, [subscribe("s", noop, orders)], clock=clock)
    first = await rl.publish(orders, {"order_id": 1}, deduplication_key="order-1")
    clock.advance("59m")
    # A duplicate whatever its payload, attributes or message id.
    again = await rl.publish(
        orders,
        {"order_id": 2},
        attributes={"e": "x"},
        message_id="new",
        deduplication_key="order-1",
    )
    assert again.duplicate and again.message_id == first.message_id
    assert [r.id for r in again.runs] == [r.id for r in first.runs]
    assert await count_runs(rl) == 1
    clock.advance("1m")
    fresh = await rl.publish(orders, {"order_id": 3}, deduplication_key="order-1")
    assert not fresh.duplicate and fresh.message_id != first.message_id
    assert await count_runs(rl) == 2


async def test_tick_releases_expired_deduplication_keys(make_runtime: Factory) -> None:
    orders = orders_topic()
    clock = ManualClock()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(make_runtime, [subscribe("s", noop, orders)], clock=clock)
    for key in ("a", "b"):
        await rl.publish(orders, {"order_id": 1}, deduplication_key=key)
    assert (await rl.tick()).deduplication_keys_released == 0
    clock.advance("1h")
    assert (await rl.tick()).deduplication_keys_released == 2
    assert (await rl.tick()).deduplication_keys_released == 0


__all__ = [name for name in dir() if name.startswith("test_")]
