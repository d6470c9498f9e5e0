"""Settles and the claim riding on them: one transaction, even as one pipelined write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from runlane import Context, ErrorCode, Runlane, RunlaneError, RunStatus, postgres_lane, queue, task
from runlane.model.transitions import Succeeded, settle_attempt
from runlane.ports.storage import LeaseRequest
from runlane.storage.postgres import PostgresStorage


@task("ping")
async def ping(payload: Any, ctx: Context) -> None:
    return None


@pytest.fixture
async def rl(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    runtime = Runlane(
        lane=postgres_lane(postgres_dsn),
        queues=[queue("main", default=True)],
        tasks=[ping],
        environment=environment,
    )
    await runtime.migrate()
    async with runtime:
        yield runtime


async def _event_types(rl: Runlane, run_id: str) -> list[str]:
    return [event.type.value for event in await rl.runs.events(run_id)]


async def test_a_failing_claim_rolls_back_the_settles_sent_with_it(rl: Runlane) -> None:
    storage = rl.storage
    assert isinstance(storage, PostgresStorage)
    await rl.trigger_many(ping, [None] * 3)
    now = rl.clock.now()
    request = LeaseRequest("w", now + timedelta(seconds=30))
    policies = rl.registry.policies_for(None)
    held = await storage.claim_due_runs(rl.environment, policies, 2, request, now)
    transitions = [settle_attempt(run, Succeeded(None), ping.retry, now) for run in held]
    # The claim statement fails after the settles were sent in the same pipeline.
    claim_query = storage._q["claim_due_runs"]
    storage._q = {**storage._q, "claim_due_runs": "SELECT 1 / 0 AS id"}
    with pytest.raises(RunlaneError) as caught:
        await storage.apply_transitions_and_claim(
            rl.environment, transitions, now, policies, 5, request
        )
    assert caught.value.code is not ErrorCode.TASK_FAILED
    for run in held:
        stored = await rl.runs.get(run.id)
        assert stored.status is RunStatus.RUNNING and stored.lease == run.lease
        assert await _event_types(rl, run.id) == ["run.created", "run.started"]
    # The connection and the cursors it keeps for the pipeline serve the next round.
    storage._q = {**storage._q, "claim_due_runs": claim_query}
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, transitions, now, policies, 5, request
    )
    assert applied == [True, True] and len(claimed) == 1
    for run in held:
        assert (await rl.runs.get(run.id)).status is RunStatus.SUCCEEDED
