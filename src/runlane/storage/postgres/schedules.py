"""Schedule state and occurrences: each (schedule, slot) becomes at most one run.

The occurrence row's primary key is the deterministic occurrence id. Ticks that
race for one slot serialise on it (``INSERT ... ON CONFLICT DO NOTHING`` waits
for the other insert to commit) and only the first creates the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runlane.ports.storage import ScheduleOccurrence
from runlane.storage.postgres.creation import create_keyed_run
from runlane.storage.postgres.params import creation_batch
from runlane.storage.postgres.sessions import AsyncSession, DriverConnection, Queries, Session
from runlane.storage.sql.schedules import occurrence_scope
from runlane.types.runs import Run


async def materialize_occurrences(
    session: Session,
    q: Queries,
    environment: str,
    occurrences: Sequence[ScheduleOccurrence],
    now_us: int,
) -> list[Run]:
    """Claim each occurrence, move its schedule forward, create the runs of those claimed."""
    batch = creation_batch(environment, [o.run for o in occurrences], now_us, None)
    created: list[Run] = []
    for index, occurrence in enumerate(occurrences):
        scope = occurrence_scope(environment, occurrence, now_us)
        claimed = await session.fetch(
            q["claim_schedule_occurrence"], {**scope, "run_id": occurrence.run.id}
        )
        await session.fetch(q["advance_schedule"], scope)
        if not claimed:
            continue
        outcome = await create_keyed_run(session, q, batch, index)
        if outcome.created:
            created.append(outcome.run)
    return created


async def mark_seen(q: Queries, params: list[dict[str, Any]], conn: DriverConnection) -> None:
    """Record the first-seen point of each schedule in ``params`` that has none."""
    async with conn.transaction(), conn.cursor() as cur:
        await cur.executemany(q["mark_schedule_seen"], params)


async def materialize(
    q: Queries,
    environment: str,
    occurrences: Sequence[ScheduleOccurrence],
    now_us: int,
    conn: DriverConnection,
) -> list[Run]:
    """:func:`materialize_occurrences` in one transaction on the driver's ``conn``."""
    async with conn.transaction():
        return await materialize_occurrences(
            AsyncSession(conn), q, environment, occurrences, now_us
        )
