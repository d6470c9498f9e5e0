"""Each storage method called directly, at its edges.

The other modules test behaviour through the runtime; these call one
:class:`~runlane.ports.storage.Storage` method at a time, with rows made by a
small factory, so a driver that breaks fails a test named after the method. This
module holds the methods of runs (creating, reading, listing, claiming, settling,
pruning, counting) and the ``storage`` fixture; :mod:`.methods_maintenance` holds
the ones maintenance calls.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane import ErrorCode, Lane, RunlaneError, RunStatus
from runlane.ports.storage import (
    LeaseRequest,
    NewEvent,
    NewRun,
    QueuePolicy,
    RunChanges,
    RunFilter,
    Storage,
    Transition,
)
from runlane.types.runs import RunEventType, RunSource, RunSourceType

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: A trace carrier as the W3C propagator writes it (sampled).
CARRIER = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
#: Every option a plain run (no key, dependency, rate key or delivery request) may
#: carry, each away from its default: new_run(..., **EVERY_PLAIN_OPTION).
EVERY_PLAIN_OPTION: dict[str, Any] = {
    "status": RunStatus.SCHEDULED,
    "run_at": NOW + timedelta(hours=1),
    "concurrency_key": "tenant-1",
    "trace_carrier": CARRIER,
    "priority": 5,
    "priority_offset": 5_000_000,
    "source": RunSource(RunSourceType.RERUN, run_id="parent"),
}
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


async def create_named(storage: Storage, environment: str, *ids: str) -> None:
    """Create one :func:`new_run` per id, each of which must be new."""
    outcomes = await storage.create_runs(environment, [new_run(i) for i in ids], NOW)
    assert [o.created for o in outcomes] == [True] * len(ids)


async def succeed_run(storage: Storage, environment: str, run_id: str, at: datetime) -> None:
    """Claim ``run_id`` at ``at`` and settle it as succeeded."""
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


@pytest.mark.parametrize("size", [1, 3, 100])
async def test_create_runs_refuses_a_batch_naming_an_existing_id_and_keeps_none_of_it(
    storage: Storage, environment: str, size: int
) -> None:
    # One size per path a driver may take: a lone run, a small batch, a bulk one.
    await create_named(storage, environment, "a")
    fresh = [new_run(f"n{n}") for n in range(size - 1)]
    with pytest.raises(RunlaneError) as refused:
        await storage.create_runs(environment, [*fresh, new_run("a")], NOW)
    assert refused.value.code is ErrorCode.STORAGE_CONFLICT
    listed = (await storage.list_runs(environment, RunFilter(), 200, None)).data
    assert [run.id for run in listed] == ["a"]


async def test_create_runs_of_mixed_shapes_stores_each_run_as_returned_with_its_history(
    storage: Storage, environment: str
) -> None:
    # Runs of one call that differ in task, queue, due time, concurrency key or trace
    # carrier (as concurrent triggers grouped into one write do), in stretches long and
    # short (a driver may write a long stretch of alike runs differently), with payload
    # text that needs escaping: each is stored exactly as the outcome says, in order.
    later = NOW + timedelta(hours=1)
    text = 'say "hi" \\ é ☃ \u2028 tab\t'
    carrier = CARRIER
    escaped = {"s": text}
    shapes: list[tuple[int, dict[str, Any]]] = [
        (12, {"payload": escaped, "payload_json": json.dumps(escaped, ensure_ascii=False)}),
        (1, {"task_id": "orders.other"}),
        (10, {"queue": "other", "run_at": later, "status": RunStatus.SCHEDULED}),
        (2, {"concurrency_key": "tenant-1"}),
        (9, {"trace_carrier": carrier}),
        (1, {}),
    ]
    runs = [
        new_run(f"m{stretch}-{n}", **fields)
        for stretch, (count, fields) in enumerate(shapes)
        for n in range(count)
    ]
    outcomes = await storage.create_runs(environment, runs, NOW)
    assert [(o.run.id, o.created) for o in outcomes] == [(r.id, True) for r in runs]
    for outcome, new in zip(outcomes, runs, strict=True):
        stored = await storage.get_run(environment, new.id)
        assert stored == outcome.run
        assert (stored.task_id, stored.queue, stored.status, stored.run_at) == (
            new.task_id,
            new.queue,
            new.status,
            new.run_at,
        )
        assert (stored.payload, stored.concurrency_key, stored.trace_carrier) == (
            new.payload,
            new.concurrency_key,
            new.trace_carrier,
        )
        (created,) = await storage.list_run_events(environment, new.id)
        assert created.type is RunEventType.CREATED
        assert created.data["task_id"] == new.task_id
        assert created.data["queue"] == new.queue
        assert datetime.fromisoformat(created.data["run_at"]) == new.run_at


# -- get_run -------------------------------------------------------------------------


async def test_get_run_of_an_unknown_id_is_none(storage: Storage, environment: str) -> None:
    assert await storage.get_run(environment, "missing") is None


async def test_get_run_sees_only_its_own_environment(storage: Storage, environment: str) -> None:
    await create_named(storage, environment, "a")
    assert await storage.get_run(f"{environment}-other", "a") is None


# -- list_runs -----------------------------------------------------------------------


async def test_list_runs_pages_newest_first_and_ends_without_a_cursor(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "r1", "r2", "r3")
    first = await storage.list_runs(environment, RunFilter(), 2, None)
    assert [r.id for r in first.data] == ["r3", "r2"]
    assert first.next_cursor == "r2"
    second = await storage.list_runs(environment, RunFilter(), 2, first.next_cursor)
    assert [r.id for r in second.data] == ["r1"]
    assert second.next_cursor is None


async def test_list_runs_with_limit_zero_is_an_empty_last_page(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "r1")
    page = await storage.list_runs(environment, RunFilter(), 0, None)
    assert (page.data, page.next_cursor) == ([], None)


async def test_list_runs_past_the_last_cursor_is_an_empty_page(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "r1", "r2")
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
    await succeed_run(storage, environment, "a", NOW)

    async def ids(run_filter: RunFilter) -> list[str]:
        return [r.id for r in (await storage.list_runs(environment, run_filter, 10, None)).data]

    assert await ids(RunFilter(statuses=[RunStatus.SUCCEEDED])) == ["a"]
    assert await ids(RunFilter(queues=["other"])) == ["b"]
    assert await ids(RunFilter(task_ids=["other.task"])) == ["c"]
    assert await ids(RunFilter(statuses=[RunStatus.QUEUED], queues=["main"])) == ["c"]


async def test_list_runs_pages_a_filtered_listing_behind_its_cursor(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment,
        [new_run("r1"), new_run("r2", queue="other"), new_run("r3"), new_run("r4")],
        NOW,
    )
    main = RunFilter(queues=["main"], statuses=[RunStatus.QUEUED])
    first = await storage.list_runs(environment, main, 2, None)
    assert ([r.id for r in first.data], first.next_cursor) == (["r4", "r3"], "r3")
    second = await storage.list_runs(environment, main, 2, first.next_cursor)
    assert ([r.id for r in second.data], second.next_cursor) == (["r1"], None)


# -- claim_due_runs and claim_run ----------------------------------------------------


async def test_claim_due_runs_with_limit_zero_or_no_queues_claims_nothing(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
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
    await create_named(storage, environment, "a", "b")
    assert await storage.claim_run(environment, "a", LEASE, NOW, queue=bounded) is not None
    assert await storage.claim_run(environment, "b", LEASE, NOW, queue=bounded) is None


# -- heartbeat -----------------------------------------------------------------------


async def test_heartbeat_with_a_foreign_token_or_after_expiry_is_lost(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
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
    await create_named(storage, environment, "a")
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
    await create_named(storage, environment, "a")
    run = await storage.claim_run(environment, "a", LEASE, NOW)
    assert run is not None
    fenced = _release("a", run.event_sequence, token="not-the-token")
    assert await storage.apply_transitions(environment, [fenced], NOW) == [False]
    after = await storage.get_run(environment, "a")
    assert after is not None and after.status is RunStatus.RUNNING


async def test_apply_transitions_naming_one_run_twice_applies_them_in_order(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
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
    await create_named(storage, environment, "a", "b")
    a, b = await storage.get_run(environment, "a"), await storage.get_run(environment, "b")
    assert a is not None and b is not None
    batch = [_release("a", a.event_sequence), _release("b", b.event_sequence + 5)]
    assert await storage.apply_transitions(environment, batch, NOW) == [True, False]


# -- list_expired_leases -------------------------------------------------------------


async def test_list_expired_leases_counts_a_lease_expired_at_its_end_and_is_bounded(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b", "c")
    assert len(await storage.claim_due_runs(environment, [QUEUE], 3, LEASE, NOW)) == 3
    before, after = LEASE.expires_at - timedelta(seconds=1), LEASE.expires_at
    assert await storage.list_expired_leases(environment, before, 10) == []
    assert len(await storage.list_expired_leases(environment, after, 2)) == 2
    assert len(await storage.list_expired_leases(environment, after, 10)) == 3


# -- prune_runs ----------------------------------------------------------------------


async def test_prune_runs_deletes_at_most_its_limit_of_old_finished_runs(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b", "c", "live")
    for run_id in ("a", "b", "c"):
        await succeed_run(storage, environment, run_id, NOW)
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
    await create_named(storage, environment, "a")
    await succeed_run(storage, environment, "a", NOW)
    later = NOW + timedelta(days=1)
    assert await storage.prune_runs(environment, later, [RunStatus.FAILED], 10) == 0
    assert await storage.get_run(environment, "a") is not None


# -- queue_stats and count_finished_runs ---------------------------------------------


async def test_queue_stats_of_no_queues_is_empty_and_an_unused_queue_counts_zero(
    storage: Storage, environment: str
) -> None:
    assert await storage.queue_stats(environment, [], NOW) == []
    (stats,) = await storage.queue_stats(environment, [QUEUE], NOW)
    assert (stats.queue, stats.counts, stats.occupied, stats.due) == ("main", {}, 0, 0)
    assert stats.oldest_due_at is None


async def test_queue_stats_counts_statuses_due_runs_and_unexpired_leases(
    storage: Storage, environment: str
) -> None:
    await storage.create_runs(
        environment,
        [new_run("a"), new_run("b"), new_run("later", run_at=NOW + timedelta(1))],
        NOW,
    )
    assert await storage.claim_run(environment, "a", LEASE, NOW) is not None
    (stats,) = await storage.queue_stats(environment, [QUEUE], NOW)
    assert stats.counts == {RunStatus.RUNNING: 1, RunStatus.QUEUED: 2}
    assert (stats.occupied, stats.due) == (1, 1)
    assert stats.oldest_due_at == NOW - timedelta(seconds=1)
    (expired,) = await storage.queue_stats(environment, [QUEUE], LEASE.expires_at)
    assert expired.occupied == 0


async def test_count_finished_runs_counts_from_since_on_and_leaves_out_empty_queues(
    storage: Storage, environment: str
) -> None:
    assert await storage.count_finished_runs(environment, NOW) == {}
    await create_named(storage, environment, "a", "live")
    await succeed_run(storage, environment, "a", NOW)
    assert await storage.count_finished_runs(environment, NOW) == {"main": {RunStatus.SUCCEEDED: 1}}
    assert await storage.count_finished_runs(environment, NOW + timedelta(seconds=1)) == {}


__all__ = [name for name in dir() if name.startswith("test_")] + ["storage"]
pytestmark = pytest.mark.asyncio
