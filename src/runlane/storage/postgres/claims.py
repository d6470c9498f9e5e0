"""Claiming runs under a lease, within durable queue capacity.

An unbounded queue's claim is one statement: lock the oldest due runs nobody
else holds (``FOR UPDATE SKIP LOCKED``), lease them, append ``run.started``. It
calls a PL/pgSQL function (migrations 009, 010) that takes the key locks (below) and then
claims in a fresh snapshot, so an idle worker's claim goes out alone, in autocommit.

A bounded queue's capacity is a count over other workers' leases, which a
statement's snapshot cannot see change; so deciding on it takes a transaction-
scoped advisory lock per queue first, and counts and claims in the next
statement (a fresh snapshot that sees every decision committed before it).
Workers skip a bounded queue whose lock another worker holds rather than wait:
that worker is filling the capacity anyway. A rate-limited queue's lock is waited
for by a claim that holds nothing else yet (the holder may have looked before a
token came, see :func:`_claim_with_tokens`).

Deliveries with a partition key (EXCLUSIVE and ORDERED, contract 5.7) are
claimed the same way for the same reason: a key's rules read other workers'
leases, so every claim first takes the advisory locks of the keys it may claim
(``lock_claimable_keys`` tries, never waits; ``claim_run`` waits for its one key,
holding nothing else), then claims in a later statement of the same transaction.
Publishes take the same locks. Task runs have no key: for them the key locks'
statement finds nothing and the claim skips its keyed part.

A busy worker settles finished attempts and claims again in one transaction
(:func:`apply_and_claim`); on unbounded queues all of it goes in one pipelined
round trip with one commit.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from runlane.model.capacity import has_capacity
from runlane.model.rate_limiting import (
    partition_scan,
    tat_after,
    token_time,
    tokens_available,
    tolerance,
)
from runlane.ports.storage import QueuePolicy
from runlane.storage.postgres.bare import BareStatement
from runlane.storage.postgres.sessions import (
    AsyncSession,
    DriverConnection,
    Queries,
    column_names,
)
from runlane.storage.postgres.transitions import settle_statement
from runlane.storage.sql.claiming import (
    WHOLE_QUEUE,
    claim_order,
    split_by_capacity,
    split_rate_limited,
    widest_priority_window,
)
from runlane.storage.sql.rows import run_from_row, runs_from_rows
from runlane.types.priorities import claim_horizon
from runlane.types.runs import Run


def capacity_lock_prefix(schema: str, environment: str) -> str:
    """Advisory lock names are this prefix plus the queue name."""
    return f"runlane.capacity:{schema}:{environment}:"


async def claim_due_runs(
    conn: DriverConnection,
    q: Queries,
    lock_prefix: str,
    queues: Sequence[QueuePolicy],
    limit: int,
    params: dict[str, Any],
    adopted: set[str] | None = None,
    *,
    holding_nothing: bool = True,
) -> list[Run]:
    """Claim up to ``limit`` due runs: rate-limited queues within their tokens, bounded
    queues within capacity, then the others. ``adopted``: the queues limited per key
    this driver has prepared (see :func:`_adopt_unkeyed_runs`). ``holding_nothing``:
    the claim is its transaction's first statement, so it may wait for the
    rate-limited queues' locks (see :func:`_claim_with_tokens`)."""
    session = AsyncSession(conn)
    rated, others = split_rate_limited(queues)
    limits, unbounded = split_by_capacity(others)
    if rated and adopted is not None:
        await _adopt_unkeyed_runs(conn, session, q, rated, params, adopted)
    horizon = claim_horizon(params["now"], widest_priority_window(others))
    if not limits and not rated:
        # One statement in autocommit (the function takes the key locks, then claims
        # in a fresh snapshot): nothing else travels with an idle worker's claim.
        (cur,) = conn.cursors(1)
        await cur.execute(
            q["claim_due_runs"],
            {**params, "queues": unbounded, "horizon": horizon},
            prepare=True,
        )
        return _runs(await cur.fetchall(), column_names(cur))
    async with conn.transaction():
        rows = await _claim_with_tokens(
            session, q, lock_prefix, rated, limit, params, wait=holding_nothing
        )
        names = []
        if limits and len(rows) < limit:
            names = await lock_capacity(
                session, q, lock_prefix, sorted(limits), params, horizon=horizon
            )
        if names:
            # The bounded queues' keys only: the unbounded claim below takes its own.
            await session.fetch(q["lock_claimable_keys"], {**params, "queues": names})
            rows += await session.fetch(
                q["claim_bounded_runs"],
                {
                    **params,
                    "queues": names,
                    "limits": [limits[n] for n in names],
                    "limit": limit - len(rows),
                    "horizon": horizon,
                },
            )
        if unbounded and len(rows) < limit:
            rows += await session.fetch(
                q["claim_due_runs"],
                {
                    **params,
                    "queues": unbounded,
                    "horizon": horizon,
                    "limit": limit - len(rows),
                },
            )
    return _runs(rows)


async def lock_capacity(
    session: AsyncSession,
    q: Queries,
    lock_prefix: str,
    names: Sequence[str],
    params: dict[str, Any],
    *,
    horizon: int | None = None,
) -> list[str]:
    """Take the capacity locks of bounded queues ``names`` (sorted) until the
    transaction ends, and return the names locked: each waited for, or with a
    ``horizon`` (the claim horizon of the queues' widest priority window) only those
    no other process holds and with a due run up to it."""
    wait = horizon is None
    rows = await session.fetch(
        q["lock_capacity"],
        {
            **params,
            "queues": names,
            "wait": wait,
            "lock_prefix": lock_prefix,
            # Not read when waiting; a bigint all the same, as the statement is prepared.
            "horizon": params["now"] if horizon is None else horizon,
        },
    )
    return [row["name"] for row in rows]


async def _claim_with_tokens(
    session: AsyncSession,
    q: Queries,
    lock_prefix: str,
    rated: Sequence[QueuePolicy],
    limit: int,
    params: dict[str, Any],
    *,
    wait: bool,
) -> list[Any]:
    """Rate-limited queues, in the caller's transaction: under each queue's capacity
    lock, claim up to the tokens its partition has and take one per run claimed.

    A claim that holds nothing yet (``wait``) waits for the locks, in name order: the
    claimer holding one may have looked before a token came, and a worker that skipped
    the queue would sleep until the next token, losing this one for good (burst 1).
    The wait is a claim's length (one round trip for a queue limited per key). A claim
    after a settle's writes (row locks held) skips a queue another claimer holds."""
    if not rated:
        return []
    horizon = None if wait else claim_horizon(params["now"], widest_priority_window(rated))
    names = sorted(p.name for p in rated)
    held = set(await lock_capacity(session, q, lock_prefix, names, params, horizon=horizon))
    rows: list[Any] = []
    now = params["now"]
    for policy in rated:
        if len(rows) >= limit:
            break
        if policy.name not in held:
            continue
        if policy.rate_keyed:
            rows += await _claim_keyed(session, q, policy, limit - len(rows), params)
            continue
        assert policy.rate_limit is not None
        state = {"environment": params["environment"], "queue": policy.name}
        state["rate_key"] = WHOLE_QUEUE
        found = await session.fetch(q["get_rate_limit_state"], state)
        tat = found[0]["tat"] if found else None
        take = min(limit - len(rows), tokens_available(policy.rate_limit, tat, now))
        if take < 1:
            continue
        one = {
            **params,
            "queues": [policy.name],
            "horizon": claim_horizon(now, policy.priority_window),
            "limit": take,
        }
        if policy.concurrency_limit is not None:
            await session.fetch(q["lock_claimable_keys"], one)
            claimed = await session.fetch(
                q["claim_bounded_runs"], {**one, "limits": [policy.concurrency_limit]}
            )
        else:
            claimed = await session.fetch(q["claim_due_runs"], one)
        if claimed:
            new_tat = tat_after(policy.rate_limit, tat, now, len(claimed))
            await session.fetch(q["set_rate_limit_state"], {**state, "tat": new_tat})
        rows += claimed
    return rows


async def _adopt_unkeyed_runs(
    conn: DriverConnection,
    session: AsyncSession,
    q: Queries,
    rated: Sequence[QueuePolicy],
    params: dict[str, Any],
    adopted: set[str],
) -> None:
    """Once per process and queue limited per key, in a transaction of its own (the
    callers adopt outside any transaction of theirs, so that a queue is marked adopted
    only once the adoption is committed): its waiting runs without a rate key (written
    before the queue was keyed) join its unkeyed partition."""
    for policy in rated:
        key = f"{params['environment']}\n{policy.name}"
        if policy.rate_keyed and key not in adopted:
            assert policy.rate_limit is not None
            base = {"environment": params["environment"], "queue": policy.name}
            async with conn.transaction():
                await session.fetch(q["adopt_unkeyed_runs"], base)
                # Each partition's next token as this limit reads it (a new deploy may
                # have changed it): when the claims look, not what they allow.
                await session.fetch(
                    q["retime_rate_partitions"],
                    {**base, "tolerance": tolerance(policy.rate_limit)},
                )
            adopted.add(key)


async def _claim_keyed(
    session: AsyncSession,
    q: Queries,
    policy: QueuePolicy,
    limit: int,
    params: dict[str, Any],
) -> list[Any]:
    """A queue limited per key, under its capacity lock, in one round trip: the key
    locks of the deliveries it may start, then one statement that claims the first due
    runs of every partition with a token (an index range, however many others are
    exhausted), in claim order within its tokens, and settles the partitions it read.
    With burst 1 a claim's length is time its keys' next tokens wait for the lock."""
    rate = policy.rate_limit
    assert rate is not None
    now = params["now"]
    one = {
        **params,
        "queue": policy.name,
        "horizon": claim_horizon(now, policy.priority_window),
        "limit": limit,
        "scan": partition_scan(limit),
        "interval": rate.interval_micros,
        "burst": rate.burst,
        "tolerance": tolerance(rate),
        "concurrency_limit": policy.concurrency_limit,
    }
    conn = session.conn
    lock_keys = _numbered(q["lock_rate_keyed_keys"])
    claim_runs = _numbered(q["claim_rate_keyed_runs"])
    async with (
        psycopg.AsyncRawCursor(conn) as locks,
        psycopg.AsyncRawCursor(conn, row_factory=dict_row) as claim,
    ):
        # Both statements go out together, read back at the pipeline's one Sync. The key
        # locks come first, so that the claim's snapshot (the next statement's) sees
        # every decision on those keys committed before them.
        async with conn.pipeline():
            await locks.execute(lock_keys.text, [one[n] for n in lock_keys.params], prepare=True)
            await claim.execute(claim_runs.text, [one[n] for n in claim_runs.params], prepare=True)
        return await claim.fetchall()


@functools.lru_cache(maxsize=16)
def _numbered(query: str) -> BareStatement:
    """``query`` with ``$n`` placeholders, converted once: the keyed claim is longer
    than the 4,096 bytes of a statement whose conversion psycopg caches, so a cursor
    would convert it afresh on every claim (a raw cursor takes ``$n`` as it is)."""
    return BareStatement.from_query("rate_keyed", query)


async def claim_run(
    conn: DriverConnection,
    q: Queries,
    lock_prefix: str,
    queue: QueuePolicy | None,
    params: dict[str, Any],
) -> Run | None:
    """Claim one run if it is claimable, due, allowed by its key and, for a bounded
    ``queue``, within capacity."""
    session = AsyncSession(conn)
    if queue is not None and queue.rate_limit is not None:
        return await _claim_run_with_token(session, conn, q, lock_prefix, queue, params)
    if queue is None or queue.concurrency_limit is None:
        results = await _in_one_round_trip(
            conn, [(q["lock_run_key"], params)], q["claim_run"], params
        )
        runs = _runs(results.rows, results.columns)
        return runs[0] if runs else None
    async with conn.transaction():
        current = await session.fetch(q["get_run"], params)
        if not current:
            return None
        run_queue, key = current[0]["queue"], current[0]["concurrency_key"]
        # The key lock before the capacity lock, as publishes (which take only key locks)
        # and every other waiter order them.
        await session.fetch(q["lock_run_key"], params)
        await lock_capacity(session, q, lock_prefix, [run_queue], params)
        (occupied,) = await session.fetch(
            q["occupied_capacity"], {**params, "queue": run_queue, "concurrency_key": key}
        )
        if not has_capacity(occupied["n"], queue.concurrency_limit):
            return None
        rows = await session.fetch(q["claim_run"], params)
    return run_from_row(rows[0]) if rows else None


async def _claim_run_with_token(
    session: AsyncSession,
    conn: DriverConnection,
    q: Queries,
    lock_prefix: str,
    queue: QueuePolicy,
    params: dict[str, Any],
) -> Run | None:
    """``claim_run`` on a rate-limited queue: under the queue's capacity lock (waited
    for, after the run's key lock as every waiter orders them), only with a token of
    its partition, which it takes; within capacity on a bounded queue too."""
    assert queue.rate_limit is not None
    async with conn.transaction():
        current = await session.fetch(q["get_run"], params)
        if not current:
            return None
        await session.fetch(q["lock_run_key"], params)
        await lock_capacity(session, q, lock_prefix, [queue.name], params)
        state = {"environment": params["environment"], "queue": queue.name}
        key = current[0]["rate_key"] if queue.rate_keyed else None
        state["rate_key"] = WHOLE_QUEUE if key is None else key
        found = await session.fetch(q["get_rate_partition"], state)
        tat = found[0]["tat"] if found else None
        if tokens_available(queue.rate_limit, tat, params["now"]) < 1:
            return None
        if queue.concurrency_limit is not None:
            (occupied,) = await session.fetch(
                q["occupied_capacity"],
                {
                    **params,
                    "queue": queue.name,
                    "concurrency_key": current[0]["concurrency_key"],
                },
            )
            if not has_capacity(occupied["n"], queue.concurrency_limit):
                return None
        rows = await session.fetch(q["claim_run"], params)
        if rows:
            new_tat = tat_after(queue.rate_limit, tat, params["now"], 1)
            if not queue.rate_keyed or not found:
                await session.fetch(q["set_rate_limit_state"], {**state, "tat": new_tat})
            if queue.rate_keyed:
                # A key's partition row (its runs' trigger writes it) takes the token
                # with the rest of the settle: written once.
                await session.fetch(
                    q["settle_rate_partition"],
                    {
                        **state,
                        "tat": new_tat,
                        "token_at": token_time(queue.rate_limit, new_tat),
                        "version": found[0]["version"] if found else 0,
                    },
                )
    return run_from_row(rows[0]) if rows else None


async def apply_and_claim(
    conn: DriverConnection,
    q: Queries,
    lock_prefix: str,
    rounds: Sequence[dict[str, Any]],
    queues: Sequence[QueuePolicy],
    limit: int,
    params: dict[str, Any],
    adopted: set[str] | None = None,
) -> tuple[list[set[str]], list[Run]]:
    """In one transaction: ``apply_transitions`` once per round (the ids each applied),
    then claim up to ``limit`` due runs as :func:`claim_due_runs` does, seeing them."""
    if _decides_under_locks(queues):
        # Bounded and rate-limited queues decide on the advisory locks' answer:
        # statement by statement.
        session = AsyncSession(conn)
        rated = split_rate_limited(queues)[0]
        if rated and adopted is not None:
            # Before the settles' transaction, in one of its own: inside it the
            # adoption would be a savepoint that a retried transaction rolls back
            # after the queue was already marked as adopted.
            await _adopt_unkeyed_runs(conn, session, q, rated, params, adopted)
        async with conn.transaction():
            applied = [
                {
                    row["id"]
                    for row in await session.fetch(settle_statement(q, round_params), round_params)
                }
                for round_params in rounds
            ]
            claimed = await claim_due_runs(
                conn, q, lock_prefix, queues, limit, params, None, holding_nothing=False
            )
        return applied, claimed
    unbounded = list(dict.fromkeys(p.name for p in queues))
    claim_params = {
        **params,
        "queues": unbounded,
        "horizon": claim_horizon(params["now"], widest_priority_window(queues)),
    }
    statements = [(settle_statement(q, round_params), round_params) for round_params in rounds]
    results = await _in_one_round_trip(conn, statements, q["claim_due_runs"], claim_params)
    # Each round returns the ids it applied, the claim (which takes the key locks
    # itself, then claims in a fresh snapshot that sees the rounds) whole runs.
    applied = [{row[0] for row in rows} for rows in results.before]
    return applied, _runs(results.rows, results.columns)


def _decides_under_locks(queues: Sequence[QueuePolicy]) -> bool:
    """Whether a bounded or rate-limited queue is among ``queues`` (a plain loop: this
    runs with every settle that claims)."""
    for policy in queues:
        if policy.concurrency_limit is not None or policy.rate_limit is not None:
            return True
    return False


@dataclass(frozen=True, slots=True)
class _Results:
    #: The rows of each statement before the last, as tuples.
    before: list[list[Any]]
    #: The last statement's rows, as tuples, and their columns.
    rows: list[Any]
    columns: list[str] | None


async def _in_one_round_trip(
    conn: DriverConnection,
    statements: Sequence[tuple[str, dict[str, Any]]],
    last: str,
    last_params: dict[str, Any],
) -> _Results:
    """Run ``statements`` then ``last`` in one transaction and one round trip."""
    # The connection's kept cursors: BEGIN, the plan mode, each statement, then COMMIT.
    begin, plan_mode, *cursors, commit = conn.cursors(len(statements) + 4)
    try:
        # BEGIN, the statements and COMMIT go out together, ended by the pipeline's one
        # Sync: a single round trip. (psycopg's transaction() in a pipeline syncs after
        # BEGIN and before COMMIT, three round trips.) Each statement still takes its own
        # snapshot, so the claim sees the locks and transitions before it. A failed
        # statement makes the server skip the rest, COMMIT included, so the transaction
        # rolls back as a whole; the error surfaces at the Sync, and the block below ends
        # the failed transaction.
        async with conn.pipeline():
            await begin.execute("BEGIN")
            # Generic plans from the first execution: the statements are prepared on first
            # use, and planning the claim afresh each time costs more than running it.
            await plan_mode.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            for cur, (query, query_params) in zip(cursors, statements, strict=False):
                await cur.execute(query, query_params, prepare=True)
            await cursors[-1].execute(last, last_params, prepare=True)
            await commit.execute("COMMIT")
        before = [await cur.fetchall() for cur in cursors[:-1]]
        final = cursors[-1]
        return _Results(before, await final.fetchall(), column_names(final))
    except BaseException:
        # Failed on the server (or interrupted before COMMIT went out): roll back, so
        # nothing of it lands and the connection goes back to the pool idle.
        if conn.info.transaction_status in _IN_TRANSACTION:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise


_IN_TRANSACTION = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)


def _runs(rows: Sequence[Any], columns: Sequence[str] | None = None) -> list[Run]:
    """Runs from dict rows, or from tuple rows with their result's ``columns``."""
    return sorted(runs_from_rows(rows, columns), key=claim_order)
