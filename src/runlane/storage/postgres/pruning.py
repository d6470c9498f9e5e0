"""Pruning: deleting finished runs with their history, ownership, outbox and
schedule occurrence rows (one statement, ``prune_runs``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runlane.storage.postgres.sessions import AsyncSession, DriverConnection, Queries
from runlane.types.clock import to_micros
from runlane.types.runs import RunStatus


def prune_params(
    environment: str, older_than: datetime, statuses: Sequence[RunStatus], limit: int
) -> dict[str, Any]:
    """Parameters of ``prune_runs``: which finished runs, last updated before when, how many."""
    return {
        "environment": environment,
        "older_than": to_micros(older_than),
        "statuses": [s.value for s in statuses],
        "limit": limit,
    }


async def prune_runs(q: Queries, params: dict[str, Any], conn: DriverConnection) -> int:
    """Delete the runs ``params`` choose and the messages left without runs, in one
    transaction; how many runs went."""
    async with conn.transaction():
        session = AsyncSession(conn)
        rows = await session.fetch(q["prune_runs"], params)
        await session.fetch(q["prune_messages"], params)
    return int(rows[0]["pruned"]) if rows else 0
