"""Claiming runs under a lease, within durable queue capacity.

An unbounded queue's claim is one statement: lock the oldest due runs nobody
else holds (``FOR UPDATE SKIP LOCKED``), lease them, append ``run.started``.

A bounded queue's capacity is a count over other workers' leases, which a
statement's snapshot cannot see change; so deciding on it takes a transaction-
scoped advisory lock per queue first, and counts and claims in the next
statement (a fresh snapshot that sees every decision committed before it).
Workers skip a bounded queue whose lock another worker holds rather than wait:
that worker is filling the capacity anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from runlane.core.models import Run
from runlane.storage.postgres.sessions import AsyncSession, Queries
from runlane.storage.protocol import QueuePolicy
from runlane.storage.records import run_from_row, runs_from_rows


def compose_claims(q: Mapping[str, str]) -> dict[str, str]:
    """The claim statements: each candidate query followed by the shared leasing tail."""
    tail = q["lease_candidates"]
    return {
        name: f"WITH candidates AS ({q[candidates]}), {tail}"
        for name, candidates in (
            ("claim_due_runs", "due_candidates"),
            ("claim_bounded_runs", "bounded_candidates"),
            ("claim_run", "run_candidate"),
        )
    }


def capacity_lock_prefix(schema: str, environment: str) -> str:
    """Advisory lock names are this prefix plus the queue name."""
    return f"runlane.capacity:{schema}:{environment}:"


async def claim_due_runs(
    conn: psycopg.AsyncConnection[Any],
    q: Queries,
    lock_prefix: str,
    queues: Sequence[QueuePolicy],
    limit: int,
    params: dict[str, Any],
) -> list[Run]:
    """Claim up to ``limit`` due runs: bounded queues within capacity, then the others."""
    session = AsyncSession(conn)
    unbounded = list(dict.fromkeys(p.name for p in queues if p.concurrency_limit is None))
    limits = {p.name: p.concurrency_limit for p in queues if p.concurrency_limit is not None}
    if not limits:
        rows = await session.fetch(q["claim_due_runs"], {**params, "queues": unbounded})
        return _runs(rows)
    async with conn.transaction():
        locked = await session.fetch(
            q["lock_capacity"],
            {**params, "queues": sorted(limits), "wait": False, "lock_prefix": lock_prefix},
        )
        rows = []
        if locked:
            names = [row["name"] for row in locked]
            rows = await session.fetch(
                q["claim_bounded_runs"],
                {**params, "queues": names, "limits": [limits[n] for n in names]},
            )
        if unbounded and len(rows) < limit:
            rows += await session.fetch(
                q["claim_due_runs"],
                {**params, "queues": unbounded, "limit": limit - len(rows)},
            )
    return _runs(rows)


async def claim_run(
    conn: psycopg.AsyncConnection[Any],
    q: Queries,
    lock_prefix: str,
    queue: QueuePolicy | None,
    params: dict[str, Any],
) -> Run | None:
    """Claim one run if it is claimable, due and, for a bounded ``queue``, within capacity."""
    session = AsyncSession(conn)
    if queue is None or queue.concurrency_limit is None:
        rows = await session.fetch(q["claim_run"], params)
        return run_from_row(rows[0]) if rows else None
    async with conn.transaction():
        current = await session.fetch(q["get_run"], params)
        if not current:
            return None
        run_queue, key = current[0]["queue"], current[0]["concurrency_key"]
        await session.fetch(
            q["lock_capacity"],
            {**params, "queues": [run_queue], "wait": True, "lock_prefix": lock_prefix},
        )
        (occupied,) = await session.fetch(
            q["occupied_capacity"], {**params, "queue": run_queue, "concurrency_key": key}
        )
        if occupied["n"] >= queue.concurrency_limit:
            return None
        rows = await session.fetch(q["claim_run"], params)
    return run_from_row(rows[0]) if rows else None


def _runs(rows: Sequence[Any]) -> list[Run]:
    return sorted(runs_from_rows(rows), key=lambda run: (run.run_at, run.id))
