"""Rate limits per key (SPEC-flow 7.1, ``rate_limit_by="key"``) through the runtime,
timed by a ManualClock: each run's ``rate_key`` is its own partition, a key without a
token never keeps another key's runs from starting (however many such keys wait ahead
of it), runs without a key share the unkeyed partition, a run waiting for its key's
token keeps its attempt count and its place, and on a transport lane its wakeup is
ignored with ``rate_limited`` and comes back at its own key's token."""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    DeliveryContext,
    ErrorCode,
    ManualClock,
    Message,
    RateLimit,
    RetryPolicy,
    RunEventType,
    RunlaneError,
    RunStatus,
    SubscriptionMode,
    queue,
    subscription,
    task,
    topic,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.ports.transport import DeliveryOutcome, IgnoredReason
from runlane.testing.conformance.storage.support import MAIN, Factory, TransportFactory

TENANTS = queue("tenant_sync", rate_limit="2/s", rate_limit_by="key")
BURSTY_TENANTS = queue(
    "tenant_burst", rate_limit=RateLimit(3, per="1s", burst=3), rate_limit_by="key"
)
ONE_SLOT_TENANTS = queue("tenant_slot", rate_limit="10/s", rate_limit_by="key", concurrency_limit=1)
URGENT_TENANTS = queue("tenant_urgent", rate_limit="1/s", rate_limit_by="key", priority_window="1m")


def _starts_recorder(clock: ManualClock) -> tuple[list[tuple[str, datetime]], Any]:
    starts: list[tuple[str, datetime]] = []

    @task("tenant.sync")
    async def sync(payload: Any, ctx: Context) -> None:
        # The key and start time as the handler sees them: what a partner would count.
        starts.append((payload["tenant"], clock.now()))

    return starts, sync


def _tenant(payload: Any) -> str:
    return str(payload["tenant"])


async def test_an_exhausted_key_never_blocks_another_key(make_runtime: Factory) -> None:
    clock = ManualClock()
    starts, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    # Key a's backlog is older than key b's run: a claim must look past it.
    a_runs = [
        await rl.trigger(sync, {"tenant": "a"}, queue=TENANTS, rate_key="a") for _ in range(5)
    ]
    clock.advance("1ms")
    b_run = await rl.trigger(sync, {"tenant": "b"}, queue=TENANTS, rate_key="b")
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    assert sorted(key for key, _ in starts) == ["a", "b"]
    assert (await rl.runs.get(b_run.id)).status is RunStatus.SUCCEEDED
    waiting = [await rl.runs.get(run.id) for run in a_runs[1:]]
    assert {(run.status, run.attempt) for run in waiting} == {(RunStatus.QUEUED, 0)}
    assert {run.rate_key for run in waiting} == {"a"}
    # Key a's next token, half a second later, goes to its oldest waiting run.
    clock.advance("499ms")
    assert await rl.execute_next() is None
    clock.advance("1ms")
    assert await rl.execute_next() is not None
    assert (await rl.runs.get(a_runs[1].id)).status is RunStatus.SUCCEEDED
    assert await rl.execute_next() is None


async def test_many_exhausted_keys_ahead_never_keep_a_free_key_waiting(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    starts, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    keys = [f"t{i}" for i in range(60)]
    # Two runs per key: the first of each starts, then every key is out of tokens.
    for _ in range(2):
        await rl.trigger_many(
            sync, [{"tenant": key} for key in keys], queue=TENANTS, rate_key=_tenant
        )
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    assert len(starts) == 60
    clock.advance("1ms")
    late = await rl.trigger(sync, {"tenant": "late"}, queue=TENANTS, rate_key="late")
    policy = QueuePolicy(TENANTS.name, rate_limit=TENANTS.rate_limit, rate_keyed=True)
    request = LeaseRequest("w", clock.now() + timedelta(seconds=30))
    claimed = await rl.storage.claim_due_runs(rl.environment, [policy], 1, request, clock.now())
    assert [run.id for run in claimed] == [late.id]
    stats = {entry.queue: entry for entry in await rl.queue_stats()}
    assert (stats[TENANTS.name].due, stats[TENANTS.name].rate_limited) == (60, 60)


async def test_a_trigger_many_of_several_batches_keeps_every_runs_key(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    # More than one batch of trigger_many (1,000 runs).
    payloads = [{"tenant": f"t{i % 3}"} for i in range(1_005)]
    runs = await rl.trigger_many(sync, payloads, queue=TENANTS, rate_key=_tenant)
    assert [run.rate_key for run in runs] == [p["tenant"] for p in payloads]
    for run in (runs[0], runs[-1]):  # the first and the last batch, as stored
        assert (await rl.runs.get(run.id)).rate_key == run.rate_key
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    stats = {entry.queue: entry for entry in await rl.queue_stats()}
    assert stats[TENANTS.name].due == len(runs) - 3  # one token per key


async def test_runs_without_a_key_share_the_unkeyed_partition(make_runtime: Factory) -> None:
    clock = ManualClock()
    starts, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    plain = [await rl.trigger(sync, {"tenant": "-"}, queue=TENANTS) for _ in range(2)]
    keyed = await rl.trigger(sync, {"tenant": "k"}, queue=TENANTS, rate_key="k")
    assert {run.rate_key for run in plain} == {""} and keyed.rate_key == "k"
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    assert sorted(key for key, _ in starts) == ["-", "k"]
    assert (await rl.runs.get(plain[1].id)).status is RunStatus.QUEUED


async def test_a_rate_key_on_a_queue_not_limited_per_key_is_refused_and_writes_nothing(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    whole = queue("whole", rate_limit="5/s")
    rl = await make_runtime([sync], queues=[MAIN, whole, TENANTS], clock=clock)
    for target in (MAIN, whole):
        with pytest.raises(RunlaneError) as refused:
            await rl.trigger(sync, {"tenant": "a"}, queue=target, rate_key="a")
        assert refused.value.code is ErrorCode.CONFIGURATION_INVALID
        with pytest.raises(RunlaneError):
            await rl.trigger_many(sync, [{"tenant": "a"}], queue=target, rate_key=_tenant)
    for bad in ("", "a:b", 7):
        with pytest.raises(RunlaneError) as refused:
            await rl.trigger(sync, {"tenant": "a"}, queue=TENANTS, rate_key=bad)  # type: ignore[arg-type]
        assert refused.value.code is ErrorCode.CONFIGURATION_INVALID
    with pytest.raises(RunlaneError):
        await rl.trigger_many(
            sync, [{"tenant": "a"}, {"tenant": "b:c"}], queue=TENANTS, rate_key=_tenant
        )
    assert (await rl.runs.list()).data == []


async def test_rate_limit_by_needs_key_and_a_rate_limit() -> None:
    for bad in ({"rate_limit_by": "tenant", "rate_limit": "1/s"}, {"rate_limit_by": "key"}):
        with pytest.raises(RunlaneError) as refused:
            queue("q", **bad)  # type: ignore[arg-type]
        assert refused.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_each_key_keeps_count_plus_burst_minus_one_per_window_and_its_full_rate(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    starts, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, BURSTY_TENANTS], clock=clock)
    keys = ["a", "b", "c"]
    payloads = [{"tenant": key} for key in keys for _ in range(20)]
    await rl.trigger_many(sync, payloads, queue=BURSTY_TENANTS, rate_key=_tenant)
    for _ in range(200):
        while await rl.execute_next(queues=[BURSTY_TENANTS]) is not None:
            pass
        clock.advance("50ms")
    limit = BURSTY_TENANTS.rate_limit
    assert limit is not None
    by_key: dict[str, list[datetime]] = defaultdict(list)
    for key, at in starts:
        by_key[key].append(at)
    period = timedelta(seconds=limit.per)
    for times in by_key.values():
        for index, start in enumerate(times):
            in_window = [t for t in times[index:] if t - start < period]
            assert len(in_window) <= limit.count + limit.burst - 1
        # Liveness: every key's backlog goes at its own full rate, side by side.
        assert len(times) == 20
        assert times[-1] - times[0] <= timedelta(seconds=(20 - 3) / 3 + 0.05)


async def test_a_keys_token_goes_to_its_first_run_in_claim_order_and_never_early(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, URGENT_TENANTS], clock=clock)
    older = await rl.trigger(sync, {"tenant": "a"}, queue=URGENT_TENANTS, rate_key="a")
    clock.advance("10s")
    # Priority 10 places a run a whole window (1 minute) ahead of its due time.
    urgent = await rl.trigger(
        sync, {"tenant": "a"}, queue=URGENT_TENANTS, rate_key="a", priority=10
    )
    later = await rl.trigger(
        sync,
        {"tenant": "a"},
        queue=URGENT_TENANTS,
        rate_key="a",
        priority=10,
        run_at=clock.now() + timedelta(seconds=5),
    )
    first = await rl.execute_next(queues=[URGENT_TENANTS])
    assert first is not None and first.id == urgent.id
    clock.advance("1s")
    # The later run goes first in claim order, but it is not due: the older one starts.
    second = await rl.execute_next(queues=[URGENT_TENANTS])
    assert second is not None and second.id == older.id
    clock.advance("1s")
    assert await rl.execute_next(queues=[URGENT_TENANTS]) is None
    clock.advance("3s")
    third = await rl.execute_next(queues=[URGENT_TENANTS])
    assert third is not None and third.id == later.id


async def test_a_run_claimed_by_its_key_lists_one_start_per_attempt(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    queued = await rl.trigger(sync, {"tenant": "a"}, queue=TENANTS, rate_key="a")
    assert await rl.execute_next(queues=[TENANTS]) is not None
    again = await rl.runs.rerun(queued.id)
    clock.advance("500ms")
    # Each is leased by id (claim_run) by the claim of its key's partition.
    assert await rl.execute_next(queues=[TENANTS]) is not None
    for run in (queued, again):
        types = [event.type for event in await rl.runs.events(run.id)]
        assert types == [RunEventType.CREATED, RunEventType.STARTED, RunEventType.SUCCEEDED]


async def test_a_key_starts_only_with_both_a_slot_and_a_token(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, ONE_SLOT_TENANTS], clock=clock)
    await rl.trigger_many(
        sync, [{"tenant": k} for k in "aab"], queue=ONE_SLOT_TENANTS, rate_key=_tenant
    )
    policy = QueuePolicy(
        ONE_SLOT_TENANTS.name, 1, rate_limit=ONE_SLOT_TENANTS.rate_limit, rate_keyed=True
    )
    request = LeaseRequest("w", clock.now() + timedelta(seconds=30))
    claimed = await rl.storage.claim_due_runs(rl.environment, [policy], 5, request, clock.now())
    assert len(claimed) == 1  # tokens for every key, one slot for the queue
    assert await rl.storage.claim_due_runs(rl.environment, [policy], 5, request, clock.now()) == []


async def test_a_retried_run_waits_for_its_own_keys_token(make_runtime: Factory) -> None:
    clock = ManualClock()
    attempts: list[datetime] = []

    @task(
        "tenant.flaky",
        retry=RetryPolicy(max_attempts=3, initial_delay="100ms", max_delay="100ms", jitter=False),
    )
    async def flaky(payload: Any, ctx: Context) -> None:
        attempts.append(clock.now())
        if ctx.attempt < 3:
            raise RuntimeError("partner said no")

    rl = await make_runtime([flaky], queues=[MAIN, TENANTS], clock=clock)
    run = await rl.trigger(flaky, None, queue=TENANTS, rate_key="a")
    for _ in range(40):
        await rl.execute_next(queues=[TENANTS])
        clock.advance("50ms")
    assert (await rl.runs.get(run.id)).status is RunStatus.SUCCEEDED
    # Every attempt takes a token: a retry due after 100 ms still waits for 500 ms.
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(attempts)]
    assert len(attempts) == 3 and all(gap >= 0.5 for gap in gaps)


async def test_a_rerun_keeps_its_rate_key(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    first = await rl.trigger(sync, {"tenant": "a"}, queue=TENANTS, rate_key="a")
    assert await rl.execute_next() is not None
    again = await rl.runs.rerun(first.id)
    assert again.rate_key == "a"
    assert await rl.execute_next() is None  # key a's token is spent
    clock.advance("500ms")
    assert await rl.execute_next() is not None


async def test_the_queue_list_names_the_keys_waiting_for_a_token(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    await rl.trigger_many(sync, [{"tenant": k} for k in "aabc"], queue=TENANTS, rate_key=_tenant)
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    (info,) = [i for i in await rl.queues.list() if i.name == TENANTS.name]
    assert info.rate_limit_by == "key"
    assert info.limited_keys == (("a", clock.now() + timedelta(milliseconds=500)),)
    assert info.next_token_at == clock.now() + timedelta(milliseconds=500)
    stats = {entry.queue: entry for entry in await rl.queue_stats()}
    assert (stats[TENANTS.name].due, stats[TENANTS.name].rate_limited) == (1, 1)


async def test_a_queue_newly_limited_per_key_starts_its_older_runs(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    before_def = queue(TENANTS.name, rate_limit="2/s")
    before = await make_runtime([sync], queues=[MAIN, before_def], clock=clock)
    runs = await before.trigger_many(sync, [{"tenant": "-"}] * 2, queue=before_def)
    assert await before.execute_next() is not None  # the whole queue's token
    await before.close()
    after = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    # The older runs join the unkeyed partition, which keeps the whole queue's state:
    # no token yet, then the next one.
    assert await after.execute_next() is None
    clock.advance("500ms")
    assert await after.execute_next() is not None
    assert [(await after.runs.get(r.id)).status for r in runs] == [RunStatus.SUCCEEDED] * 2


async def test_a_new_deploy_with_another_rate_follows_it_for_each_key_without_a_burst(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    before = await make_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    runs = await before.trigger_many(sync, [{"tenant": "a"}] * 3, queue=TENANTS, rate_key=_tenant)
    assert await before.execute_next() is not None  # key a's token: next at +500ms
    await before.close()
    faster = queue(TENANTS.name, rate_limit=RateLimit(10, per="1s", burst=5), rate_limit_by="key")
    after = await make_runtime([sync], queues=[MAIN, faster], clock=clock)
    # Another key has a state of its own: it starts at once, while key a waits.
    other = await after.trigger(sync, {"tenant": "b"}, queue=faster, rate_key="b")
    started = await after.execute_next()
    assert started is not None and started.id == other.id
    # Key a's stored state carries no saved-up tokens; the new rate's next one comes
    # at +100ms (not at the old limit's +500ms).
    assert await after.execute_next() is None
    clock.advance("100ms")
    assert await after.execute_next() is not None
    assert await after.execute_next() is None
    clock.advance("100ms")
    assert await after.execute_next() is not None
    assert [(await after.runs.get(r.id)).status for r in runs] == [RunStatus.SUCCEEDED] * 3


async def test_on_a_transport_lane_a_keys_wakeup_without_a_token_comes_back_at_its_token(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, sync = _starts_recorder(clock)
    rl, transport = await make_transport_runtime([sync], queues=[MAIN, TENANTS], clock=clock)
    a1 = await rl.trigger(sync, {"tenant": "a"}, queue=TENANTS, rate_key="a")
    a2 = await rl.trigger(sync, {"tenant": "a"}, queue=TENANTS, rate_key="a")
    b1 = await rl.trigger(sync, {"tenant": "b"}, queue=TENANTS, rate_key="b")
    wakeups = {a.message.run_id: a.message for a in transport.published}
    assert (await rl.execute_delivery(wakeups[a1.id])).outcome is DeliveryOutcome.EXECUTED
    ignored = await rl.execute_delivery(wakeups[a2.id])
    assert ignored.reason is IgnoredReason.RATE_LIMITED
    assert (await rl.runs.get(a2.id)).attempt == 0
    # Key b has its own token.
    assert (await rl.execute_delivery(wakeups[b1.id])).outcome is DeliveryOutcome.EXECUTED
    clock.advance("400ms")
    assert (await rl.tick()).outbox_published == 0
    clock.advance("100ms")
    assert (await rl.tick()).outbox_published == 1
    again = transport.published[-1].message
    assert again.run_id == a2.id
    assert (await rl.execute_delivery(again)).outcome is DeliveryOutcome.EXECUTED


async def test_deliveries_on_a_keyed_queue_are_limited_by_their_message_key(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    seen: list[str] = []
    events = topic("tenant_events")

    async def handle(message: Message[Any], ctx: DeliveryContext) -> None:
        seen.append(message.attributes["tenant"])

    sync = subscription(
        "tenant_sync",
        topic=events,
        handler=handle,
        mode=SubscriptionMode.EXCLUSIVE,
        key="tenant",
        queue=TENANTS,
    )
    rl = await make_runtime(
        [], queues=[MAIN, TENANTS], clock=clock, topics=[events], subscriptions=[sync]
    )
    receipts = [
        await rl.publish(events, {"n": n}, attributes={"tenant": tenant})
        for n, tenant in enumerate("aab")
    ]
    assert [r.runs[0].rate_key for r in receipts] == ["a", "a", "b"]
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    assert sorted(seen) == ["a", "b"]
    assert (await rl.runs.get(receipts[1].runs[0].id)).status is RunStatus.QUEUED
    clock.advance("500ms")
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    assert sorted(seen) == ["a", "a", "b"]


__all__ = [name for name in dir() if name.startswith("test_")]
