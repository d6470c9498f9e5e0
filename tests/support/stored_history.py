"""Runs with their history as the schema before implied starts and successes stored
them (every run.started and run.succeeded a row of its own), for the migration tests
of both drivers, and what the runtime must list for them after the upgrade."""

from __future__ import annotations

import json
from typing import Any

from runlane import Runlane, RunStatus
from runlane.ports.storage import NewEvent, RunChanges, Transition
from runlane.types.runs import RunEventType

#: 2026-01-01T00:00:00Z in microseconds, and a lease that outlives the test.
T0 = 1767225600000000
FAR = 4102444800000000


def _started(worker: str) -> dict[str, Any]:
    return {"attempt": 1, "worker_id": worker, "lease_expires_at": "2026-01-01T00:05:00+00:00"}


#: (id, status, attempt, event_sequence, lease_owner, lease_token, lease_expires_at):
#: one run that succeeded, one running, one waiting to be retried (due).
RUNS = [
    ("done", "succeeded", 1, 3, None, None, None),
    ("mid", "running", 1, 2, "w-old", "tok-mid", FAR),
    ("again", "retrying", 1, 3, None, None, None),
]
#: (run_id, sequence, type, occurred_at, data) of their stored events after run.created
#: (implied by first_run_at, as the schema already did).
EVENTS = [
    ("done", 2, "run.started", T0 + 1, _started("w-old")),
    ("done", 3, "run.succeeded", T0 + 2, {"attempt": 1}),
    ("mid", 2, "run.started", T0 + 1, _started("w-old")),
    ("again", 2, "run.started", T0 + 1, _started("w-old")),
    ("again", 3, "run.retry_scheduled", T0 + 2, {"attempt": 1}),
]

RUN_COLUMNS = (
    "environment, id, task_id, queue, status, payload, attempt, run_at, first_run_at, "
    "created_at, updated_at, event_sequence, source, lease_owner, lease_token, lease_expires_at"
)


#: Event rows each run holds once finished: the old ones only (the new are implied).
STORED_AFTER = {"done": 2, "mid": 1, "again": 2}


def run_rows(environment: str) -> list[tuple[Any, ...]]:
    """``RUNS`` as rows of :data:`RUN_COLUMNS`."""
    return [
        (
            environment,
            run_id,
            "noop",
            "main",
            status,
            "null",
            attempt,
            T0,
            T0,
            T0,
            T0,
            sequence,
            '{"type": "trigger"}',
            owner,
            token,
            expires,
        )
        for run_id, status, attempt, sequence, owner, token, expires in RUNS
    ]


def event_rows(environment: str) -> list[tuple[Any, ...]]:
    """``EVENTS`` as ``runlane_run_events`` rows, in column order."""
    return [
        (environment, run_id, sequence, type_, at, json.dumps(data))
        for run_id, sequence, type_, at, data in EVENTS
    ]


async def check_upgraded_history(rl: Runlane) -> None:
    """Finish the upgraded runs with this code and check that every run lists each
    event once: the stored ones as stored, the new ones implied."""
    stored = {(r, s): (t, d) for r, s, t, _, d in EVENTS}
    mid = await rl.runs.get("mid")
    assert mid.lease is not None
    finish = Transition(
        "mid",
        mid.event_sequence,
        RunChanges(RunStatus.SUCCEEDED),
        (NewEvent(RunEventType.SUCCEEDED, {"attempt": 1}),),
        lease_token=mid.lease.token,
    )
    assert await rl.storage.apply_transitions(rl.environment, [finish], rl.clock.now()) == [True]
    again = await rl.execute_next()
    assert again is not None and again.id == "again" and again.status is RunStatus.SUCCEEDED
    expected_types = {
        "done": ["run.created", "run.started", "run.succeeded"],
        "mid": ["run.created", "run.started", "run.succeeded"],
        "again": [
            "run.created", "run.started", "run.retry_scheduled", "run.started", "run.succeeded",
        ],
    }  # fmt: skip
    for run_id, types in expected_types.items():
        events = await rl.runs.events(run_id)
        assert [e.type.value for e in events] == types, run_id
        assert [e.sequence for e in events] == list(range(1, len(types) + 1))
        for event in events:
            if (run_id, event.sequence) in stored:
                assert (event.type.value, event.data) == stored[run_id, event.sequence]
    retried = await rl.runs.events("again")
    assert retried[3].data["attempt"] == 2 and retried[4].data == {"attempt": 2}
