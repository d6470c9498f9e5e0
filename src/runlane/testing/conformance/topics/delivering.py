"""Fan-out, filters, and how an attempt's settle, retry, release and lease reach storage
(C01-C09, C21-C23).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runlane import DeliveryContext, ManualClock, Message, Outcome, Runlane, RunStatus
from runlane.testing.conformance.storage.support import Factory
from runlane.testing.conformance.topics.support import (
    ONE_ATTEMPT,
    Handler,
    claim_and_vanish,
    drain_now,
    orders_topic,
    runtime_for,
    status_of,
    subscribe,
)
from runlane.topics.outcomes import Complete
from runlane.topics.states import delivery_state, settle_delivery


async def test_C01_a_message_fans_out_to_every_subscription_at_attempt_one(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    seen: list[tuple[str, int, int]] = []

    def recorder(name: str) -> Handler:
        async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
            seen.append((ctx.subscription, message.payload.order_id, ctx.attempt))

        return handle

    subs = [subscribe(f"orders.s{i}", recorder(f"orders.s{i}"), orders) for i in range(3)]
    rl = await runtime_for(make_runtime, subs)
    receipt = await rl.publish(orders, {"order_id": 7})
    assert not receipt.duplicate
    assert receipt.sequence is not None and receipt.sequence > 0
    assert [run.task_id for run in receipt.runs] == ["orders.s0", "orders.s1", "orders.s2"]
    assert {run.status for run in receipt.runs} == {RunStatus.QUEUED}
    assert {run.source.message_id for run in receipt.runs} == {receipt.message_id}
    await drain_now(rl)
    assert sorted(seen) == [("orders.s0", 7, 1), ("orders.s1", 7, 1), ("orders.s2", 7, 1)]


async def test_C02_subscriptions_settle_independently(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def fine(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    async def broken(message: Message[Any], ctx: DeliveryContext) -> None:
        raise ValueError("upstream down")

    rl = await runtime_for(
        make_runtime, [subscribe("a", fine, orders), subscribe("b", broken, orders)]
    )
    receipt = await rl.publish(orders, {"order_id": 1})
    await drain_now(rl)
    first, second = receipt.runs
    assert await status_of(rl, first.id) is RunStatus.SUCCEEDED
    failing = await rl.runs.get(second.id)
    assert failing.status is RunStatus.RETRYING
    assert failing.failure is not None and failing.failure.meta["exception_type"] == "ValueError"


async def test_C03_attribute_filters_select_the_deliveries(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    paid = subscribe("paid-only", noop, orders, filter={"event": ["paid", "refunded"]})
    everything = subscribe("everything", noop, orders)
    rl = await runtime_for(make_runtime, [paid, everything])
    created = await rl.publish(orders, {"order_id": 1}, attributes={"event": "created"})
    refunded = await rl.publish(orders, {"order_id": 2}, attributes={"event": "refunded"})
    bare = await rl.publish(orders, {"order_id": 3})
    assert [r.task_id for r in created.runs] == ["everything"]
    assert [r.task_id for r in refunded.runs] == ["paid-only", "everything"]
    assert [r.task_id for r in bare.runs] == ["everything"]


async def test_filters_compare_values_exactly_and_case_sensitively(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(
        make_runtime, [subscribe("paid", noop, orders, filter={"event": ["paid"]})]
    )
    for value in ("Paid", "PAID", " paid", "paid ", "paíd"):
        receipt = await rl.publish(orders, {"order_id": 1}, attributes={"event": value})
        assert receipt.runs == [], value
    assert len((await rl.publish(orders, {"order_id": 1}, attributes={"event": "paid"})).runs) == 1


async def test_C04_a_completed_delivery_is_not_redelivered(make_runtime: Factory) -> None:
    orders = orders_topic()
    calls: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        calls.append(ctx.attempt)
        return Outcome.complete()

    clock = ManualClock()
    rl = await runtime_for(make_runtime, [subscribe("once", handle, orders)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    await drain_now(rl)
    clock.advance("2h")
    await rl.tick()
    assert await drain_now(rl) == []
    assert calls == [1]
    done = await rl.runs.get(receipt.runs[0].id)
    assert done.status is RunStatus.SUCCEEDED and done.result is None


async def test_C05_a_retry_hides_the_delivery_for_its_delay(make_runtime: Factory) -> None:
    orders = orders_topic()
    attempts: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        attempts.append(ctx.attempt)
        return Outcome.retry("busy", delay="30s") if ctx.attempt == 1 else None

    clock = ManualClock()
    rl = await runtime_for(make_runtime, [subscribe("later", handle, orders)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    (first,) = await drain_now(rl)
    assert first.status is RunStatus.RETRYING
    assert first.run_at == clock.now() + timedelta(seconds=30)
    clock.advance("29s")
    assert await drain_now(rl) == []
    clock.advance("1s")
    (second,) = await drain_now(rl)
    assert second.status is RunStatus.SUCCEEDED and attempts == [1, 2]
    events = [e.type.value for e in await rl.runs.events(receipt.runs[0].id)]
    assert "run.retry_scheduled" in events


async def test_C06_an_expired_lease_redelivers_and_counts_the_attempt(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    attempts: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        attempts.append(ctx.attempt)

    clock = ManualClock()
    rl = await runtime_for(make_runtime, [subscribe("s", handle, orders)], clock=clock)
    await rl.publish(orders, {"order_id": 1})
    lost = await claim_and_vanish(rl)
    clock.advance("31s")
    report = await rl.tick()
    assert report.leases_recovered == 1
    recovered = await rl.runs.get(lost.id)
    assert recovered.status is RunStatus.RETRYING
    assert recovered.failure is not None and recovered.failure.code == "lease_expired"
    clock.advance("1s")
    (again,) = await drain_now(rl)
    assert again.status is RunStatus.SUCCEEDED and attempts == [2]


async def test_C07_a_stale_lease_token_is_fenced(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    clock = ManualClock()
    sub = subscribe("s", handle, orders)
    rl = await runtime_for(make_runtime, [sub], clock=clock)
    await rl.publish(orders, {"order_id": 1})
    stale = await claim_and_vanish(rl, "worker-a")
    clock.advance("31s")
    await rl.tick()
    clock.advance("1s")
    fresh = await claim_and_vanish(rl, "worker-b")
    assert fresh.id == stale.id and fresh.attempt == 2
    # The settle worker-a would write had its handler returned: fenced by the new lease.
    late = settle_delivery(delivery_state(stale), Complete(), clock.now())
    assert await rl.storage.apply_transitions(rl.environment, [late], clock.now()) == [False]
    current = await rl.runs.get(stale.id)
    assert current.status is RunStatus.RUNNING and current.lease is not None
    assert current.lease.owner == "worker-b"


async def test_C08_a_heartbeat_keeps_the_lease(make_runtime: Factory) -> None:
    orders = orders_topic()
    clock = ManualClock()
    holder: list[Runlane] = []
    recovered: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        for _ in range(3):
            clock.advance("20s")  # each step inside the lease, 60 s in all
            await ctx.heartbeat()
        recovered.append((await holder[0].tick()).leases_recovered)

    rl = await runtime_for(make_runtime, [subscribe("s", handle, orders)], clock=clock)
    holder.append(rl)
    await rl.publish(orders, {"order_id": 1})
    (done,) = await drain_now(rl)
    assert done.status is RunStatus.SUCCEEDED and done.attempt == 1
    assert recovered == [0]


async def test_C09_extending_a_lost_lease_fails(make_runtime: Factory) -> None:
    orders = orders_topic()
    clock = ManualClock()
    holder: list[Runlane] = []
    reasons: list[Any] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        clock.advance("31s")
        await holder[0].tick()  # recovers the lease this attempt held
        await ctx.heartbeat()
        reasons.append(ctx.signal.reason)

    rl = await runtime_for(make_runtime, [subscribe("s", handle, orders)], clock=clock)
    holder.append(rl)
    receipt = await rl.publish(orders, {"order_id": 1})
    await rl.execute_next()
    assert [reason.value for reason in reasons] == ["lease_lost"]
    # The late settle was fenced: the run stays as recovery left it.
    run = await rl.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.RETRYING and run.failure is not None
    assert run.failure.code == "lease_expired"


async def test_C21_a_released_delivery_is_redelivered_without_spending_budget(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    clock = ManualClock()
    attempts: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Any:
        attempts.append(ctx.attempt)
        return ctx.release("10s", reason="rate limited") if ctx.attempt < 3 else None

    rl = await runtime_for(
        make_runtime, [subscribe("s", handle, orders, retry=ONE_ATTEMPT)], clock=clock
    )
    receipt = await rl.publish(orders, {"order_id": 1})
    for _ in range(3):
        await drain_now(rl)
        clock.advance("10s")
    run = await rl.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.SUCCEEDED and attempts == [1, 2, 3]
    assert run.failure_count == 0


async def test_C22_a_lease_expiring_on_the_last_attempt_dead_letters(
    make_runtime: Factory,
) -> None:
    orders = orders_topic()
    clock = ManualClock()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await runtime_for(
        make_runtime, [subscribe("s", noop, orders, retry=ONE_ATTEMPT)], clock=clock
    )
    await rl.publish(orders, {"order_id": 1})
    lost = await claim_and_vanish(rl)
    clock.advance("31s")
    await rl.tick()
    run = await rl.runs.get(lost.id)
    assert run.status is RunStatus.DEAD_LETTERED and run.dead_letter_reason == "lease_expired"
    events = [e.type.value for e in await rl.runs.events(lost.id)]
    assert events[-2:] == ["run.lease_expired", "run.dead_lettered"]
    (letter,) = (await rl.dead_letters.list()).data
    assert letter.reason == "lease_expired"


async def test_C23_completions_are_counted(make_runtime: Factory) -> None:
    orders = orders_topic()

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        return Outcome.dead_letter("odd") if message.payload.order_id % 2 else None

    rl = await runtime_for(make_runtime, [subscribe("s", handle, orders)])
    for order_id in range(6):
        await rl.publish(orders, {"order_id": order_id})
    await rl.publish(orders, {"order_id": 99}, message_id="waits")
    await drain_now(rl)
    await rl.publish(orders, {"order_id": 100})
    stats = await rl.subscriptions.get("s")
    assert stats.counts[RunStatus.SUCCEEDED] == 3
    assert stats.dead_lettered == 4 and stats.waiting == 1 and stats.running == 0
    assert stats.topic == "orders" and stats.queue == "main" and not stats.approximate
    (listed,) = await rl.subscriptions.list()
    assert listed == stats


__all__ = [name for name in dir() if name.startswith("test_")]
