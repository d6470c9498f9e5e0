"""Dependencies and groups: creating waiting runs with their edges, the safety net,
and groups. The release of waiting runs is done by the triggers of migration 013, in
whatever write settles a dependency."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from runlane.model.dependencies import (
    SETTLED_STATUSES,
    missing_dependencies,
    unsettled_and_failed,
)
from runlane.ports.storage import CreateOutcome, NewRun, NewWaitingRun
from runlane.storage.postgres.creation import create_keyed_run
from runlane.storage.postgres.params import creation_batch
from runlane.storage.postgres.sessions import AsyncSession, DriverConnection, Queries, Session
from runlane.storage.sql.rows import run_from_row
from runlane.types.clock import from_micros
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.records import GroupStatus, NewGroup
from runlane.types.runs import Run, RunStatus


async def create_runs_with_dependencies(
    session: Session,
    q: Queries,
    environment: str,
    runs: Sequence[NewRun],
    now_us: int,
    outbox_claimed_until: int | None,
) -> list[CreateOutcome]:
    """Create ``runs``, some with ``after``, one at a time; the caller holds the
    transaction."""
    outcomes = []
    for new in runs:
        if isinstance(new, NewWaitingRun):
            outcomes.append(await create_waiting_run(session, q, environment, new, now_us))
        else:
            batch = creation_batch(environment, [new], now_us, None, outbox_claimed_until)
            outcomes.append(await create_keyed_run(session, q, batch, 0))
    return outcomes


async def create_waiting_run(
    session: Session, q: Queries, environment: str, new: NewWaitingRun, now_us: int
) -> CreateOutcome:
    """Create ``new`` (with ``after``) as a waiting run with its edges; a run whose
    dependencies have all finished is released or cancelled before this returns.
    Unknown dependencies raise ``RUN_NOT_FOUND`` (the caller's transaction then
    writes nothing)."""
    scope = {"environment": environment, "ids": list(new.after)}
    statuses = {
        row["id"]: RunStatus(row["status"]) for row in await session.fetch(
            q["mark_dependencies"], scope
        )
    }  # fmt: skip
    error = missing_dependencies(new.after, statuses)
    if error is not None:
        raise error
    # The delivery request, if any, is written when the run is released.
    waiting = dataclasses.replace(new, status=RunStatus.WAITING, request_delivery=False)
    outcome = await create_keyed_run(
        session, q, creation_batch(environment, [waiting], now_us, None), 0
    )
    if not outcome.created:
        return outcome
    pending, failed = unsettled_and_failed(new.after, statuses)
    await session.fetch(
        q["insert_dependency_edges"],
        {
            "environment": environment,
            "dependent_id": new.id,
            "positions": list(range(len(new.after))),
            "dependency_ids": list(new.after),
            "resolved": [statuses[run_id] in SETTLED_STATUSES for run_id in new.after],
        },
    )
    params = {
        "environment": environment,
        "id": new.id,
        "pending": pending,
        "failed_dependency": failed,
        "on_failure": new.on_failure,
        "deliver_when_due": new.request_delivery,
        "now": now_us,
    }
    await session.fetch(q["insert_waiting_run"], params)
    await session.fetch(q["release_if_met"], params)
    (row,) = await session.fetch(q["get_run"], {"environment": environment, "id": new.id})
    return CreateOutcome(run_from_row(row), created=True)


async def create_group(
    q: Queries,
    environment: str,
    group: NewGroup,
    members: Sequence[NewRun],
    now_us: int,
    conn: DriverConnection,
    *,
    outbox_claimed_until: int | None = None,
) -> tuple[list[CreateOutcome], Run | None]:
    """Members, group row and callback in one transaction on ``conn``; the members'
    delivery requests are claimed until ``outbox_claimed_until`` if given."""
    async with conn.transaction():
        session = AsyncSession(conn)
        batch = creation_batch(environment, members, now_us, None, outbox_claimed_until)
        inserted = await session.fetch(q["insert_runs"], batch.insert_params())
        if len(inserted) != len(members):
            raise RunlaneError(
                ErrorCode.STORAGE_CONFLICT,
                "the group's members could not be created; trigger the group again.",
                retryable=True,
            )
        outcomes = batch.outcomes()
        created = [outcome.run for outcome in outcomes]
        await session.fetch(
            q["join_group"],
            {"environment": environment, "group_id": group.id, "ids": [r.id for r in created]},
        )
        callback = None
        if group.callback is not None:
            outcome = await create_waiting_run(session, q, environment, group.callback, now_us)
            callback = outcome.run
        await session.fetch(
            q["insert_group"],
            {
                "environment": environment,
                "id": group.id,
                "task_id": group.task_id,
                "total": len(members),
                "callback_id": callback.id if callback is not None else None,
                "now": now_us,
            },
        )
    return outcomes, callback


async def get_group(
    q: Queries, environment: str, group_id: str, conn: DriverConnection
) -> GroupStatus | None:
    """A group with its members counted per status, or ``None``."""
    session = AsyncSession(conn)
    scope = {"environment": environment, "id": group_id, "group_id": group_id}
    rows = await session.fetch(q["get_group"], scope)
    if not rows:
        return None
    row = rows[0]
    counts = {
        RunStatus(count["status"]): int(count["n"])
        for count in await session.fetch(q["group_counts"], scope)
    }
    return GroupStatus(
        id=row["id"],
        task_id=row["task_id"],
        total=row["total"],
        callback_id=row["callback_id"],
        created_at=from_micros(row["created_at"]),
        counts=counts,
    )
