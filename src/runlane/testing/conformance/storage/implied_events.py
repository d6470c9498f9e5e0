"""Run histories whose events a driver may keep on the run's row instead of storing them.

A driver may imply ``run.started`` and ``run.succeeded`` by the run's row, as it may
``run.created``; whatever it stores, ``list_run_events`` returns every event with the
type, sequence, time and data it was written with, in sequence order, however often
the run was claimed again (retried, released, recovered from an expired lease,
replayed) and however its last attempt ended.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from runlane import RunStatus
from runlane.ports.storage import LeaseRequest, NewEvent, RunChanges, Storage, Transition
from runlane.testing.conformance.storage.methods import LEASE, NOW, create_named, new_run
from runlane.types.runs import Run, RunEvent, RunEventType, RunFailure

_BOOM = RunFailure("task_failed", "boom", retryable=True)
_LATER = NOW + timedelta(minutes=10)
_SECOND_LEASE = LeaseRequest("worker-2", _LATER + timedelta(seconds=30, microseconds=250))


def _started(run: Run, lease: LeaseRequest, at: datetime) -> RunEvent:
    """The ``run.started`` event a claim of ``run`` at ``at`` under ``lease`` wrote."""
    return RunEvent(
        run.id,
        run.event_sequence,
        RunEventType.STARTED,
        at,
        {
            "attempt": run.attempt,
            "worker_id": lease.worker_id,
            "lease_expires_at": lease.expires_at.isoformat(),
        },
    )


async def _claim(storage: Storage, environment: str, run_id: str, lease: LeaseRequest,
                at: datetime) -> Run:  # fmt: skip
    run = await storage.claim_run(environment, run_id, lease, at)
    assert run is not None and run.lease is not None
    return run


async def _settle(
    storage: Storage,
    environment: str,
    run: Run,
    changes: RunChanges,
    event: RunEventType,
    data: dict[str, Any],
    at: datetime,
    *,
    leased: bool = True,
) -> RunEvent:
    """Apply one transition of ``run`` with one event; return that event as written."""
    token = run.lease.token if leased and run.lease is not None else None
    transition = Transition(
        run.id, run.event_sequence, changes, (NewEvent(event, data),), lease_token=token
    )
    assert await storage.apply_transitions(environment, [transition], at) == [True]
    return RunEvent(run.id, run.event_sequence + 1, event, at, data)


async def _history(storage: Storage, environment: str, run_id: str) -> list[RunEvent]:
    """The run's events after ``run.created``, checked to number 1 to its sequence."""
    events = await storage.list_run_events(environment, run_id)
    run = await storage.get_run(environment, run_id)
    assert run is not None
    assert [e.sequence for e in events] == list(range(1, run.event_sequence + 1))
    assert events[0].type is RunEventType.CREATED
    return events[1:]


async def test_a_retried_run_lists_each_start_as_it_was_written(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "a")
    first = await _claim(storage, environment, "a", LEASE, NOW)
    # A heartbeat moves the lease on; the start keeps the expiry it was written with.
    assert first.lease is not None
    assert await storage.heartbeat(
        environment, "a", first.lease.token, NOW + timedelta(hours=1), NOW + timedelta(seconds=5)
    ) is RunStatus.RUNNING  # fmt: skip
    retry = {"attempt": 1, "failure": _BOOM.to_json(), "retry_at": _LATER.isoformat()}
    changes = RunChanges(RunStatus.RETRYING, run_at=_LATER, failure=_BOOM, add_failure=True)
    at = NOW + timedelta(seconds=7)
    retried = await _settle(
        storage, environment, first, changes, RunEventType.RETRY_SCHEDULED, retry, at
    )
    second = await _claim(storage, environment, "a", _SECOND_LEASE, _LATER)
    done_at = _LATER + timedelta(seconds=3)
    succeeded = await _settle(
        storage, environment, second, RunChanges(RunStatus.SUCCEEDED, result=2),
        RunEventType.SUCCEEDED, {"attempt": 2}, done_at,
    )  # fmt: skip
    assert await _history(storage, environment, "a") == [
        _started(first, LEASE, NOW),
        retried,
        _started(second, _SECOND_LEASE, _LATER),
        succeeded,
    ]


async def test_released_and_expired_attempts_keep_their_starts(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "r")
    first = await _claim(storage, environment, "r", LEASE, NOW)
    release = {"attempt": 1, "reason": "not yet", "run_at": _LATER.isoformat()}
    released = await _settle(
        storage, environment, first, RunChanges(RunStatus.RELEASED, run_at=_LATER),
        RunEventType.RELEASED, release, NOW,
    )  # fmt: skip
    second = await _claim(storage, environment, "r", _SECOND_LEASE, _LATER)
    # The second lease expires: maintenance writes both events in one transition.
    expired_at = _LATER + timedelta(minutes=1)
    expiry = Transition(
        "r",
        second.event_sequence,
        RunChanges(RunStatus.RETRYING, run_at=expired_at, failure=_BOOM, add_failure=True),
        (
            NewEvent(RunEventType.LEASE_EXPIRED, {"attempt": 2, "worker_id": "worker-2"}),
            NewEvent(RunEventType.RETRY_SCHEDULED, {"attempt": 2}),
        ),
        lease_token=second.lease.token if second.lease else None,
        lease_expired_by=expired_at,
    )
    assert await storage.apply_transitions(environment, [expiry], expired_at) == [True]
    third = await _claim(storage, environment, "r", LEASE, expired_at)
    assert third.attempt == 3
    events = await _history(storage, environment, "r")
    assert events[:2] == [_started(first, LEASE, NOW), released]
    assert events[2] == _started(second, _SECOND_LEASE, _LATER)
    assert [e.type for e in events[3:5]] == [
        RunEventType.LEASE_EXPIRED, RunEventType.RETRY_SCHEDULED,
    ]  # fmt: skip
    assert events[5] == _started(third, LEASE, expired_at)


async def test_a_start_made_claimable_twice_is_listed_once(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "t")
    first = await _claim(storage, environment, "t", LEASE, NOW)
    changes = RunChanges(RunStatus.RETRYING, run_at=_LATER, failure=_BOOM, add_failure=True)
    retried = await _settle(
        storage, environment, first, changes, RunEventType.RETRY_SCHEDULED, {"attempt": 1}, NOW
    )
    waiting = await storage.get_run(environment, "t")
    assert waiting is not None
    # Another transition into a claimable status, with no claim between them.
    released = await _settle(
        storage, environment, waiting, RunChanges(RunStatus.RELEASED, run_at=_LATER),
        RunEventType.RELEASED, {"attempt": 1}, NOW, leased=False,
    )  # fmt: skip
    assert await _history(storage, environment, "t") == [
        _started(first, LEASE, NOW),
        retried,
        released,
    ]


async def test_runs_ending_cancelled_failed_or_dead_lettered_and_replayed_keep_every_event(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "c", "f", "d")
    running = await _claim(storage, environment, "c", LEASE, NOW)
    requested = await _settle(
        storage, environment, running,
        RunChanges(RunStatus.CANCELLATION_REQUESTED, cancel_reason="stop", keep_lease=True),
        RunEventType.CANCELLATION_REQUESTED, {"reason": "stop"}, NOW, leased=False,
    )  # fmt: skip
    asked = await storage.get_run(environment, "c")
    assert asked is not None and asked.lease is not None
    cancelled = await _settle(
        storage, environment, asked, RunChanges(RunStatus.CANCELLED, cancel_reason="stop"),
        RunEventType.CANCELLED, {"reason": "stop", "attempt": 1}, _LATER,
    )  # fmt: skip
    assert await _history(storage, environment, "c") == [
        _started(running, LEASE, NOW), requested, cancelled,
    ]  # fmt: skip

    failing = await _claim(storage, environment, "f", LEASE, NOW)
    failed = await _settle(
        storage, environment, failing,
        RunChanges(RunStatus.FAILED, failure=_BOOM, add_failure=True),
        RunEventType.FAILED, {"attempt": 1, "failure": _BOOM.to_json()}, _LATER,
    )  # fmt: skip
    assert await _history(storage, environment, "f") == [_started(failing, LEASE, NOW), failed]

    spent = await _claim(storage, environment, "d", LEASE, NOW)
    dead = await _settle(
        storage, environment, spent,
        RunChanges(RunStatus.DEAD_LETTERED, failure=_BOOM, add_failure=True,
                   dead_letter_reason="max_attempts", dead_lettered_at=NOW),
        RunEventType.DEAD_LETTERED, {"attempt": 1, "reason": "max_attempts"}, NOW,
    )  # fmt: skip
    parked = await storage.get_run(environment, "d")
    assert parked is not None
    replayed = await _settle(
        storage, environment, parked,
        RunChanges(RunStatus.QUEUED, run_at=NOW, failure=_BOOM, replays=1, reset_failures=True),
        RunEventType.REPLAYED, {"reason": None, "actor": None}, NOW, leased=False,
    )  # fmt: skip
    again = await _claim(storage, environment, "d", _SECOND_LEASE, _LATER)
    succeeded = await _settle(
        storage, environment, again, RunChanges(RunStatus.SUCCEEDED),
        RunEventType.SUCCEEDED, {"attempt": 2}, _LATER,
    )  # fmt: skip
    assert await _history(storage, environment, "d") == [
        _started(spent, LEASE, NOW), dead, replayed, _started(again, _SECOND_LEASE, _LATER),
        succeeded,
    ]  # fmt: skip


async def test_a_success_not_of_the_rows_attempt_is_listed_as_written(
    storage: Storage, environment: str
) -> None:
    await create_named(storage, environment, "x", "y", "z")
    for run_id, data in (("x", {"attempt": 7}), ("y", {"attempt": 1, "note": "n"}), ("z", {})):
        run = await _claim(storage, environment, run_id, LEASE, NOW)
        succeeded = await _settle(
            storage, environment, run, RunChanges(RunStatus.SUCCEEDED),
            RunEventType.SUCCEEDED, data, _LATER,
        )  # fmt: skip
        assert await _history(storage, environment, run_id) == [
            _started(run, LEASE, NOW), succeeded,
        ]  # fmt: skip


async def test_a_run_created_leased_lists_its_start_and_success(
    storage: Storage, environment: str
) -> None:
    (outcome,) = await storage.create_runs(environment, [new_run("now")], NOW, lease=LEASE)
    run = outcome.run
    assert run.status is RunStatus.RUNNING and run.attempt == 1
    succeeded = await _settle(
        storage, environment, run, RunChanges(RunStatus.SUCCEEDED, result="done"),
        RunEventType.SUCCEEDED, {"attempt": 1}, _LATER,
    )  # fmt: skip
    assert await _history(storage, environment, "now") == [_started(run, LEASE, NOW), succeeded]


async def test_pruning_a_run_leaves_none_of_its_events(storage: Storage, environment: str) -> None:
    await create_named(storage, environment, "p")
    first = await _claim(storage, environment, "p", LEASE, NOW)
    changes = RunChanges(RunStatus.RETRYING, run_at=NOW, failure=_BOOM, add_failure=True)
    await _settle(storage, environment, first, changes, RunEventType.RETRY_SCHEDULED, {}, NOW)
    second = await _claim(storage, environment, "p", LEASE, NOW)
    await _settle(
        storage, environment, second, RunChanges(RunStatus.SUCCEEDED),
        RunEventType.SUCCEEDED, {"attempt": 2}, NOW,
    )  # fmt: skip
    assert len(await storage.list_run_events(environment, "p")) == 5
    pruned = await storage.prune_runs(environment, _LATER, [RunStatus.SUCCEEDED], 10)
    assert pruned == 1
    assert await storage.list_run_events(environment, "p") == []
    assert await storage.get_run(environment, "p") is None


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
