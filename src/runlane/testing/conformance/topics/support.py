"""What the topics suite's modules share: the suite's topic and subscriptions, a runtime
holding them on the store under test, and the steps many cases take.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import (
    DeliveryContext,
    ErrorCode,
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
    topic,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.testing.conformance.storage.support import MAIN, OTHER, Factory

Handler = Callable[[Message[Any], DeliveryContext], Awaitable[Any]]
#: One attempt, no backoff to wait for: failures dead-letter at once.
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
#: Three attempts a second apart.
THREE_ATTEMPTS = RetryPolicy(max_attempts=3, initial_delay="1s", max_delay="1s", jitter=False)


class OrderEvent(BaseModel):
    """The payload schema of the suite's topic."""

    order_id: int
    note: str = ""


def orders_topic() -> TopicDef:
    """The suite's topic: order events, deduplicated for an hour."""
    return topic("orders", schema=OrderEvent, deduplication_window="1h")


def subscribe(
    name: str,
    handler: Handler,
    orders: TopicDef,
    *,
    mode: SubscriptionMode = SubscriptionMode.NONE,
    key: str | None = None,
    retry: RetryPolicy = THREE_ATTEMPTS,
    filter: dict[str, list[str]] | None = None,
) -> SubscriptionDef:
    """A subscription of ``orders`` (three attempts a second apart unless ``retry``)."""
    return subscription(
        name, topic=orders, handler=handler, mode=mode, key=key, retry=retry, filter=filter
    )


async def runtime_for(
    make_runtime: Factory,
    subscriptions: Sequence[SubscriptionDef],
    *,
    clock: ManualClock | None = None,
    **options: Any,
) -> Runlane:
    """A runtime on the store under test holding ``subscriptions`` and their topics."""
    topics = {sub.topic.name: sub.topic for sub in subscriptions}
    return await make_runtime(
        [],
        queues=(MAIN, OTHER),
        clock=clock or ManualClock(),
        topics=list(topics.values()),
        subscriptions=list(subscriptions),
        **options,
    )


async def drain_now(rl: Runlane) -> list[Run]:
    """Execute every delivery that can run now, one after another."""
    done = []
    while (run := await rl.execute_next()) is not None:
        done.append(run)
    return done


async def one_dead_letter(make_runtime: Factory) -> tuple[Runlane, str]:
    """A runtime holding one delivery its subscriber dead-lettered, and that run's id."""
    orders = orders_topic()

    async def refuse(message: Message[Any], ctx: DeliveryContext) -> Outcome:
        return Outcome.dead_letter("refused")

    rl = await runtime_for(make_runtime, [subscribe("s", refuse, orders)])
    receipt = await rl.publish(orders, {"order_id": 1})
    run_id = receipt.runs[0].id
    await drain_now(rl)
    return rl, run_id


async def claim_and_vanish(rl: Runlane, worker: str = "gone-worker") -> Run:
    """Lease one due delivery to a worker that then vanishes (it never settles)."""
    now = rl.clock.now()
    lease = LeaseRequest(worker, now + timedelta(seconds=30))
    (claimed,) = await rl.storage.claim_due_runs(
        rl.environment, [QueuePolicy("main"), QueuePolicy("other")], 1, lease, now
    )
    return claimed


async def status_of(rl: Runlane, run_id: str) -> RunStatus:
    """The run's status as stored now."""
    return (await rl.runs.get(run_id)).status


async def refused_with(call: Awaitable[Any], code: ErrorCode) -> RunlaneError:
    """Await ``call``, which must raise a :class:`RunlaneError` of ``code``; return it."""
    with pytest.raises(RunlaneError) as caught:
        await call
    assert caught.value.code is code, caught.value
    return caught.value


async def count_runs(rl: Runlane) -> int:
    """How many runs the environment holds (the suite's cases stay under a thousand)."""
    return len((await rl.runs.list(limit=1000)).data)


async def keyed_runtime(
    make_runtime: Factory,
    mode: SubscriptionMode,
    handle: Handler,
    *,
    retry: RetryPolicy = THREE_ATTEMPTS,
    clock: ManualClock | None = None,
) -> tuple[Runlane, TopicDef]:
    """A runtime with one ``mode`` subscription keyed by ``customer``, and its topic."""
    orders = orders_topic()
    sub = subscribe("keyed", handle, orders, mode=mode, key="customer", retry=retry)
    return await runtime_for(make_runtime, [sub], clock=clock), orders
