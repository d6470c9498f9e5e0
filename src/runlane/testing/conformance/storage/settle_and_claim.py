"""Settling and claiming in one write (an optional storage operation)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane import (
    Runlane,
    RunStatus,
)
from runlane.ports.storage import LeaseRequest, SettlesAndClaims
from runlane.testing.conformance.storage.capacity import SERIAL, _claim
from runlane.testing.conformance.storage.support import (
    MAIN,
    Factory,
    _all_runs,
    _event_types,
    _recorder,
)


def _settles_and_claims(rl: Runlane) -> SettlesAndClaims:
    if not isinstance(rl.storage, SettlesAndClaims):
        pytest.skip("the driver does not settle and claim in one write")
    return rl.storage


async def test_settling_and_claiming_in_one_write_stores_both_with_their_history(
    make_runtime: Factory,
) -> None:
    from runlane.model.transitions import Succeeded, settle_attempt

    _, record = _recorder()
    rl = await make_runtime([record])
    storage = _settles_and_claims(rl)
    await rl.trigger_many(record, [{"order_id": i} for i in range(5)])
    held = await _claim(rl, [MAIN], limit=2)
    now = rl.clock.now()
    transitions = [
        settle_attempt(run, Succeeded({"ok": run.id}), record.retry, now) for run in held
    ]
    request = LeaseRequest("claimer", now + timedelta(seconds=30))
    policies = rl.registry.policies_for([MAIN])
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, transitions, now, policies, 2, request
    )
    assert applied == [True, True]
    assert len(claimed) == 2 and not {r.id for r in claimed} & {r.id for r in held}
    for run in held:
        stored = await rl.runs.get(run.id)
        assert stored.status is RunStatus.SUCCEEDED and stored.result == {"ok": run.id}
        assert stored.lease is None
        assert await _event_types(rl, run.id) == ["run.created", "run.started", "run.succeeded"]
    for run in claimed:
        assert await rl.storage.get_run(rl.environment, run.id) == run
        assert run.status is RunStatus.RUNNING and run.attempt == 1 and run.lease is not None
        assert await _event_types(rl, run.id) == ["run.created", "run.started"]
    waiting = [r for r in await _all_runs(rl) if r.status is RunStatus.QUEUED]
    assert len(waiting) == 1


async def test_a_claim_made_with_settles_sees_what_they_wrote(make_runtime: Factory) -> None:
    from runlane.model.transitions import Released, Succeeded, settle_attempt

    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, SERIAL])
    storage = _settles_and_claims(rl)
    serial = await rl.trigger_many(record, [{"order_id": i} for i in range(2)], queue=SERIAL)
    (held,) = await _claim(rl, [SERIAL])
    now = rl.clock.now()
    request = LeaseRequest("claimer", now + timedelta(seconds=30))
    # The settle frees the serial queue's only slot: the claim takes the next run.
    done = settle_attempt(held, Succeeded(None), record.retry, now)
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, [done], now, rl.registry.policies_for([SERIAL]), 5, request
    )
    (waiting,) = [run for run in serial if run.id != held.id]
    assert applied == [True] and [run.id for run in claimed] == [waiting.id]
    # A release due at once is claimable again by the claim riding on it.
    (again,) = claimed
    released = settle_attempt(again, Released(0.0, "later"), record.retry, now)
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, [released], now, rl.registry.policies_for([SERIAL]), 5, request
    )
    assert applied == [True] and [(run.id, run.attempt) for run in claimed] == [(again.id, 2)]
    assert await _event_types(rl, again.id) == [
        "run.created", "run.started", "run.released", "run.started",
    ]  # fmt: skip


async def test_a_stale_settle_fails_alone_and_the_claim_still_happens(
    make_runtime: Factory,
) -> None:
    from runlane.model.transitions import Succeeded, settle_attempt

    _, record = _recorder()
    rl = await make_runtime([record])
    storage = _settles_and_claims(rl)
    await rl.trigger_many(record, [{"order_id": i} for i in range(3)])
    first, second = await _claim(rl, [MAIN], limit=2)
    now = rl.clock.now()
    await rl.runs.cancel(first.id)  # moves the run on: the settle computed before is stale
    transitions = [
        settle_attempt(first, Succeeded(None), record.retry, now),
        settle_attempt(second, Succeeded(None), record.retry, now),
    ]
    request = LeaseRequest("claimer", now + timedelta(seconds=30))
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, transitions, now, rl.registry.policies_for([MAIN]), 5, request
    )
    assert applied == [False, True] and len(claimed) == 1
    assert (await rl.runs.get(first.id)).status is RunStatus.CANCELLATION_REQUESTED
    assert (await rl.runs.get(second.id)).status is RunStatus.SUCCEEDED


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
