"""The topics conformance suite: publishing, deliveries, modes and dead letters, through
the runtime (``rl.publish``, workers' attempts, ``rl.tick``, ``rl.dead_letters``,
``rl.subscriptions``) on the store under test.

Use it like the storage suite (same fixtures)::

    from runlane.testing.conformance.topics import *  # noqa: F403

Each test of a case ported from MemberJunction's work-queue suite names it
(``C01`` ... ``C26``); the others are this project's own cases.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import (
    DeliveryContext,
    ErrorCode,
    FatalWorkError,
    ManualClock,
    Message,
    Outcome,
    RetryPolicy,
    Run,
    Runlane,
    RunlaneError,
    RunStatus,
    SubscriptionDef,
    SubscriptionMode,
    TopicDef,
    subscription,
    task,
    topic,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.testing.conformance.storage.support import MAIN, OTHER, Factory, make_runtime
from runlane.topics.outcomes import Complete
from runlane.topics.states import delivery_state, settle_delivery

Handler = Callable[[Message[Any], DeliveryContext], Awaitable[Any]]
#: One attempt, no backoff to wait for: failures dead-letter at once.
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
#: Three attempts a second apart.
THREE_ATTEMPTS = RetryPolicy(max_attempts=3, initial_delay="1s", max_delay="1s", jitter=False)


class OrderEvent(BaseModel):
    """The payload schema of the suite's topic."""

    order_id: int
    note: str = ""


def _orders() -> TopicDef:
    return topic("orders", schema=OrderEvent, deduplication_window="1h")


def _sub(
    name: str,
    handler: Handler,
    orders: TopicDef,
    *,
    mode: SubscriptionMode = SubscriptionMode.NONE,
    key: str | None = None,
    retry: RetryPolicy = THREE_ATTEMPTS,
    filter: dict[str, list[str]] | None = None,
) -> SubscriptionDef:
    return subscription(
        name, topic=orders, handler=handler, mode=mode, key=key, retry=retry, filter=filter
    )


async def _runtime(
    make_runtime: Factory,
    subscriptions: Sequence[SubscriptionDef],
    *,
    clock: ManualClock | None = None,
    **options: Any,
) -> Runlane:
    topics = {sub.topic.name: sub.topic for sub in subscriptions}
    return await make_runtime(
        [],
        queues=(MAIN, OTHER),
        clock=clock or ManualClock(),
        topics=list(topics.values()),
        subscriptions=list(subscriptions),
        **options,
    )


async def _drain(rl: Runlane) -> list[Run]:
    """Execute every delivery that can run now, one after another."""
    done = []
    while (run := await rl.execute_next()) is not None:
        done.append(run)
    return done


async def _one_dead_letter(make_runtime: Factory) -> tuple[Runlane, str]:
    """A runtime holding one delivery its subscriber dead-lettered, and that run's id."""
    orders = _orders()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    rl = await _runtime(make_runtime, [_sub("s", refuse, orders)])
    receipt = await rl.publish(orders, {"order_id": 1})
    run_id = receipt.runs[0].id
    await _drain(rl)
    return rl, run_id


async def _claim(rl: Runlane, worker: str = "gone-worker") -> Run:
    """Lease one due delivery to a worker that then vanishes (it never settles)."""
    now = rl.clock.now()
    lease = LeaseRequest(worker, now + timedelta(seconds=30))
    (claimed,) = await rl.storage.claim_due_runs(
        rl.environment, [QueuePolicy("main"), QueuePolicy("other")], 1, lease, now
    )
    return claimed


async def _status(rl: Runlane, run_id: str) -> RunStatus:
    return (await rl.runs.get(run_id)).status


async def _refused(call: Awaitable[Any], code: ErrorCode) -> RunlaneError:
    with pytest.raises(RunlaneError) as caught:
        await call
    assert caught.value.code is code, caught.value
    return caught.value


async def _count_runs(rl: Runlane) -> int:
    return len((await rl.runs.list(limit=1000)).data)


# -- fan-out, filters, settling ------------------------------------------------------------


async def test_C01_a_message_fans_out_to_every_subscription_at_attempt_one(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    seen: list[tuple[str, int, int]] = []

    def recorder(name: str) -> Handler:
        async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
            seen.append((ctx.subscription, message.payload.order_id, ctx.attempt))

        return handle

    subs = [_sub(f"orders.s{i}", recorder(f"orders.s{i}"), orders) for i in range(3)]
    rl = await _runtime(make_runtime, subs)
    receipt = await rl.publish(orders, {"order_id": 7})
    assert not receipt.duplicate
    assert receipt.sequence is not None and receipt.sequence > 0
    assert [run.task_id for run in receipt.runs] == ["orders.s0", "orders.s1", "orders.s2"]
    assert {run.status for run in receipt.runs} == {RunStatus.QUEUED}
    assert {run.source.message_id for run in receipt.runs} == {receipt.message_id}
    await _drain(rl)
    assert sorted(seen) == [("orders.s0", 7, 1), ("orders.s1", 7, 1), ("orders.s2", 7, 1)]


async def test_C02_subscriptions_settle_independently(make_runtime: Factory) -> None:
    orders = _orders()

    async def fine(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    async def broken(message: Message[Any], ctx: DeliveryContext) -> None:
        raise ValueError("upstream down")

    rl = await _runtime(make_runtime, [_sub("a", fine, orders), _sub("b", broken, orders)])
    receipt = await rl.publish(orders, {"order_id": 1})
    await _drain(rl)
    first, second = receipt.runs
    assert await _status(rl, first.id) is RunStatus.SUCCEEDED
    failing = await rl.runs.get(second.id)
    assert failing.status is RunStatus.RETRYING
    assert failing.failure is not None and failing.failure.meta["exception_type"] == "ValueError"


async def test_C03_attribute_filters_select_the_deliveries(make_runtime: Factory) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    paid = _sub("paid-only", noop, orders, filter={"event": ["paid", "refunded"]})
    everything = _sub("everything", noop, orders)
    rl = await _runtime(make_runtime, [paid, everything])
    created = await rl.publish(orders, {"order_id": 1}, attributes={"event": "created"})
    refunded = await rl.publish(orders, {"order_id": 2}, attributes={"event": "refunded"})
    bare = await rl.publish(orders, {"order_id": 3})
    assert [r.task_id for r in created.runs] == ["everything"]
    assert [r.task_id for r in refunded.runs] == ["paid-only", "everything"]
    assert [r.task_id for r in bare.runs] == ["everything"]


async def test_filters_compare_values_exactly_and_case_sensitively(make_runtime: Factory) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("paid", noop, orders, filter={"event": ["paid"]})])
    for value in ("Paid", "PAID", " paid", "paid ", "paíd"):
        receipt = await rl.publish(orders, {"order_id": 1}, attributes={"event": value})
        assert receipt.runs == [], value
    assert len((await rl.publish(orders, {"order_id": 1}, attributes={"event": "paid"})).runs) == 1


async def test_C04_a_completed_delivery_is_not_redelivered(make_runtime: Factory) -> None:
    orders = _orders()
    calls: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        calls.append(ctx.attempt)
        return Outcome.complete()

    clock = ManualClock()
    rl = await _runtime(make_runtime, [_sub("once", handle, orders)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    await _drain(rl)
    clock.advance("2h")
    await rl.tick()
    assert await _drain(rl) == []
    assert calls == [1]
    done = await rl.runs.get(receipt.runs[0].id)
    assert done.status is RunStatus.SUCCEEDED and done.result is None


async def test_C05_a_retry_hides_the_delivery_for_its_delay(make_runtime: Factory) -> None:
    orders = _orders()
    attempts: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        attempts.append(ctx.attempt)
        return Outcome.retry("busy", delay="30s") if ctx.attempt == 1 else None

    clock = ManualClock()
    rl = await _runtime(make_runtime, [_sub("later", handle, orders)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    (first,) = await _drain(rl)
    assert first.status is RunStatus.RETRYING
    assert first.run_at == clock.now() + timedelta(seconds=30)
    clock.advance("29s")
    assert await _drain(rl) == []
    clock.advance("1s")
    (second,) = await _drain(rl)
    assert second.status is RunStatus.SUCCEEDED and attempts == [1, 2]
    events = [e.type.value for e in await rl.runs.events(receipt.runs[0].id)]
    assert "run.retry_scheduled" in events


async def test_C06_an_expired_lease_redelivers_and_counts_the_attempt(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    attempts: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        attempts.append(ctx.attempt)

    clock = ManualClock()
    rl = await _runtime(make_runtime, [_sub("s", handle, orders)], clock=clock)
    await rl.publish(orders, {"order_id": 1})
    lost = await _claim(rl)
    clock.advance("31s")
    report = await rl.tick()
    assert report.leases_recovered == 1
    recovered = await rl.runs.get(lost.id)
    assert recovered.status is RunStatus.RETRYING
    assert recovered.failure is not None and recovered.failure.code == "lease_expired"
    clock.advance("1s")
    (again,) = await _drain(rl)
    assert again.status is RunStatus.SUCCEEDED and attempts == [2]


async def test_C07_a_stale_lease_token_is_fenced(make_runtime: Factory) -> None:
    orders = _orders()

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    clock = ManualClock()
    sub = _sub("s", handle, orders)
    rl = await _runtime(make_runtime, [sub], clock=clock)
    await rl.publish(orders, {"order_id": 1})
    stale = await _claim(rl, "worker-a")
    clock.advance("31s")
    await rl.tick()
    clock.advance("1s")
    fresh = await _claim(rl, "worker-b")
    assert fresh.id == stale.id and fresh.attempt == 2
    # The settle worker-a would write had its handler returned: fenced by the new lease.
    late = settle_delivery(delivery_state(stale), Complete(), clock.now())
    assert await rl.storage.apply_transitions(rl.environment, [late], clock.now()) == [False]
    current = await rl.runs.get(stale.id)
    assert current.status is RunStatus.RUNNING and current.lease is not None
    assert current.lease.owner == "worker-b"


async def test_C08_a_heartbeat_keeps_the_lease(make_runtime: Factory) -> None:
    orders = _orders()
    clock = ManualClock()
    holder: list[Runlane] = []
    recovered: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        for _ in range(3):
            clock.advance("20s")  # each step inside the lease, 60 s in all
            await ctx.heartbeat()
        recovered.append((await holder[0].tick()).leases_recovered)

    rl = await _runtime(make_runtime, [_sub("s", handle, orders)], clock=clock)
    holder.append(rl)
    await rl.publish(orders, {"order_id": 1})
    (done,) = await _drain(rl)
    assert done.status is RunStatus.SUCCEEDED and done.attempt == 1
    assert recovered == [0]


async def test_C09_extending_a_lost_lease_fails(make_runtime: Factory) -> None:
    orders = _orders()
    clock = ManualClock()
    holder: list[Runlane] = []
    reasons: list[Any] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        clock.advance("31s")
        await holder[0].tick()  # recovers the lease this attempt held
        await ctx.heartbeat()
        reasons.append(ctx.signal.reason)

    rl = await _runtime(make_runtime, [_sub("s", handle, orders)], clock=clock)
    holder.append(rl)
    receipt = await rl.publish(orders, {"order_id": 1})
    await rl.execute_next()
    assert [reason.value for reason in reasons] == ["lease_lost"]
    # The late settle was fenced: the run stays as recovery left it.
    run = await rl.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.RETRYING and run.failure is not None
    assert run.failure.code == "lease_expired"


async def test_C10_a_dead_letter_is_listed_with_its_reason(make_runtime: Factory) -> None:
    orders = _orders()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("order 9 is malformed")

    rl = await _runtime(make_runtime, [_sub("s", refuse, orders)])
    receipt = await rl.publish(orders, {"order_id": 9}, attributes={"event": "paid"})
    (parked,) = await _drain(rl)
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
    orders = _orders()

    async def broken(message: Message[Any], ctx: DeliveryContext) -> None:
        raise RuntimeError("always")

    clock = ManualClock()
    rl = await _runtime(make_runtime, [_sub("s", broken, orders)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    for _ in range(3):
        await _drain(rl)
        clock.advance("1s")
    run = await rl.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.DEAD_LETTERED and run.attempt == 3
    assert run.dead_letter_reason == "max_attempts_exceeded"
    assert run.failure is not None and run.failure.meta["exception_type"] == "RuntimeError"


async def test_fatal_work_error_dead_letters_at_once(make_runtime: Factory) -> None:
    orders = _orders()

    async def fatal(message: Message[Any], ctx: DeliveryContext) -> None:
        raise FatalWorkError("customer deleted")

    rl = await _runtime(make_runtime, [_sub("s", fatal, orders)])
    await rl.publish(orders, {"order_id": 1})
    (run,) = await _drain(rl)
    assert run.status is RunStatus.DEAD_LETTERED and run.dead_letter_reason == "customer deleted"
    assert run.failure is not None and not run.failure.retryable


async def test_a_sync_handler_runs_in_the_thread_pool(make_runtime: Factory) -> None:
    orders = _orders()
    seen: list[tuple[int, str | None]] = []

    def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        seen.append((message.payload.order_id, message.attributes.get("event")))

    rl = await _runtime(make_runtime, [subscription("sync", topic=orders, handler=handle)])
    await rl.publish(orders, {"order_id": 5}, attributes={"event": "paid"})
    (run,) = await _drain(rl)
    assert run.status is RunStatus.SUCCEEDED and seen == [(5, "paid")]


async def test_a_worker_without_the_subscription_dead_letters_after_the_default_budget(
    make_runtime: Factory,
) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    clock = ManualClock()
    publisher = await _runtime(make_runtime, [_sub("s", noop, orders)], clock=clock)
    worker = await make_runtime([], clock=clock)  # registers no subscription
    receipt = await publisher.publish(orders, {"order_id": 1})
    for _ in range(5):
        await _drain(worker)
        clock.advance("16m")
    run = await publisher.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.DEAD_LETTERED and run.attempt == 5
    assert run.dead_letter_reason == "max_attempts_exceeded"
    assert run.failure is not None and run.failure.code == "task_not_found"


async def test_a_stored_payload_the_worker_schema_refuses_is_dead_lettered(
    make_runtime: Factory,
) -> None:
    loose = topic("orders")  # the publisher's topic has no schema
    strict = _orders()  # the worker's checks the payload again

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    publisher = await _runtime(make_runtime, [_sub("s", noop, loose)])
    worker = await _runtime(make_runtime, [_sub("s", noop, strict)])
    receipt = await publisher.publish(loose, {"order_id": "not a number"})
    (run,) = await _drain(worker)
    assert run.id == receipt.runs[0].id
    assert run.status is RunStatus.DEAD_LETTERED and run.dead_letter_reason == "payload_invalid"
    assert run.failure is not None and run.failure.code == "payload_invalid"


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_handler_past_its_timeout_is_retried(make_runtime: Factory, kind: str) -> None:
    orders = _orders()
    release = threading.Event()

    async def slow_async(message: Message[Any], ctx: DeliveryContext) -> None:
        await asyncio.sleep(30)

    def slow_sync(message: Message[Any], ctx: DeliveryContext) -> None:
        release.wait(5)

    handler: Any = slow_async if kind == "async" else slow_sync
    sub = subscription("slow", topic=orders, handler=handler, timeout="50ms", retry=THREE_ATTEMPTS)
    rl = await _runtime(make_runtime, [sub])
    await rl.publish(orders, {"order_id": 1})
    try:
        (run,) = await _drain(rl)
    finally:
        release.set()
    assert run.status is RunStatus.RETRYING
    assert run.failure is not None and run.failure.code == "task_timeout"


async def test_worker_shutdown_releases_a_delivery_whose_handler_gives_up(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    started = asyncio.Event()
    reasons: list[Any] = []

    async def long_handler(message: Message[Any], ctx: DeliveryContext) -> None:
        started.set()
        reasons.append(await ctx.signal.wait())
        raise RuntimeError("interrupted")

    rl = await make_runtime(
        [], topics=[orders], subscriptions=[_sub("long", long_handler, orders, retry=ONE_ATTEMPT)]
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


# -- modes ---------------------------------------------------------------------------------


async def _keyed(
    make_runtime: Factory,
    mode: SubscriptionMode,
    handle: Handler,
    *,
    retry: RetryPolicy = THREE_ATTEMPTS,
    clock: ManualClock | None = None,
) -> tuple[Runlane, TopicDef]:
    orders = _orders()
    sub = _sub("keyed", handle, orders, mode=mode, key="customer", retry=retry)
    return await _runtime(make_runtime, [sub], clock=clock), orders


async def test_C11_exclusive_runs_one_delivery_per_key_at_a_time(make_runtime: Factory) -> None:
    inner: list[Run | None] = []
    holder: list[Runlane] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        if not inner:
            inner.append(await holder[0].execute_next())

    rl, orders = await _keyed(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    holder.append(rl)
    for order_id in (1, 2):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await rl.execute_next()
    assert inner == [None]  # the key's other delivery waits while one holds it
    assert len(await _drain(rl)) == 1


async def test_C12_exclusive_keys_run_concurrently(make_runtime: Factory) -> None:
    inner: list[Run | None] = []
    holder: list[Runlane] = []

    started: list[str] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        started.append(ctx.key or "")
        if len(started) == 1:  # the first one, whichever key it has, holds it meanwhile
            inner.append(await holder[0].execute_next())

    rl, orders = await _keyed(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
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

    rl, orders = await _keyed(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    first = await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    second = await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    await _drain(rl)
    assert await _status(rl, first.runs[0].id) is RunStatus.DEAD_LETTERED
    assert await _status(rl, second.runs[0].id) is RunStatus.SUCCEEDED


async def test_C14_ordered_runs_only_the_head_in_publish_order(make_runtime: Factory) -> None:
    order: list[int] = []
    inner: list[Run | None] = []
    holder: list[Runlane] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        order.append(message.payload.order_id)
        if len(inner) < 1:
            inner.append(await holder[0].execute_next())

    rl, orders = await _keyed(make_runtime, SubscriptionMode.ORDERED, handle)
    holder.append(rl)
    for order_id in range(1, 6):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await _drain(rl)
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

    rl, orders = await _keyed(make_runtime, SubscriptionMode.ORDERED, handle, clock=clock)
    for order_id in (1, 2):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await _drain(rl)
    assert order == [(1, 1)]  # message 2 waits behind its retrying head
    clock.advance("60s")
    await _drain(rl)
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

    rl, orders = await _keyed(make_runtime, SubscriptionMode.ORDERED, handle)
    head = await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 3}, attributes={"customer": "c2"})
    await _drain(rl)
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
    await _drain(rl)
    # The attempt keeps counting across the replay; the key resumes in order.
    assert seen[-2:] == [(1, 2, True), (2, 1, False)]
    assert (await rl.subscriptions.halted_keys("keyed")).data == []


async def test_C17_ordered_discarding_the_head_frees_its_key(make_runtime: Factory) -> None:
    seen: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        seen.append(message.payload.order_id)
        return Outcome.dead_letter("bad") if message.payload.order_id == 1 else None

    rl, orders = await _keyed(make_runtime, SubscriptionMode.ORDERED, handle)
    head = await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    await _drain(rl)
    assert seen == [1]
    discarded = await rl.dead_letters.discard(head.runs[0].id, reason="obsolete", actor="ops")
    assert discarded is not None and discarded.status is RunStatus.DISCARDED
    await _drain(rl)
    assert seen == [1, 2]
    assert (await rl.dead_letters.list()).data == []


async def test_C18_a_pending_delivery_can_be_dropped(make_runtime: Factory) -> None:
    orders = _orders()
    calls: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        calls.append(1)

    rl = await _runtime(make_runtime, [_sub("s", handle, orders)])
    receipt = await rl.publish(orders, {"order_id": 1})
    cancelled = await rl.runs.cancel(receipt.runs[0].id, reason="not needed")
    assert cancelled.status is RunStatus.CANCELLED
    assert await _drain(rl) == [] and calls == []


async def test_C19_a_republished_message_id_with_equal_content_is_a_duplicate(
    make_runtime: Factory,
) -> None:
    orders = topic("plain")

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders)])
    first = await rl.publish(
        orders, {"a": 1, "b": {"x": 1, "y": 2}}, attributes={"k": "v", "j": "w"}, message_id="m-1"
    )
    again = await rl.publish(
        orders, {"b": {"y": 2, "x": 1}, "a": 1}, attributes={"j": "w", "k": "v"}, message_id="m-1"
    )
    assert again.duplicate and not first.duplicate
    assert again.message_id == "m-1" and again.sequence == first.sequence
    assert [r.id for r in again.runs] == [r.id for r in first.runs]
    assert await _count_runs(rl) == 1


async def test_C20_a_reused_message_id_with_other_content_is_refused(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    other = topic("other-topic")

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders), _sub("t", noop, other)])
    await rl.publish(orders, {"order_id": 1}, attributes={"event": "a"}, message_id="m-1")
    for call in (
        rl.publish(orders, {"order_id": 1}, attributes={"event": "b"}, message_id="m-1"),
        rl.publish(orders, {"order_id": 2}, attributes={"event": "a"}, message_id="m-1"),
        rl.publish(other, {"order_id": 1}, attributes={"event": "a"}, message_id="m-1"),
    ):
        error = await _refused(call, ErrorCode.MESSAGE_ID_CONFLICT)
        assert error.meta["message_id"] == "m-1"
    assert await _count_runs(rl) == 1


async def test_C21_a_released_delivery_is_redelivered_without_spending_budget(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    clock = ManualClock()
    attempts: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Any:
        attempts.append(ctx.attempt)
        return ctx.release("10s", reason="rate limited") if ctx.attempt < 3 else None

    rl = await _runtime(make_runtime, [_sub("s", handle, orders, retry=ONE_ATTEMPT)], clock=clock)
    receipt = await rl.publish(orders, {"order_id": 1})
    for _ in range(3):
        await _drain(rl)
        clock.advance("10s")
    run = await rl.runs.get(receipt.runs[0].id)
    assert run.status is RunStatus.SUCCEEDED and attempts == [1, 2, 3]
    assert run.failure_count == 0


async def test_C22_a_lease_expiring_on_the_last_attempt_dead_letters(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    clock = ManualClock()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders, retry=ONE_ATTEMPT)], clock=clock)
    await rl.publish(orders, {"order_id": 1})
    lost = await _claim(rl)
    clock.advance("31s")
    await rl.tick()
    run = await rl.runs.get(lost.id)
    assert run.status is RunStatus.DEAD_LETTERED and run.dead_letter_reason == "lease_expired"
    events = [e.type.value for e in await rl.runs.events(lost.id)]
    assert events[-2:] == ["run.lease_expired", "run.dead_lettered"]
    (letter,) = (await rl.dead_letters.list()).data
    assert letter.reason == "lease_expired"


async def test_C23_completions_are_counted(make_runtime: Factory) -> None:
    orders = _orders()

    async def handle(message: Message[Any], ctx: DeliveryContext) -> Outcome | None:
        return Outcome.dead_letter("odd") if message.payload.order_id % 2 else None

    rl = await _runtime(make_runtime, [_sub("s", handle, orders)])
    for order_id in range(6):
        await rl.publish(orders, {"order_id": order_id})
    await rl.publish(orders, {"order_id": 99}, message_id="waits")
    await _drain(rl)
    await rl.publish(orders, {"order_id": 100})
    stats = await rl.subscriptions.get("s")
    assert stats.counts[RunStatus.SUCCEEDED] == 3
    assert stats.dead_lettered == 4 and stats.waiting == 1 and stats.running == 0
    assert stats.topic == "orders" and stats.queue == "main" and not stats.approximate
    (listed,) = await rl.subscriptions.list()
    assert listed == stats


async def test_C24_cancelling_in_flight_fences_the_settle_and_ends_cancelled(
    make_runtime: Factory,
) -> None:
    orders = _orders()
    holder: list[Runlane] = []
    statuses: list[RunStatus] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        statuses.append((await holder[0].runs.cancel(ctx.run_id, reason="stop")).status)
        raise RuntimeError("would have retried")

    rl = await _runtime(make_runtime, [_sub("s", handle, orders)])
    holder.append(rl)
    await rl.publish(orders, {"order_id": 1})
    (run,) = await _drain(rl)
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

    rl, orders = await _keyed(make_runtime, SubscriptionMode.EXCLUSIVE, handle)
    holder.append(rl)
    for order_id in (1, 2):
        await rl.publish(orders, {"order_id": order_id}, attributes={"customer": "c1"})
    await rl.execute_next()
    assert inner == [None]  # still held while the cancelled handler runs
    assert await _status(rl, seen[0]) is RunStatus.CANCELLED
    await _drain(rl)
    assert len(seen) == 2
    assert await _status(rl, seen[1]) is RunStatus.SUCCEEDED


async def test_C26_a_cancelled_delivery_whose_worker_is_gone_frees_at_lease_expiry(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    seen: list[int] = []

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        seen.append(message.payload.order_id)

    rl, orders = await _keyed(make_runtime, SubscriptionMode.ORDERED, handle, clock=clock)
    await rl.publish(orders, {"order_id": 1}, attributes={"customer": "c1"})
    await rl.publish(orders, {"order_id": 2}, attributes={"customer": "c1"})
    lost = await _claim(rl)
    cancelling = await rl.runs.cancel(lost.id)
    assert cancelling.status is RunStatus.CANCELLATION_REQUESTED
    assert await _drain(rl) == []
    clock.advance("31s")
    report = await rl.tick()
    assert report.cancellations_finished == 1
    assert await _status(rl, lost.id) is RunStatus.CANCELLED  # never retried
    await _drain(rl)
    assert seen == [2]


async def test_concurrent_publishes_share_writes_and_only_a_conflicting_one_fails(
    make_runtime: Factory,
) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders)])
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
    assert await _count_runs(rl) == 31


# -- deduplication -------------------------------------------------------------------------


async def test_a_deduplication_key_holds_for_its_window_then_frees(make_runtime: Factory) -> None:
    orders = _orders()  # a 1 h window
    clock = ManualClock()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders)], clock=clock)
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
    assert await _count_runs(rl) == 1
    clock.advance("1m")
    fresh = await rl.publish(orders, {"order_id": 3}, deduplication_key="order-1")
    assert not fresh.duplicate and fresh.message_id != first.message_id
    assert await _count_runs(rl) == 2


async def test_tick_releases_expired_deduplication_keys(make_runtime: Factory) -> None:
    orders = _orders()
    clock = ManualClock()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders)], clock=clock)
    for key in ("a", "b"):
        await rl.publish(orders, {"order_id": 1}, deduplication_key=key)
    assert (await rl.tick()).deduplication_keys_released == 0
    clock.advance("1h")
    assert (await rl.tick()).deduplication_keys_released == 2
    assert (await rl.tick()).deduplication_keys_released == 0


# -- operators -----------------------------------------------------------------------------


async def test_replay_and_discard_are_audited_in_the_run_history(make_runtime: Factory) -> None:
    rl, run_id = await _one_dead_letter(make_runtime)
    await rl.dead_letters.replay(run_id, reason="retry after fix", actor="alice")
    await _drain(rl)
    await rl.dead_letters.discard(run_id, reason="gave up", actor="bob")
    events = await rl.runs.events(run_id)
    replayed = [e for e in events if e.type.value == "run.replayed"]
    discarded = [e for e in events if e.type.value == "run.discarded"]
    assert [e.data for e in replayed] == [
        {"reason": "retry after fix", "actor": "alice", "replays": 1}
    ]
    assert [e.data for e in discarded] == [{"reason": "gave up", "actor": "bob"}]
    run = await rl.runs.get(run_id)
    assert run.status is RunStatus.DISCARDED and run.replays == 1 and run.attempt == 2


async def test_replay_and_discard_are_compare_and_set(make_runtime: Factory) -> None:
    rl, run_id = await _one_dead_letter(make_runtime)
    await rl.dead_letters.discard(run_id, reason="first")
    for call in (
        rl.dead_letters.replay(run_id),
        rl.dead_letters.discard(run_id, reason="second"),
    ):
        error = await _refused(call, ErrorCode.INVALID_STATE)
        assert error.meta["status"] == "discarded"
    await _refused(rl.dead_letters.get(run_id), ErrorCode.DEAD_LETTER_NOT_FOUND)


async def test_dead_letters_page_and_filter(make_runtime: Factory) -> None:
    orders = _orders()
    other = topic("other-topic")

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    subs = [
        _sub("a", refuse, orders, mode=SubscriptionMode.EXCLUSIVE, key="customer"),
        _sub("b", refuse, other),
    ]
    clock = ManualClock()
    rl = await _runtime(make_runtime, subs, clock=clock)
    for i in range(5):
        await rl.publish(orders, {"order_id": i}, attributes={"customer": f"c{i % 2}"})
        await rl.publish(other, {"order_id": i})
        await _drain(rl)
        clock.advance("1s")
    ids: list[str] = []
    cursor = None
    while True:
        page = await rl.dead_letters.list(limit=3, cursor=cursor)
        ids += [letter.id for letter in page.data]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(ids) == len(set(ids)) == 10
    by_time = [letter.dead_lettered_at for letter in (await rl.dead_letters.list()).data]
    assert by_time == sorted(by_time)
    assert len((await rl.dead_letters.list(topic=orders)).data) == 5
    assert len((await rl.dead_letters.list(subscription="b")).data) == 5
    assert len((await rl.dead_letters.list(subscription="a", key="c0")).data) == 3
    assert (await rl.dead_letters.list(topic="orders", subscription="b")).data == []


async def test_a_dead_letter_id_names_a_delivery_of_the_given_subscription(
    make_runtime: Factory,
) -> None:
    # 5.8: subscription= must be the delivery's; a task run is never a dead letter.
    orders = _orders()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    @task("conformance.ping", retry=ONE_ATTEMPT)
    async def ping(payload: Any, ctx: Any) -> None:
        raise RuntimeError("a task run that fails is not a dead letter")

    clock = ManualClock()
    rl = await make_runtime(
        [ping],
        queues=(MAIN, OTHER),
        clock=clock,
        topics=[orders],
        subscriptions=[_sub("a", refuse, orders), _sub("b", refuse, orders)],
    )
    receipt = await rl.publish(orders, {"order_id": 1})
    (a_id,) = [run.id for run in receipt.runs if run.task_id == "a"]
    task_run = await rl.trigger(ping, None)
    await _drain(rl)
    letters = rl.dead_letters
    for call in (
        letters.get(a_id, subscription="b"),
        letters.replay(a_id, subscription="b"),
        letters.discard(a_id, reason="x", subscription="b"),
        letters.get(task_run.id),
        letters.replay(task_run.id),
        letters.discard(task_run.id, reason="x"),
    ):
        await _refused(call, ErrorCode.DEAD_LETTER_NOT_FOUND)
    assert (await letters.get(a_id, subscription="a")).subscription == "a"
    clock.advance("5s")
    replayed = await letters.replay(a_id, subscription="a", reason=None)
    assert replayed is not None  # a stored dead letter's replay answers its run
    assert replayed.status is RunStatus.QUEUED and replayed.replays == 1
    assert replayed.run_at == clock.now()
    assert (await rl.runs.get(task_run.id)).status is RunStatus.FAILED
    bad_reason: Any = 5
    error = await _refused(letters.replay(a_id, reason=bad_reason), ErrorCode.CONFIGURATION_INVALID)
    assert "optional" in error.message


# -- refusals ------------------------------------------------------------------------------


async def test_bad_publishes_get_their_error_code_and_write_nothing(
    make_runtime: Factory,
) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    def bad_key(message: Message[Any]) -> Any:
        return 42

    keyed = subscription(
        "keyed", topic=orders, handler=noop, mode=SubscriptionMode.EXCLUSIVE, key=bad_key
    )
    rl = await _runtime(make_runtime, [keyed])
    cases: list[tuple[Awaitable[Any], ErrorCode]] = [
        (rl.publish("nope", {"order_id": 1}), ErrorCode.TOPIC_NOT_FOUND),
        (rl.publish(topic("orders"), {"order_id": 1}), ErrorCode.CONFIGURATION_INVALID),
        (rl.publish(orders, {"order_id": 1}, message_id=""), ErrorCode.CONFIGURATION_INVALID),
        (
            rl.publish(orders, {"order_id": 1}, deduplication_key="a:b"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            rl.publish(orders, {"order_id": 1}, trace_carrier={"a": 1}),  # type: ignore[dict-item]
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (rl.publish(orders, {"order_id": 1}, attributes={"a b": "x"}), ErrorCode.PAYLOAD_INVALID),
        (
            rl.publish(orders, {"order_id": 1}, attributes={"runlane_x": "x"}),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (rl.publish(orders, {"order_id": 1}, attributes={"a": ""}), ErrorCode.PAYLOAD_INVALID),
        (rl.publish(orders, {"order_id": "x"}), ErrorCode.PAYLOAD_INVALID),
        (rl.publish(orders, {"order_id": 1, "note": "x" * 300_000}), ErrorCode.PAYLOAD_TOO_LARGE),
        (rl.publish(orders, {"order_id": 1}), ErrorCode.PAYLOAD_INVALID),  # the key function
        (rl.publish(orders, {"order_id": 1}, connection=object()), ErrorCode.PAYLOAD_INVALID),
    ]
    for call, code in cases:
        await _refused(call, code)
    assert await _count_runs(rl) == 0


async def test_a_connection_of_the_wrong_kind_is_refused(make_runtime: Factory) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    rl = await _runtime(make_runtime, [_sub("s", noop, orders)])
    await _refused(
        rl.publish(orders, {"order_id": 1}, connection=object()), ErrorCode.CONFIGURATION_INVALID
    )
    assert await _count_runs(rl) == 0


async def test_runs_operations_refuse_what_does_not_apply_to_deliveries(
    make_runtime: Factory,
) -> None:
    orders = _orders()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    sub = _sub("s", refuse, orders)
    rl = await _runtime(make_runtime, [sub])
    receipt = await rl.publish(orders, {"order_id": 1})
    run_id = receipt.runs[0].id
    await _refused(rl.runs.retry(run_id), ErrorCode.INVALID_STATE)
    await _drain(rl)
    for call in (rl.runs.cancel(run_id), rl.runs.retry(run_id), rl.runs.rerun(run_id)):
        error = await _refused(call, ErrorCode.INVALID_STATE)
        assert "rl.dead_letters" in error.message
    producing: list[Awaitable[Any]] = [
        rl.trigger("s"),
        rl.trigger_many("s", [None]),
        rl.run_now("s"),
    ]
    for produce in producing:
        await _refused(produce, ErrorCode.TASK_NOT_FOUND)
    assert await _status(rl, run_id) is RunStatus.DEAD_LETTERED


async def test_operator_calls_check_their_arguments_first(make_runtime: Factory) -> None:
    rl, run_id = await _one_dead_letter(make_runtime)
    letters = rl.dead_letters
    cases: list[tuple[Awaitable[Any], ErrorCode]] = [
        (letters.list(topic="nope"), ErrorCode.TOPIC_NOT_FOUND),
        (letters.list(subscription="nope"), ErrorCode.SUBSCRIPTION_NOT_FOUND),
        (letters.list(limit=0), ErrorCode.CONFIGURATION_INVALID),
        (letters.list(limit=1001), ErrorCode.CONFIGURATION_INVALID),
        (letters.list(cursor="not-a-cursor"), ErrorCode.CONFIGURATION_INVALID),
        (letters.get("unknown"), ErrorCode.DEAD_LETTER_NOT_FOUND),
        (letters.get(run_id, subscription="nope"), ErrorCode.SUBSCRIPTION_NOT_FOUND),
        (letters.replay("unknown"), ErrorCode.DEAD_LETTER_NOT_FOUND),
        (letters.replay(run_id, reason="x" * 1001), ErrorCode.CONFIGURATION_INVALID),
        (letters.replay(run_id, reason="a\x00b"), ErrorCode.CONFIGURATION_INVALID),
        (letters.replay(run_id, actor="not:an:id"), ErrorCode.CONFIGURATION_INVALID),
        (letters.discard(run_id, reason=""), ErrorCode.CONFIGURATION_INVALID),
        (letters.discard("unknown", reason=""), ErrorCode.CONFIGURATION_INVALID),
        (letters.discard("unknown", reason="x"), ErrorCode.DEAD_LETTER_NOT_FOUND),
        (rl.subscriptions.get("nope"), ErrorCode.SUBSCRIPTION_NOT_FOUND),
        (rl.subscriptions.halted_keys("s", limit=0), ErrorCode.CONFIGURATION_INVALID),
    ]
    for call, code in cases:
        await _refused(call, code)
    assert await _status(rl, run_id) is RunStatus.DEAD_LETTERED


async def test_registration_rules_are_checked_when_the_runtime_is_built(
    make_runtime: Factory,
) -> None:
    orders = _orders()

    async def noop(message: Message[Any], ctx: DeliveryContext) -> None:
        return None

    stranger = topic("stranger")
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"topics": [orders, orders]}, ErrorCode.CONFIGURATION_INVALID),
        ({"topics": orders}, ErrorCode.CONFIGURATION_INVALID),
        (
            {"topics": [orders], "subscriptions": [_sub("s", noop, stranger)]},
            ErrorCode.TOPIC_NOT_FOUND,
        ),
        (
            {"topics": [orders], "subscriptions": [_sub("s", noop, orders)] * 2},
            ErrorCode.CONFIGURATION_INVALID,
        ),
    ]
    for options, code in cases:
        with pytest.raises(RunlaneError) as caught:
            await make_runtime([], **options)
        assert caught.value.code is code, (options, caught.value)


__all__ = [name for name in dir() if name.startswith("test_")] + ["make_runtime"]
