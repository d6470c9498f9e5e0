"""How an attempt ends in a dead letter, and how timeouts and shutdown end one (C10)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from runlane import (
    DeliveryContext,
    FatalWorkError,
    ManualClock,
    Message,
    Outcome,
    RunStatus,
    subscription,
    topic,
)
from runlane.testing.conformance.storage.support import Factory
from runlane.testing.conformance.topics.support import (
    ONE_ATTEMPT,
    THREE_ATTEMPTS,
    drain_now,
    orders_topic,
    runtime_for,
    subscribe,
)


async def test_C10_a_dead_letter_is_listed_with_its_reason(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("order 9 is malformed")

    rl = await runtime_for(make_runtime, [subscribe("s", refuse, orders)])
    receipt = await rl.publish(orders, {"order_id": 9}, attributes={"event": "paid"})
    (parked,) = await drain_now(rl)
    assert parked.status is RunStatus.DEAD_LETTERED
    page = await rl.dead_letters.list()
    (letter,) = page.data
    assert page.next_cursor is None
    assert letter.id == receipt.runs[0].id and letter.reason == "order 9 is malformed"
    assert letter.subscription == "s" and letter.topic == "orders"
    assert letter.attempt == 1 and letter.replays == 0 and letter.failure is None
    assert letter.message.id == receipt.message_id
    assert letter.message.payload == {"order_id": 9, "note": ""}
    assert dict(letter.message.attributes) == {"event": "paid"}
    assert (await rl.dead_letters.get(letter.id)) == letter
    events = [e.type.value for e in await rl.runs.events(letter.id)]
    assert events[-1] == "run.dead_lettered"


async def test_a_spent_budget_dead_letters_with_max_attempts_exceeded(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()

    async def broken(message: Message[Any], ctx: DeliveryContext) -> None:
        raise RuntimeError("always")

    clock = ManualClock()
    rl = await runtime_for(make_runtime, [subscribe("s", broken, orders)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    for _ in range(3):
        await drain_now(rl)
        clock.advance("1s")
    run = await rl.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.DEAD_LETTERED and run.attempt == 3
    assert run.dead_letter_reason == "max_attempts_exceeded"
    assert run.failure is not None and run.failure.meta["exception_type"] == "RuntimeError"


async def test_fatal_work_error_dead_letters_at_once(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def fatal(message: Message[Any], ctx: DeliveryContext) -> None:
        raise FatalWorkError("customer deleted")

    rl = await runtime_for(make_runtime, [subscribe("s", fatal, orders)])
    await rl.publish(orders, {"order_id": 1})
    (run,) = await drain_now(rl)
    assert run.status is RunStatus.DEAD_LETTERED and run.dead_letter_reason == "customer deleted"
    assert run.failure is not None and not run.failure.retryable


async def test_a_sync_handler_runs_in_the_thread_pool(make_runtime: Factory) -> None:
    orders = orders_topic()
    seen: list[tuple[int, str | None]] = []

    def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        seen.append((message.payload.order_id, message.attributes.get("event")))

    rl = await runtime_for(make_runtime, [subscription("sync", topic=orders, handler=handle)])
    await rl.publish(orders, {"order_id": 5}, attributes={"event": "paid"})
    (run,) = await drain_now(rl)
    assert run.status is RunStatus.SUCCEEDED and seen == [(5, "paid")]


async def test_a_worker_without_the_subscription_dead_letters_after_the_default_budget(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    clock = ManualClock()
    publisher = await runtime_for(make_runtime, [subscribe("s", noop, orders)], clock=clock)
    worker = await make_runtime([], clock=clock)  # registers no subscription
    receipt = await publisher.publish(orders, {"order_id": 1})
    for _ in range(5):
        await drain_now(worker)
        clock.advance("16m")
    run = await publisher.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.DEAD_LETTERED and run.attempt == 5
    assert run.dead_letter_reason == "max_attempts_exceeded"
    assert run.failure is not None and run.failure.code == "task_not_found"


async def test_a_stored_payload_the_worker_schema_refuses_is_dead_lettered(
    make_runtime: Factory,
) -> None:
    loose = topic("orders")  # the publisher's topic has no schema
    strict = orders_topic()  # the worker's checks the payload again

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    publisher = await runtime_for(make_runtime, [subscribe("s", noop, loose)])
    worker = await runtime_for(make_runtime, [subscribe("s", noop, strict)])
    receipt = await publisher.publish(loose, {"order_id": "not a number"})
    (run,) = await drain_now(worker)
    assert run.id == receipt.runs[0].id
    assert run.status is RunStatus.DEAD_LETTERED and run.dead_letter_reason == "payload_invalid"
    assert run.failure is not None and run.failure.code == "payload_invalid"


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_handler_past_its_timeout_is_retried(make_runtime: Factory, kind: str) -> None:
    orders = orders_topic()
    release = threading.Event()

    async def slow_async(message: Message[Any], ctx: DeliveryContext) -> None:
        await asyncio.sleep(30)

    def slow_sync(message: Message[Any], ctx: DeliveryContext) -> None:
        release.wait(5)

    handler: Any = slow_async if kind == "async" else slow_sync
    sub = subscription("slow", topic=orders, handler=handler, timeout="50ms", retry=THREE_ATTEMPTS)
    rl = await runtime_for(make_runtime, [sub])
    await rl.publish(orders, {"order_id": 1})
    try:
        (run,) = await drain_now(rl)
    finally:
        release.set()
    assert run.status is RunStatus.RETRYING
    assert run.failure is not None and run.failure.code == "task_timeout"


async def test_worker_shutdown_releases_a_delivery_whose_handler_gives_up(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    started = asyncio.Event()
    reasons: list[Any] = []

    async def long_handler(message: Message[Any], ctx: DeliveryContext) -> None:
        started.set()
        reasons.append(await ctx.signal.wait())
        raise RuntimeError("interrupted")

    rl = await make_runtime(
        [],
        topics=[orders],
        subscriptions=[subscribe("long", long_handler, orders, retry=ONE_ATTEMPT)],
    )
    receipt = await rl.publish(orders, {"order_id": 1})
    worker = rl.worker(concurrency=1, handle_signals=False)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 5)
    await worker.stop()
    await asyncio.wait_for(running, 5)
    assert [reason.value for reason in reasons] == ["shutdown"]
    # Not its own failure: released, no budget spent (one attempt would dead-letter).
    stored = await rl.runs.get(receipt.runs[0].id)
    assert stored.status is RunStatus.RELEASED and stored.failure_count == 0


__all__ = [name for name in dir() if name.startswith("test_")]
