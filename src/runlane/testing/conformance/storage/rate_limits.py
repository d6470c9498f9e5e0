"""Rate limits (SPEC-flow 7.1) through the runtime, timed by a ManualClock: tokens
are taken by the claim that starts a run and never given back, a run without a token
stays due with its attempt count, a limited queue never blocks another one, limits
compose with concurrency limits, and on a transport lane a wakeup without a token is
ignored with ``rate_limited`` and comes back at the token's time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RateLimit,
    RunlaneError,
    RunStatus,
    queue,
    task,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.ports.transport import DeliveryOutcome, IgnoredReason
from runlane.testing.conformance.storage.support import MAIN, Factory, TransportFactory

PARTNER = queue("partner_api", rate_limit="2/s")
BURSTY = queue("bursty", rate_limit=RateLimit(3, per="1s", burst=3))
BOTH = queue("both", rate_limit=RateLimit(10, per="1s", burst=10), concurrency_limit=1)


def _starts_recorder(clock: ManualClock) -> tuple[list[datetime], Any]:
    starts: list[datetime] = []

    @task("partner.call")
    async def call(payload: Any, ctx: Context) -> None:
        # The start time as the handler sees it: what a partner's API would count.
        starts.append(clock.now())

    return starts, call


async def test_a_run_without_a_token_stays_due_with_its_attempt_count_until_one_is_free(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    starts, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    first = await rl.trigger(call, None, queue=PARTNER)
    second = await rl.trigger(call, None, queue=PARTNER)
    done = await rl.execute_next()
    assert done is not None and done.id == first.id
    assert await rl.execute_next() is None
    waiting = await rl.runs.get(second.id)
    assert (waiting.status, waiting.attempt) == (RunStatus.QUEUED, 0)
    clock.advance("499ms")
    assert await rl.execute_next() is None
    clock.advance("1ms")
    later = await rl.execute_next()
    assert later is not None and later.id == second.id and later.attempt == 1
    assert [(t - starts[0]).total_seconds() for t in starts] == [0.0, 0.5]


async def test_an_idle_partition_starts_its_burst_at_once_then_one_per_interval(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    starts, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, BURSTY], clock=clock)
    await rl.trigger_many(call, [None] * 6, queue=BURSTY)
    worker = rl.worker(mode="drain", handle_signals=False, maintenance=False)
    await worker.run()
    assert len(starts) == 3
    clock.advance("1s")
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    assert len(starts) == 6  # a full second refills the whole burst


async def test_in_any_window_of_the_period_at_most_count_plus_burst_minus_one_start(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    starts, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, BURSTY], clock=clock)
    await rl.trigger_many(call, [None] * 40, queue=BURSTY)
    # Claim in every 50 ms step for fifteen seconds, as fast as storage lets runs start.
    for _ in range(300):
        while await rl.execute_next(queues=[BURSTY]) is not None:
            pass
        clock.advance("50ms")
    limit = BURSTY.rate_limit
    assert limit is not None
    period = timedelta(seconds=limit.per)
    for index, start in enumerate(starts):
        in_window = [t for t in starts[index:] if t - start < period]
        assert len(in_window) <= limit.count + limit.burst - 1
    # Liveness: a backlog starts at the full rate (40 runs: a burst of 3, then 3 a second).
    assert len(starts) == 40
    assert starts[-1] - starts[0] <= timedelta(seconds=(40 - 3) / 3 + 0.05)


async def test_a_partition_without_tokens_never_blocks_another_queue(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    limited = [await rl.trigger(call, None, queue=PARTNER) for _ in range(3)]
    free = [await rl.trigger(call, None, queue=MAIN) for _ in range(3)]
    await rl.worker(mode="drain", handle_signals=False, maintenance=False).run()
    statuses = {run.id: (await rl.runs.get(run.id)).status for run in limited + free}
    assert [statuses[r.id] for r in free] == [RunStatus.SUCCEEDED] * 3
    assert sorted(statuses[r.id] for r in limited) == sorted(
        [RunStatus.SUCCEEDED, RunStatus.QUEUED, RunStatus.QUEUED]
    )


async def test_a_run_starts_only_with_both_a_slot_and_a_token(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, BOTH], clock=clock)
    await rl.trigger_many(call, [None] * 3, queue=BOTH)
    lease = rl.storage
    policy = QueuePolicy("both", 1, rate_limit=BOTH.rate_limit)
    request = LeaseRequest("w", clock.now() + timedelta(seconds=30))
    claimed = await lease.claim_due_runs(rl.environment, [policy], 5, request, clock.now())
    assert len(claimed) == 1  # ten tokens, one slot
    assert await lease.claim_due_runs(rl.environment, [policy], 5, request, clock.now()) == []
    (state,) = await lease.list_rate_limit_states(rl.environment)
    assert state.queue == "both"


async def test_queue_stats_count_rate_limited_runs_and_the_queue_list_shows_the_next_token(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    await rl.trigger_many(call, [None] * 3, queue=PARTNER)
    assert await rl.execute_next() is not None
    stats = {entry.queue: entry for entry in await rl.queue_stats()}
    assert (stats["partner_api"].due, stats["partner_api"].rate_limited) == (2, 2)
    assert stats["main"].rate_limited == 0
    listed = {info.name: info for info in await rl.queues.list()}
    assert listed["partner_api"].rate_limit == RateLimit(2, per="1s")
    assert listed["partner_api"].next_token_at == clock.now() + timedelta(milliseconds=500)
    assert listed["main"].rate_limit is None and listed["main"].next_token_at is None
    clock.advance("500ms")
    stats = {entry.queue: entry for entry in await rl.queue_stats()}
    assert stats["partner_api"].rate_limited == 1  # one of the two due runs has a token
    assert {i.name: i for i in await rl.queues.list()}["partner_api"].next_token_at is None


async def test_deferred_wakeups_of_a_backlog_come_back_one_token_apart(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    rl, transport = await make_transport_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    runs = await rl.trigger_many(call, [None] * 4, queue=PARTNER)
    wakeups = {a.message.run_id: a.message for a in transport.published}
    results = [await rl.execute_delivery(wakeups[run.id]) for run in runs]
    assert [r.reason for r in results] == [None] + [IgnoredReason.RATE_LIMITED] * 3
    # Each waiting run's wakeup comes back when a token is due for it, oldest first:
    # one every half second, never all at the next token.
    for waiting in runs[1:]:
        clock.advance("500ms")
        assert (await rl.tick()).outbox_published == 1
        message = transport.published[-1].message
        assert message.run_id == waiting.id
        assert (await rl.execute_delivery(message)).outcome is DeliveryOutcome.EXECUTED


async def test_a_new_deploy_with_another_rate_follows_it_without_a_burst_or_lost_runs(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    before = await make_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    runs = await before.trigger_many(call, [None] * 3, queue=PARTNER)
    assert await before.execute_next() is not None  # the old limit's token: next at +500ms
    await before.close()
    faster = queue("partner_api", rate_limit=RateLimit(10, per="1s", burst=5))
    after = await make_runtime([call], queues=[MAIN, faster], clock=clock)
    # The stored state carries no saved-up tokens: the bigger burst does not start at once.
    assert await after.execute_next() is None
    clock.advance("100ms")
    assert await after.execute_next() is not None
    assert await after.execute_next() is None
    clock.advance("100ms")
    assert await after.execute_next() is not None
    assert [(await after.runs.get(r.id)).status for r in runs] == [RunStatus.SUCCEEDED] * 3


async def test_run_now_refuses_a_rate_limited_queue_and_writes_nothing(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    rl = await make_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    with pytest.raises(RunlaneError) as refused:
        await rl.run_now(call, None, queue=PARTNER)
    assert refused.value.code is ErrorCode.CONFIGURATION_INVALID
    assert (await rl.runs.list()).data == []


async def test_on_a_transport_lane_a_wakeup_without_a_token_comes_back_at_the_tokens_time(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, call = _starts_recorder(clock)
    rl, transport = await make_transport_runtime([call], queues=[MAIN, PARTNER], clock=clock)
    first = await rl.trigger(call, None, queue=PARTNER)
    second = await rl.trigger(call, None, queue=PARTNER)
    wakeups = {a.message.run_id: a.message for a in transport.published}
    assert (await rl.execute_delivery(wakeups[first.id])).outcome is DeliveryOutcome.EXECUTED
    ignored = await rl.execute_delivery(wakeups[second.id])
    assert ignored.outcome is DeliveryOutcome.IGNORED
    assert ignored.reason is IgnoredReason.RATE_LIMITED
    assert (await rl.runs.get(second.id)).attempt == 0
    # Nothing is published before the token's time, and the wakeup comes back then.
    clock.advance("400ms")
    assert (await rl.tick()).outbox_published == 0
    clock.advance("100ms")
    assert (await rl.tick()).outbox_published == 1
    again = transport.published[-1].message
    assert again.run_id == second.id
    executed = await rl.execute_delivery(again)
    assert executed.outcome is DeliveryOutcome.EXECUTED


__all__ = [name for name in dir() if name.startswith("test_")]
