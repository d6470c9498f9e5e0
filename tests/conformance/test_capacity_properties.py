"""Property: whatever happens to runs of a bounded queue, capacity is never exceeded or leaked."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runlane import Context, Lane, ManualClock, RetryPolicy, Runlane, queue, task
from runlane.model.transitions import Failed, Released, Succeeded, settle_attempt
from runlane.ports.storage import LeaseRequest
from runlane.types.runs import LEASED_STATUSES, Run, RunFailure

LIMIT = 2
KEYS = ["a", "b"]
BOUNDED = queue("bounded", concurrency_limit=LIMIT)


@task(
    "bounded.step",
    queue=BOUNDED,
    retry=RetryPolicy(max_attempts=2, initial_delay="0s", max_delay="0s"),
)
async def step(payload: Any, ctx: Context) -> None:
    return None


Operation = tuple[str, int]
operations = st.lists(
    st.tuples(
        # Triggers and claims are weighted up so partitions fill and contend often.
        st.sampled_from(
            ["trigger"] * 4
            + ["claim"] * 3
            + ["succeed", "fail", "release", "cancel", "expire", "tick"]
        ),
        st.integers(min_value=0, max_value=9),
    ),
    min_size=1,
    max_size=40,
)


async def _occupied(rl: Runlane) -> dict[str, int]:
    now = rl.clock.now()
    counts = {key: 0 for key in KEYS}
    runs = (await rl.runs.list(statuses=list(LEASED_STATUSES), limit=1000)).data
    for run in runs:
        if run.lease is not None and run.lease.expires_at > now and run.concurrency_key:
            counts[run.concurrency_key] += 1
    return counts


async def _scenario(lane: Lane, ops: list[Operation]) -> None:
    clock = ManualClock()
    rl = Runlane(
        lane=lane,
        queues=[BOUNDED],
        tasks=[step],
        environment=f"prop-{uuid.uuid4().hex[:10]}",
        clock=clock,
    )
    await rl.migrate()
    async with rl:
        held: list[Run] = []
        policies = rl.registry.policies_for([BOUNDED])
        for name, n in ops:
            now = clock.now()
            if name == "trigger":
                await rl.trigger(step, None, concurrency_key=KEYS[n % len(KEYS)])
            elif name == "claim":
                lease = LeaseRequest("w", now + timedelta(seconds=30))
                held += await rl.storage.claim_due_runs(
                    rl.environment, policies, 1 + n % 4, lease, now
                )
            elif name in ("succeed", "fail", "release") and held:
                run = held.pop(n % len(held))
                fresh = await rl.storage.get_run(rl.environment, run.id)
                assert fresh is not None
                if fresh.lease is None or run.lease is None or fresh.lease.token != run.lease.token:
                    continue
                outcome: Any = {
                    "succeed": Succeeded(None),
                    "fail": Failed(RunFailure("task_failed", "x", retryable=True)),
                    "release": Released(0.0, None),
                }[name]
                transition = settle_attempt(fresh, outcome, step.retry, now)
                await rl.storage.apply_transitions(rl.environment, [transition], now)
            elif name == "cancel":
                runs = (await rl.runs.list(limit=1000)).data
                active = [r for r in runs if r.status.is_active]
                if active:
                    await rl.runs.cancel(active[n % len(active)].id)
            elif name == "expire":
                clock.advance("31s")
            elif name == "tick":
                await rl.tick()
            occupied = await _occupied(rl)
            assert all(count <= LIMIT for count in occupied.values()), (name, occupied)
        # Let every lease lapse, recover, and finish all work: nothing may stay occupied.
        clock.advance("31s")
        await rl.tick()
        for _ in range(200):
            claimed = await rl.execute_next()
            if claimed is None:
                clock.advance("1s")
                await rl.tick()
                if await rl.execute_next() is None:
                    break
        runs = (await rl.runs.list(limit=1000)).data
        assert all(r.status.is_terminal for r in runs), [r.status for r in runs]
        stats = [s for s in await rl.queue_stats() if s.queue == "bounded"]
        assert all(s.occupied == 0 for s in stats)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=operations)
@example(ops=[("trigger", 0)] * 3 + [("claim", 3), ("claim", 3)])
@example(ops=[("trigger", 0)] * 3 + [("claim", 0), ("expire", 0), ("claim", 3), ("tick", 0)])
def test_bounded_capacity_holds_under_any_sequence_of_events(
    lane_factory: Callable[[], Lane], ops: list[Operation]
) -> None:
    asyncio.run(_scenario(lane_factory(), ops))
