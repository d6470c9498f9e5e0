"""Maintenance duties as small services: each is built from the few collaborators it
uses, runs on its own, and one that fails never stops the others in a pass."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest

from runlane import Context, Runlane, queue, sqlite_lane, task
from runlane.core.maintenance import (
    IdempotencyKeyRelease,
    LeaseRecovery,
    Pruning,
    ScheduleDuty,
    prune_finished_runs,
    run_maintenance,
    standard_duties,
)
from runlane.core.schedule_service import ScheduleMaterializer
from runlane.testing import ManualClock
from runlane.types.records import LeaseRequest
from runlane.types.runs import RunStatus, TickReport

main = queue("main", default=True)


@task(id="noop", queue=main)
def noop(payload: object, ctx: Context) -> None:
    """Does nothing."""


@pytest.fixture
async def rl(tmp_path: Path) -> AsyncIterator[Runlane]:
    runtime = Runlane(
        lane=sqlite_lane(tmp_path / "duties.db"), queues=[main], tasks=[noop], clock=ManualClock()
    )
    await runtime.migrate()
    async with runtime:
        yield runtime


def _clock(rl: Runlane) -> ManualClock:
    assert isinstance(rl.clock, ManualClock)
    return rl.clock


class Raising:
    name: ClassVar[str] = "raising"

    async def run(self, report: TickReport) -> None:
        raise RuntimeError("broken duty")


class Counting:
    name: ClassVar[str] = "counting"

    async def run(self, report: TickReport) -> None:
        report.leases_recovered += 1


async def test_a_failing_duty_is_counted_and_the_duties_after_it_still_run() -> None:
    report = await run_maintenance([Raising(), Counting(), Raising()])
    assert report.failures == {"raising": 2}
    assert report.leases_recovered == 1


async def test_lease_recovery_takes_every_expired_lease_in_batches_of_its_size(
    rl: Runlane,
) -> None:
    await rl.trigger_many(noop, [None] * 5)
    now = rl.clock.now()
    lease = LeaseRequest("gone-worker", now + timedelta(seconds=30))
    policies = rl.registry.queue_policies
    claimed = await rl.storage.claim_due_runs(rl.environment, policies, 10, lease, now)
    assert len(claimed) == 5
    _clock(rl).advance("31s")

    duty = LeaseRecovery(rl.store, rl.registry.tasks, rl.observers, batch_size=2)
    report = TickReport()
    await duty.run(report)

    assert report.leases_recovered == 5
    runs = await rl.runs.list(limit=10)
    assert {run.status for run in runs.data} == {RunStatus.RETRYING}
    assert all(run.lease is None for run in runs.data)


async def test_lease_recovery_leaves_leases_that_have_not_expired(rl: Runlane) -> None:
    await rl.trigger(noop)
    now = rl.clock.now()
    lease = LeaseRequest("live-worker", now + timedelta(seconds=30))
    await rl.storage.claim_due_runs(rl.environment, rl.registry.queue_policies, 1, lease, now)

    report = TickReport()
    await LeaseRecovery(rl.store, rl.registry.tasks, rl.observers).run(report)

    assert report.leases_recovered == 0
    (run,) = (await rl.runs.list(limit=10)).data
    assert run.status is RunStatus.RUNNING


async def test_pruning_deletes_finished_runs_past_retention_in_batches(rl: Runlane) -> None:
    await rl.trigger_many(noop, [None] * 5)
    while await rl.execute_next() is not None:
        pass
    _clock(rl).advance("2h")
    await rl.trigger(noop)  # queued: never pruned

    assert await prune_finished_runs(rl.store, 3600, batch_size=2) == 5
    report = TickReport()
    await Pruning(rl.store, retention=3600, batch_size=2).run(report)
    assert report.runs_pruned == 0
    assert [run.status for run in (await rl.runs.list(limit=10)).data] == [RunStatus.QUEUED]


async def test_idempotency_key_release_counts_the_keys_it_released(rl: Runlane) -> None:
    report = TickReport()
    await IdempotencyKeyRelease(rl.store).run(report)
    assert report.idempotency_keys_released == 0


async def test_a_runtime_without_transport_or_retention_runs_only_its_duties(
    rl: Runlane,
) -> None:
    names = [duty.name for duty in rl.duties]
    # The lane's storage stores messages, so topics' deduplication keys are released too.
    assert names == [
        "schedules",
        "lease_recovery",
        "waiting_runs",
        "idempotency_keys",
        "deduplication_keys",
    ]
    with_retention = standard_duties(
        store=rl.store,
        tasks=rl.registry.tasks,
        observers=rl.observers,
        schedules=ScheduleMaterializer(rl.store, {}, rl, rl.observers),
        dispatcher=None,
        retention=60.0,
    )
    assert [duty.name for duty in with_retention][-1] == "pruning"
    assert isinstance(with_retention[0], ScheduleDuty)
