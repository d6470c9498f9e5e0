"""The storage methods maintenance duties call, each called directly at its edges:
delivery requests and the outbox (``request_due_deliveries``, ``claim_outbox``,
``settle_outbox``), the maintenance lead, and the schedule states.

The ``storage`` fixture is :mod:`.methods`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from runlane.ports.storage import (
    OutboxResult,
    QueuePolicy,
    ScheduleOccurrence,
    ScheduleState,
    Storage,
)
from runlane.testing.conformance.storage.methods import NOW, QUEUE, create_named, new_run
from runlane.types.runs import RunSource, RunSourceType

# -- request_due_deliveries, claim_outbox, settle_outbox, outbox_backlog -------------


async def test_request_due_deliveries_with_limit_zero_or_no_queues_requests_nothing(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    assert await storage.request_due_deliveries(environment, [QUEUE], NOW, 0) == 0
    assert await storage.request_due_deliveries(environment, [], NOW, 5) == 0
    assert await storage.outbox_backlog(environment) == {}


async def test_request_due_deliveries_requests_each_due_run_once(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment,
        [new_run("a"), new_run("b"), new_run("later", run_at=NOW + timedelta(1))],
        NOW,
    )
    assert await storage.request_due_deliveries(environment, [QUEUE], NOW, 1) == 1
    assert await storage.request_due_deliveries(environment, [QUEUE], NOW, 5) == 1
    assert await storage.request_due_deliveries(environment, [QUEUE], NOW, 5) == 0
    assert await storage.outbox_backlog(environment) == {"main": 2}


async def test_request_due_deliveries_on_a_bounded_queue_stays_within_free_capacity(
    storage: Storage, environment: str
) -> None:
    bounded = QueuePolicy("main", concurrency_limit=1, reservation_window=30)
    await create_named(storage, environment, "a", "b")
    assert await storage.request_due_deliveries(environment, [bounded], NOW, 5) == 1
    assert await storage.request_due_deliveries(environment, [bounded], NOW, 5) == 0
    (stats,) = await storage.queue_stats(environment, [bounded], NOW)
    assert stats.occupied == 1
    # An unclaimed reservation expires at the end of its window and frees the slot.
    window_end = NOW + timedelta(seconds=30)
    assert await storage.expire_dispatch_reservations(environment, window_end - timedelta(1)) == 0
    assert await storage.expire_dispatch_reservations(environment, window_end) == 1
    assert await storage.request_due_deliveries(environment, [bounded], window_end, 5) == 1


async def test_claim_outbox_with_limit_zero_or_nothing_pending_claims_nothing(
    storage: Storage, environment: str
) -> None:
    until = NOW + timedelta(seconds=30)
    assert await storage.claim_outbox(environment, NOW, 5, until) == []
    await create_named(storage, environment, "a")
    assert await storage.request_due_deliveries(environment, [QUEUE], NOW, 5) == 1
    assert await storage.claim_outbox(environment, NOW, 0, until) == []


async def test_claim_outbox_holds_a_claim_until_it_expires(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    await storage.request_due_deliveries(environment, [QUEUE], NOW, 5)
    until = NOW + timedelta(seconds=30)
    (message,) = await storage.claim_outbox(environment, NOW, 5, until)
    assert (message.run_id, message.queue, message.attempts) == ("a", "main", 0)
    assert await storage.claim_outbox(environment, until - timedelta(seconds=1), 5, until) == []
    assert await storage.outbox_backlog(environment) == {"main": 1}
    later = until + timedelta(seconds=30)
    (again,) = await storage.claim_outbox(environment, until, 5, later)
    assert again.id == message.id


async def test_settle_outbox_published_leaves_the_backlog_and_is_not_claimed_again(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    await storage.request_due_deliveries(environment, [QUEUE], NOW, 5)
    until = NOW + timedelta(seconds=30)
    (message,) = await storage.claim_outbox(environment, NOW, 5, until)
    await storage.settle_outbox(environment, [], NOW)
    await storage.settle_outbox(environment, [OutboxResult("missing", published=True)], NOW)
    await storage.settle_outbox(environment, [OutboxResult(message.id, True, "m-1")], NOW)
    assert await storage.outbox_backlog(environment) == {}
    far = NOW + timedelta(days=1)
    assert await storage.claim_outbox(environment, far, 5, far + timedelta(seconds=30)) == []


async def test_settle_outbox_failed_waits_for_its_retry_time_and_counts_the_attempt(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    await storage.request_due_deliveries(environment, [QUEUE], NOW, 5)
    until = NOW + timedelta(seconds=30)
    (message,) = await storage.claim_outbox(environment, NOW, 5, until)
    retry_at = NOW + timedelta(seconds=10)
    failed = OutboxResult(message.id, False, error={"message": "down"}, retry_at=retry_at)
    await storage.settle_outbox(environment, [failed], NOW)
    assert await storage.outbox_backlog(environment) == {"main": 1}
    before = retry_at - timedelta(seconds=1)
    assert await storage.claim_outbox(environment, before, 5, until) == []
    (again,) = await storage.claim_outbox(environment, retry_at, 5, until)
    assert (again.id, again.attempts) == (message.id, 1)


async def test_settle_outbox_of_a_message_not_claimed_changes_nothing(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    await storage.request_due_deliveries(environment, [QUEUE], NOW, 5)
    until = NOW + timedelta(seconds=30)
    (message,) = await storage.claim_outbox(environment, NOW, 5, until)
    await storage.settle_outbox(environment, [OutboxResult(message.id, True, "m-1")], NOW)
    late_failure = OutboxResult(message.id, False, error={"message": "x"}, retry_at=NOW)
    await storage.settle_outbox(environment, [late_failure], NOW)
    assert await storage.outbox_backlog(environment) == {}


# -- hold_maintenance_lead and release_maintenance_lead ------------------------------


async def test_hold_maintenance_lead_gives_one_holder_the_lead_and_lets_it_renew(
    storage: Storage, environment: str
) -> None:
    assert await storage.hold_maintenance_lead(environment, "h1", NOW, 30) is True
    assert await storage.hold_maintenance_lead(environment, "h2", NOW, 30) is False
    assert await storage.hold_maintenance_lead(environment, "h1", NOW, 30) is True
    other_environment = f"{environment}-other"
    assert await storage.hold_maintenance_lead(other_environment, "h2", NOW, 30) is True
    await storage.release_maintenance_lead(other_environment, "h2")


async def test_release_maintenance_lead_by_a_non_holder_keeps_the_lead(
    storage: Storage, environment: str
) -> None:
    await storage.release_maintenance_lead(environment, "nobody")
    assert await storage.hold_maintenance_lead(environment, "h1", NOW, 30) is True
    await storage.release_maintenance_lead(environment, "h2")
    assert await storage.hold_maintenance_lead(environment, "h2", NOW, 30) is False
    await storage.release_maintenance_lead(environment, "h1")
    assert await storage.hold_maintenance_lead(environment, "h2", NOW, 30) is True
    await storage.release_maintenance_lead(environment, "h2")


# -- schedule states -----------------------------------------------------------------


def _occurrence(schedule_id: str, slot: datetime) -> ScheduleOccurrence:
    run_id = f"{schedule_id}-{slot:%H%M}"
    source = RunSource(RunSourceType.SCHEDULE, schedule_id=schedule_id, occurs_at=slot)
    return ScheduleOccurrence(schedule_id, slot, new_run(run_id, run_at=slot, source=source))


async def test_get_schedule_states_of_a_new_environment_is_empty(
    storage: Storage, environment: str
) -> None:
    assert await storage.get_schedule_states(environment) == {}


async def test_set_schedule_paused_remembers_the_flag_of_an_unseen_schedule(
    storage: Storage, environment: str
) -> None:
    await storage.set_schedule_paused(environment, "nightly", True, NOW)
    assert await storage.get_schedule_states(environment) == {
        "nightly": ScheduleState("nightly", None, True, None)
    }
    await storage.set_schedule_paused(environment, "nightly", False, NOW)
    (state,) = (await storage.get_schedule_states(environment)).values()
    assert state.paused is False
    assert await storage.get_schedule_states(f"{environment}-other") == {}


async def test_mark_schedules_seen_keeps_the_first_point_seen(
    storage: Storage, environment: str
) -> None:
    await storage.mark_schedules_seen(environment, [], NOW)
    assert await storage.get_schedule_states(environment) == {}
    await storage.set_schedule_paused(environment, "paused-first", True, NOW)
    await storage.mark_schedules_seen(environment, ["nightly", "paused-first"], NOW)
    await storage.mark_schedules_seen(environment, ["nightly"], NOW + timedelta(hours=1))
    states = await storage.get_schedule_states(environment)
    assert states["nightly"] == ScheduleState("nightly", None, False, NOW)
    assert states["paused-first"] == ScheduleState("paused-first", None, True, NOW)


async def test_materialize_schedule_occurrences_creates_each_slot_once(
    storage: Storage, environment: str
) -> None:
    assert await storage.materialize_schedule_occurrences(environment, [], NOW) == []
    first, second = NOW - timedelta(minutes=2), NOW - timedelta(minutes=1)
    created = await storage.materialize_schedule_occurrences(
        environment, [_occurrence("nightly", first)], NOW
    )
    assert [r.id for r in created] == ["nightly-1158"]
    again = await storage.materialize_schedule_occurrences(
        environment, [_occurrence("nightly", first), _occurrence("nightly", second)], NOW
    )
    assert [r.id for r in again] == ["nightly-1159"]
    (state,) = (await storage.get_schedule_states(environment)).values()
    assert state.last_slot == second


async def test_materialize_schedule_occurrences_moves_last_slot_even_when_all_were_claimed(
    storage: Storage, environment: str
) -> None:
    slot = NOW - timedelta(minutes=1)
    await storage.materialize_schedule_occurrences(environment, [_occurrence("n", slot)], NOW)
    assert (
        await storage.materialize_schedule_occurrences(environment, [_occurrence("n", slot)], NOW)
        == []
    )
    (state,) = (await storage.get_schedule_states(environment)).values()
    assert state.last_slot == slot


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
