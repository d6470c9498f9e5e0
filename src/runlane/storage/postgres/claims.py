"""Claiming runs under a lease, within durable queue capacity.

An unbounded queue's claim is one statement: lock the oldest due runs nobody
else holds (``FOR UPDATE SKIP LOCKED``), lease them, append ``run.started``.

A bounded queue's capacity is a count over other workers' leases, which a
statement's snapshot cannot see change; so deciding on it takes a transaction-
scoped advisory lock per queue first, and counts and claims in the next
statement (a fresh snapshot that sees every decision committed before it).
Workers skip a bounded queue whose lock another worker holds rather than wait:
that worker is filling the capacity anyway.

A busy worker settles finished attempts and claims again in one transaction
(:func:`apply_and_claim`); on unbounded queues all of it goes in one pipelined
round trip with one commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import Column, pq
from psycopg.rows import tuple_row

from runlane.core.capacity import has_capacity
from runlane.storage.postgres.sessions import AsyncSession, Queries
from runlane.storage.protocol import QueuePolicy
from runlane.storage.sql.claiming import claim_order, split_by_capacity
from runlane.storage.sql.rows import run_from_row, runs_from_rows
from runlane.types.runs import Run


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
    limits, unbounded = split_by_capacity(queues)
    if not limits:
        # Pipelined with a generic plan, as a claim riding on settles is: planning the
        # claim afresh (PostgreSQL keeps choosing custom plans for it) costs several
        # times what running it does, on the path from a trigger to its attempt.
        return (await _pipelined(conn, q, [], unbounded, params))[1]
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
        if not has_capacity(occupied["n"], queue.concurrency_limit):
            return None
        rows = await session.fetch(q["claim_run"], params)
    return run_from_row(rows[0]) if rows else None


async def apply_and_claim(
    conn: psycopg.AsyncConnection[Any],
    q: Queries,
    lock_prefix: str,
    rounds: Sequence[dict[str, Any]],
    queues: Sequence[QueuePolicy],
    limit: int,
    params: dict[str, Any],
) -> tuple[list[set[str]], list[Run]]:
    """In one transaction: ``apply_transitions`` once per round (the ids each applied),
    then claim up to ``limit`` due runs as :func:`claim_due_runs` does, seeing them."""
    if any(p.concurrency_limit is not None for p in queues):
        # Bounded queues decide on the advisory locks' answer: statement by statement.
        session = AsyncSession(conn)
        async with conn.transaction():
            applied = [
                {row["id"] for row in await session.fetch(q["apply_transitions"], round_params)}
                for round_params in rounds
            ]
            claimed = await claim_due_runs(conn, q, lock_prefix, queues, limit, params)
        return applied, claimed
    return await _pipelined(conn, q, rounds, list(dict.fromkeys(p.name for p in queues)), params)


async def _pipelined(
    conn: psycopg.AsyncConnection[Any],
    q: Queries,
    rounds: Sequence[dict[str, Any]],
    unbounded: list[str],
    params: dict[str, Any],
) -> tuple[list[set[str]], list[Run]]:
    """``rounds`` of transitions, then a claim on ``unbounded`` queues: one transaction
    in one round trip, statements prepared with generic plans."""
    cursors = [conn.cursor(row_factory=tuple_row) for _ in range(len(rounds) + 1)]
    try:
        # BEGIN, the rounds, the claim and COMMIT go out together, ended by the pipeline's
        # one Sync: a single round trip. (psycopg's transaction() in a pipeline syncs after
        # BEGIN and before COMMIT, three round trips.) A failed statement makes the server
        # skip the rest, COMMIT included, so the transaction rolls back as a whole; the
        # error surfaces at the Sync, and the block below ends the failed transaction.
        async with conn.pipeline():
            await conn.execute("BEGIN")
            # Generic plans from the first execution: the statements are prepared on first
            # use, and planning the claim afresh each time costs more than running it.
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            for cur, round_params in zip(cursors, rounds, strict=False):
                await cur.execute(q["apply_transitions"], round_params, prepare=True)
            await cursors[-1].execute(
                q["claim_due_runs"], {**params, "queues": unbounded}, prepare=True
            )
            await conn.execute("COMMIT")
        # Each round returns the ids it applied, the claim whole runs.
        applied = [{row[0] for row in await cur.fetchall()} for cur in cursors[:-1]]
        claim = cursors[-1]
        rows = await claim.fetchall()
        description = claim.description
    except BaseException:
        # Failed on the server (or interrupted before COMMIT went out): roll back, so
        # nothing of it lands and the connection goes back to the pool idle.
        if conn.info.transaction_status in _IN_TRANSACTION:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise
    finally:
        for cur in cursors:
            await cur.close()
    return applied, _runs(rows, description)


_IN_TRANSACTION = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)


def _runs(rows: Sequence[Any], description: Sequence[Column] | None = None) -> list[Run]:
    """Runs from dict rows, or from tuple rows with their cursor's ``description``."""
    columns = None if description is None else [column.name for column in description]
    return sorted(runs_from_rows(rows, columns), key=claim_order)
