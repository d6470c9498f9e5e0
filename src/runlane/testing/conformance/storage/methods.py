"""Each storage method called directly, at its edges.

The other modules test behaviour through the runtime; these call one
:class:`~runlane.storage.protocol.Storage` method at a time, with rows made by a
small factory, so a driver that breaks fails a test named after the method.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane import ErrorCode, Lane, RunlaneError, RunStatus
from runlane.storage.protocol import (
    LeaseRequest,
    NewEvent,
    NewRun,
    QueuePolicy,
    RunChanges,
    RunFilter,
    Storage,
    Transition,
)
from runlane.types.runs import RunEventType, RunSource

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = LeaseRequest("worker-1", NOW + timedelta(minutes=5))
QUEUE = QueuePolicy("main")


def new_run(run_id: str, **overrides: Any) -> NewRun:
    """A due, plain run on the ``main`` queue; ``overrides`` change any field."""
    values: dict[str, Any] = {
        "id": run_id,
        "task_id": "orders.record",
        "queue": "main",
        "status": RunStatus.QUEUED,
        "payload": {"n": run_id},
        "payload_json": f'{{"n":"{run_id}"}}',
        "run_at": NOW - timedelta(seconds=1),
        "source": RunSource(),
    }
    return NewRun(**{**values, **overrides})


@pytest.fixture
async def storage(lane_factory: Callable[[], Lane]) -> AsyncIterator[Storage]:
    """The driver under test, migrated and open."""
    store = lane_factory().storage
    await store.migrate()
    await store.open()
    yield store
    await store.close()


async def _create(storage: Storage, environment: str, *ids: str) -> None:
    outcomes = await storage.create_runs(environment, [new_run(i) for i in ids], NOW)
    assert [o.created for o in outcomes] == [True] * len(ids)


async def _succeed(storage: Storage, environment: str, run_id: str, at: datetime) -> None:
    run = await storage.claim_run(environment, run_id, LEASE, at)
    assert run is not None and run.lease is not None
    done = Transition(
        run_id,
        run.event_sequence,
        RunChanges(RunStatus.SUCCEEDED, result={"ok": True}),
        (NewEvent(RunEventType.SUCCEEDED),),
        lease_token=run.lease.token,
    )
    assert await storage.apply_transitions(environment, [done], at) == [True]


# -- create_runs ---------------------------------------------------------------------


async def test_create_runs_with_no_runs_creates_nothing(storage: Storage, environment: str) -> None:
    assert await storage.create_runs(environment, [], NOW) == []
    assert (await storage.list_runs(environment, RunFilter(), 10, None)).data == []


async def test_create_runs_refuses_a_batch_naming_one_id_twice_and_keeps_none_of_it(
    storage: Storage, environment: str
) -> None:
    with pytest.raises(RunlaneError) as refused:
        await storage.create_runs(environment, [new_run("a"), new_run("b"), new_run("a")], NOW)
    assert refused.value.code is ErrorCode.STORAGE_CONFLICT
    assert (await storage.list_runs(environment, RunFilter(), 10, None)).data == []


# -- get_run -------------------------------------------------------------------------


async def test_get_run_of_an_unknown_id_is_none(storage: Storage, environment: str) -> None:
    assert await storage.get_run(environment, "missing") is None


async def test_get_run_sees_only_its_own_environment(storage: Storage, environment: str) -> None:
    await _create(storage, environment, "a")
    assert await storage.get_run(f"{environment}-other", "a") is None


# -- list_runs -----------------------------------------------------------------------


async def test_list_runs_pages_newest_first_and_ends_without_a_cursor(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "r1", "r2", "r3")
    first = await storage.list_runs(environment, RunFilter(), 2, None)
    assert [r.id for r in first.data] == ["r3", "r2"]
    assert first.next_cursor == "r2"
    second = await storage.list_runs(environment, RunFilter(), 2, first.next_cursor)
    assert [r.id for r in second.data] == ["r1"]
    assert second.next_cursor is None


async def test_list_runs_with_limit_zero_is_an_empty_last_page(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "r1")
    page = await storage.list_runs(environment, RunFilter(), 0, None)
    assert (page.data, page.next_cursor) == ([], None)


async def test_list_runs_past_the_last_cursor_is_an_empty_page(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "r1", "r2")
    page = await storage.list_runs(environment, RunFilter(), 10, "r0")
    assert (page.data, page.next_cursor) == ([], None)


async def test_list_runs_filters_by_status_task_and_queue(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment,
        [new_run("a"), new_run("b", queue="other"), new_run("c", task_id="other.task")],
        NOW,
    )
    await _succeed(storage, environment, "a", NOW)

    async def ids(run_filter: RunFilter) -> list[str]:
        return [r.id for r in (await storage.list_runs(environment, run_filter, 10, None)).data]

    assert await ids(RunFilter(statuses=[RunStatus.SUCCEEDED])) == ["a"]
    assert await ids(RunFilter(queues=["other"])) == ["b"]
    assert await ids(RunFilter(task_ids=["other.task"])) == ["c"]
    assert await ids(RunFilter(statuses=[RunStatus.QUEUED], queues=["main"])) == ["c"]


# -- claim_due_runs and claim_run ----------------------------------------------------


async def test_claim_due_runs_with_limit_zero_or_no_queues_claims_nothing(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a")
    assert await storage.claim_due_runs(environment, [QUEUE], 0, LEASE, NOW) == []
    assert await storage.claim_due_runs(environment, [], 5, LEASE, NOW) == []
    run = await storage.get_run(environment, "a")
    assert run is not None and run.status is RunStatus.QUEUED


async def test_claim_due_runs_takes_oldest_first_up_to_the_limit(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment,
        [new_run(f"r{i}", run_at=NOW - timedelta(seconds=10 - i)) for i in range(3)],
        NOW,
    )
    claimed = await storage.claim_due_runs(environment, [QUEUE], 2, LEASE, NOW)
    assert [r.id for r in claimed] == ["r0", "r1"]
    assert all(r.status is RunStatus.RUNNING and r.attempt == 1 for r in claimed)


async def test_claim_due_runs_leaves_runs_not_yet_due(storage: Storage, environment: str) -> None:
    await storage.create_runs(environment, [new_run("later", run_at=NOW + timedelta(1))], NOW)
    assert await storage.claim_due_runs(environment, [QUEUE], 5, LEASE, NOW) == []


async def test_claim_run_of_an_unknown_or_not_due_or_claimed_run_is_none(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment, [new_run("due"), new_run("later", run_at=NOW + timedelta(1))], NOW
    )
    assert await storage.claim_run(environment, "missing", LEASE, NOW) is None
    assert await storage.claim_run(environment, "later", LEASE, NOW) is None
    assert await storage.claim_run(environment, "due", LEASE, NOW) is not None
    assert await storage.claim_run(environment, "due", LEASE, NOW) is None


async def test_claim_run_on_a_full_bounded_partition_is_none(
    storage: Storage, environment: str
) -> None:
    bounded = QueuePolicy("main", concurrency_limit=1)
    await _create(storage, environment, "a", "b")
    assert await storage.claim_run(environment, "a", LEASE, NOW, queue=bounded) is not None
    assert await storage.claim_run(environment, "b", LEASE, NOW, queue=bounded) is None


# -- heartbeat -----------------------------------------------------------------------


async def test_heartbeat_with_a_foreign_token_or_after_expiry_is_lost(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a")
    run = await storage.claim_run(environment, "a", LEASE, NOW)
    assert run is not None and run.lease is not None
    later = NOW + timedelta(minutes=10)
    assert await storage.heartbeat(environment, "a", "not-the-token", later, NOW) is None
    assert await storage.heartbeat(environment, "a", run.lease.token, later, NOW) is (
        RunStatus.RUNNING
    )
    expired = later + timedelta(seconds=1)
    assert await storage.heartbeat(environment, "a", run.lease.token, expired, expired) is None


# -- apply_transitions ---------------------------------------------------------------


def _release(run_id: str, expected_sequence: int, token: str | None = None) -> Transition:
    return Transition(
        run_id,
        expected_sequence,
        RunChanges(RunStatus.RELEASED, run_at=NOW),
        (NewEvent(RunEventType.RELEASED),),
        lease_token=token,
    )


async def test_apply_transitions_of_nothing_is_nothing(storage: Storage, environment: str) -> None:
    assert await storage.apply_transitions(environment, [], NOW) == []


async def test_apply_transitions_refuses_a_stale_sequence_and_changes_nothing(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a")
    before = await storage.get_run(environment, "a")
    assert before is not None
    stale = _release("a", before.event_sequence - 1)
    assert await storage.apply_transitions(environment, [stale], NOW) == [False]
    assert await storage.get_run(environment, "a") == before
    events = await storage.list_run_events(environment, "a")
    assert [e.type for e in events] == [RunEventType.CREATED]


async def test_apply_transitions_refuses_a_foreign_lease_token(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a")
    run = await storage.claim_run(environment, "a", LEASE, NOW)
    assert run is not None
    fenced = _release("a", run.event_sequence, token="not-the-token")
    assert await storage.apply_transitions(environment, [fenced], NOW) == [False]
    after = await storage.get_run(environment, "a")
    assert after is not None and after.status is RunStatus.RUNNING


async def test_apply_transitions_naming_one_run_twice_applies_them_in_order(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a")
    run = await storage.get_run(environment, "a")
    assert run is not None
    first = _release("a", run.event_sequence)
    second = _release("a", run.event_sequence + 1)
    repeat = _release("a", run.event_sequence)
    applied = await storage.apply_transitions(environment, [first, second, repeat], NOW)
    assert applied == [True, True, False]
    after = await storage.get_run(environment, "a")
    assert after is not None and after.event_sequence == run.event_sequence + 2


async def test_apply_transitions_reports_each_of_a_mixed_batch(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a", "b")
    a, b = await storage.get_run(environment, "a"), await storage.get_run(environment, "b")
    assert a is not None and b is not None
    batch = [_release("a", a.event_sequence), _release("b", b.event_sequence + 5)]
    assert await storage.apply_transitions(environment, batch, NOW) == [True, False]


# -- list_expired_leases -------------------------------------------------------------


async def test_list_expired_leases_counts_a_lease_expired_at_its_end_and_is_bounded(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a", "b", "c")
    assert len(await storage.claim_due_runs(environment, [QUEUE], 3, LEASE, NOW)) == 3
    before, after = LEASE.expires_at - timedelta(seconds=1), LEASE.expires_at
    assert await storage.list_expired_leases(environment, before, 10) == []
    assert len(await storage.list_expired_leases(environment, after, 2)) == 2
    assert len(await storage.list_expired_leases(environment, after, 10)) == 3


# -- prune_runs ----------------------------------------------------------------------


async def test_prune_runs_deletes_at_most_its_limit_of_old_finished_runs(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a", "b", "c", "live")
    for run_id in ("a", "b", "c"):
        await _succeed(storage, environment, run_id, NOW)
    cutoff = NOW + timedelta(seconds=1)
    finished = [RunStatus.SUCCEEDED]
    assert await storage.prune_runs(environment, NOW, finished, 10) == 0
    assert await storage.prune_runs(environment, cutoff, finished, 2) == 2
    assert await storage.prune_runs(environment, cutoff, finished, 0) == 0
    assert await storage.prune_runs(environment, cutoff, finished, 2) == 1
    remaining = (await storage.list_runs(environment, RunFilter(), 10, None)).data
    assert [r.id for r in remaining] == ["live"]
    assert await storage.list_run_events(environment, "a") == []


async def test_prune_runs_leaves_statuses_it_was_not_given(
    storage: Storage, environment: str
) -> None:
    await _create(storage, environment, "a")
    await _succeed(storage, environment, "a", NOW)
    later = NOW + timedelta(days=1)
    assert await storage.prune_runs(environment, later, [RunStatus.FAILED], 10) == 0
    assert await storage.get_run(environment, "a") is not None


__all__ = [name for name in dir() if name.startswith("test_")] + ["storage"]
pytestmark = pytest.mark.asyncio
