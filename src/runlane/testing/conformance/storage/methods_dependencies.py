"""The dependency and group methods of a driver
(:class:`~runlane.ports.storage.TracksDependencies`), each called directly at its
edges, and what :meth:`~runlane.ports.storage.Storage.create_runs`,
:meth:`~runlane.ports.storage.Storage.apply_transitions` and
:meth:`~runlane.ports.storage.Storage.prune_runs` owe runs with dependencies."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError, RunStatus
from runlane.ports.storage import (
    NewEvent,
    NewGroup,
    NewWaitingRun,
    RunChanges,
    RunFilter,
    Storage,
    TracksDependencies,
    Transition,
)
from runlane.testing.conformance.storage.methods import (
    NOW,
    create_named,
    new_run,
    storage,
    succeed_run,
)
from runlane.types.runs import Run, RunEventType


def waiting(
    run_id: str, *after: str, on_failure: str = "cancel", **overrides: Any
) -> NewWaitingRun:
    """A run created ``after`` the given ids (default policy: cancel)."""
    base = new_run(run_id, **{"status": RunStatus.WAITING, **overrides})
    fields = {field.name: getattr(base, field.name) for field in dataclasses.fields(base)}
    return NewWaitingRun(**fields, after=after, on_failure=on_failure)


def deps(store: Storage) -> TracksDependencies:
    assert isinstance(store, TracksDependencies)
    return store


async def _get(store: Storage, environment: str, run_id: str) -> Run:
    run = await store.get_run(environment, run_id)
    assert run is not None
    return run


async def _end(store: Storage, environment: str, run_id: str, status: RunStatus) -> None:
    """Settle ``run_id`` (holding no lease) as ``status`` with one event."""
    run = await _get(store, environment, run_id)
    event = {
        RunStatus.CANCELLED: RunEventType.CANCELLED,
        RunStatus.FAILED: RunEventType.FAILED,
        RunStatus.DEAD_LETTERED: RunEventType.DEAD_LETTERED,
        RunStatus.DISCARDED: RunEventType.DISCARDED,
        RunStatus.RETRYING: RunEventType.RETRY_SCHEDULED,
    }[status]
    change = Transition(run.id, run.event_sequence, RunChanges(status), (NewEvent(event),))
    assert await store.apply_transitions(environment, [change], NOW) == [True]


async def test_create_runs_writes_a_waiting_run_and_counts_settled_dependencies_at_once(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b")
    await succeed_run(storage, environment, "a", NOW)
    (outcome,) = await storage.create_runs(environment, [waiting("c", "a", "b")], NOW)
    assert outcome.created and outcome.run.status is RunStatus.WAITING
    (released,) = await storage.create_runs(environment, [waiting("d", "a")], NOW)
    assert released.run.status is RunStatus.QUEUED
    events = await storage.list_run_events(environment, "d")
    assert [e.type for e in events] == [RunEventType.CREATED, RunEventType.DEPENDENCIES_MET]
    assert events[0].data["after"] == ["a"] and events[0].data["on_failure"] == "cancel"


async def test_create_runs_with_an_unknown_dependency_raises_run_not_found_and_writes_nothing(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    with pytest.raises(RunlaneError) as caught:
        await storage.create_runs(environment, [new_run("x"), waiting("c", "a", "missing")], NOW)
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND
    assert await storage.get_run(environment, "x") is None
    assert await storage.get_run(environment, "c") is None
    assert await deps(storage).list_dependents(environment, "a", 10) == []


async def test_create_runs_sees_dependencies_written_earlier_in_the_same_call(
    storage: Storage, environment: str
) -> None:
    outcomes = await storage.create_runs(
        environment, [new_run("a"), waiting("b", "a"), waiting("c", "b")], NOW
    )
    assert [o.run.status for o in outcomes] == [
        RunStatus.QUEUED,
        RunStatus.WAITING,
        RunStatus.WAITING,
    ]


async def test_create_runs_does_not_see_runs_of_another_environment(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, f"{environment}-other", "a")
    with pytest.raises(RunlaneError) as caught:
        await storage.create_runs(environment, [waiting("c", "a")], NOW)
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND


@pytest.mark.parametrize(
    "ending",
    [RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DEAD_LETTERED, RunStatus.DISCARDED],
)
async def test_apply_transitions_cancels_the_dependents_of_a_run_that_did_not_succeed(
    storage: Storage, environment: str, ending: RunStatus
) -> None:
    await create_named(storage, environment, "a")
    await storage.create_runs(
        environment,
        [waiting("b", "a"), waiting("c", "b"), waiting("d", "a", on_failure="run")],
        NOW,
    )
    await _end(storage, environment, "a", ending)
    b, c, d = [await _get(storage, environment, i) for i in "bcd"]
    assert (b.status, b.cancel_reason) == (RunStatus.CANCELLED, "dependency_failed")
    assert (c.status, c.cancel_reason) == (RunStatus.CANCELLED, "dependency_failed")
    assert d.status is RunStatus.QUEUED
    cancelled = (await storage.list_run_events(environment, "c"))[-1]
    assert cancelled.type is RunEventType.CANCELLED
    assert cancelled.data == {"reason": "dependency_failed", "dependency": "b"}
    assert c.event_sequence == len(await storage.list_run_events(environment, "c"))


async def test_apply_transitions_of_a_retry_leaves_the_dependents_waiting(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    await storage.create_runs(environment, [waiting("b", "a")], NOW)
    await _end(storage, environment, "a", RunStatus.RETRYING)
    assert (await _get(storage, environment, "b")).status is RunStatus.WAITING


async def test_apply_transitions_releases_a_dependent_only_with_its_last_dependency(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b")
    await storage.create_runs(
        environment, [waiting("c", "a", "b", run_at=NOW + timedelta(hours=1))], NOW
    )
    await succeed_run(storage, environment, "a", NOW)
    assert (await _get(storage, environment, "c")).status is RunStatus.WAITING
    await succeed_run(storage, environment, "b", NOW)
    released = await _get(storage, environment, "c")
    assert released.status is RunStatus.SCHEDULED
    assert released.run_at == NOW + timedelta(hours=1)
    types = [e.type for e in await storage.list_run_events(environment, "c")]
    assert types == [RunEventType.CREATED, RunEventType.DEPENDENCIES_MET]


async def test_a_delivery_request_is_written_with_the_release_when_the_run_asked_for_one(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    await storage.create_runs(environment, [waiting("b", "a", request_delivery=True)], NOW)
    assert await storage.outbox_backlog(environment) == {}
    await succeed_run(storage, environment, "a", NOW)
    assert await storage.outbox_backlog(environment) == {"main": 1}
    (message,) = await storage.claim_outbox(environment, NOW, 10, NOW + timedelta(seconds=30))
    assert message.run_id == "b"
    types = [e.type for e in await storage.list_run_events(environment, "b")]
    assert types[-1] is RunEventType.DELIVERY_REQUESTED


async def test_list_dependencies_and_list_dependents_read_the_edges_in_order(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b")
    await storage.create_runs(environment, [waiting("c", "b", "a"), waiting("d", "a")], NOW)
    store = deps(storage)
    assert [r.id for r in await store.list_dependencies(environment, "c")] == ["b", "a"]
    assert [r.id for r in await store.list_dependents(environment, "a", 10)] == ["c", "d"]
    assert [r.id for r in await store.list_dependents(environment, "a", 1)] == ["c"]
    assert await store.list_dependencies(environment, "a") == []


async def test_settle_stranded_waiting_runs_settles_only_runs_whose_dependencies_all_ended(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b")
    await storage.create_runs(environment, [waiting("c", "a"), waiting("d", "b")], NOW)
    store = deps(storage)
    assert await store.settle_stranded_waiting_runs(environment, NOW, 100) == 0
    await succeed_run(storage, environment, "a", NOW)
    # Released by the settle itself: nothing left for the safety net.
    assert await store.settle_stranded_waiting_runs(environment, NOW, 100) == 0
    assert (await _get(storage, environment, "c")).status is RunStatus.QUEUED
    assert (await _get(storage, environment, "d")).status is RunStatus.WAITING


async def test_prune_runs_keeps_a_finished_run_an_unfinished_run_depends_on(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a", "b")
    await storage.create_runs(environment, [waiting("c", "a", "b")], NOW)
    await succeed_run(storage, environment, "a", NOW)
    later = NOW + timedelta(days=2)
    assert await storage.prune_runs(environment, later, [RunStatus.SUCCEEDED], 100) == 0
    await _end(storage, environment, "b", RunStatus.CANCELLED)
    assert (await _get(storage, environment, "c")).status is RunStatus.CANCELLED
    statuses = [RunStatus.SUCCEEDED, RunStatus.CANCELLED]
    assert await storage.prune_runs(environment, later, statuses, 100) == 3
    assert await deps(storage).list_dependents(environment, "a", 10) == []


async def test_create_group_writes_members_callback_and_group_in_one_call(
    storage: Storage, environment: str
) -> None:
    store = deps(storage)
    members = [new_run(f"m{i}") for i in range(3)]
    callback = waiting("cb", *(m.id for m in members))
    created, cb = await store.create_group(
        environment, NewGroup("g1", "orders.record", callback), members, NOW
    )
    assert [o.run.id for o in created] == ["m0", "m1", "m2"]
    assert all(o.created and o.outbox == () for o in created)
    assert cb is not None and cb.status is RunStatus.WAITING
    group = await store.get_group(environment, "g1")
    assert group is not None
    assert (group.total, group.done, group.callback_id) == (3, 0, "cb")
    assert group.counts == {RunStatus.QUEUED: 3}
    page = await storage.list_runs(environment, RunFilter(group="g1"), 10, None)
    assert sorted(r.id for r in page.data) == ["m0", "m1", "m2"]
    for member in created:
        await succeed_run(storage, environment, member.run.id, NOW)
    assert (await _get(storage, environment, "cb")).status is RunStatus.QUEUED
    finished = await store.get_group(environment, "g1")
    assert finished is not None and finished.done == 3 and finished.failed == 0
    assert await store.get_group(environment, "no-such-group") is None


async def test_create_group_writes_claimed_delivery_requests_when_the_caller_publishes_them(
    storage: Storage, environment: str
) -> None:
    store = deps(storage)
    until = NOW + timedelta(seconds=30)
    members = [new_run(f"d{i}", request_delivery=True) for i in range(2)]
    created, _ = await store.create_group(
        environment, NewGroup("g3", "orders.record", None), members, NOW, outbox_claimed_until=until
    )
    assert [[m.run_id for m in o.outbox] for o in created] == [["d0"], ["d1"]]
    # Claimed by the caller: tick does not publish them a second time.
    assert await storage.claim_outbox(environment, NOW, 10, until) == []
    pending = [new_run(f"p{i}", request_delivery=True) for i in range(2)]
    await store.create_group(environment, NewGroup("g4", "orders.record", None), pending, NOW)
    claimed = await storage.claim_outbox(environment, NOW, 10, until)
    assert sorted(m.run_id for m in claimed) == ["p0", "p1"]


async def test_create_group_with_an_existing_member_id_writes_nothing(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "m0")
    store = deps(storage)
    with pytest.raises(RunlaneError) as caught:
        await store.create_group(
            environment,
            NewGroup("g2", "orders.record", waiting("cb", "m0", "m1")),
            [new_run("m1"), new_run("m0")],
            NOW,
        )
    assert caught.value.code is ErrorCode.STORAGE_CONFLICT
    assert await storage.get_run(environment, "m1") is None
    assert await store.get_group(environment, "g2") is None


__all__ = ["storage"] + [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
