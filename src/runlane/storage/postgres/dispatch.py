"""Transport lanes: delivery requests, bounded-queue reservations and the outbox.

A due run gets one delivery request (an outbox row and ``run.delivery_requested``)
until it is claimed or changes state. On a bounded queue a request also reserves
capacity for the queue's reservation window, decided under the same per-queue
advisory lock as claims. Outbox rows are claimed with ``FOR UPDATE SKIP LOCKED``
so concurrent ticks publish each message once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from runlane.ports.storage import OutboxResult, QueuePolicy
from runlane.storage.postgres.claims import lock_capacity
from runlane.storage.postgres.sessions import AsyncSession, Queries
from runlane.storage.sql.encoding import dumps
from runlane.storage.sql.reservations import reserve
from runlane.types.clock import to_micros


async def request_due_deliveries(
    conn: psycopg.AsyncConnection[Any],
    q: Queries,
    lock_prefix: str,
    queues: Sequence[QueuePolicy],
    scope: dict[str, Any],
) -> int:
    """Request delivery of due runs without a request; bounded queues within capacity."""
    session = AsyncSession(conn)
    now_us: int = scope["now"]
    unbounded = [p.name for p in queues if p.concurrency_limit is None]
    bounded = {p.name: p for p in queues if p.concurrency_limit is not None}
    async with conn.transaction():
        chosen: list[tuple[str, int | None]] = []
        if unbounded:
            rows = await session.fetch(q["undelivered_runs"], {**scope, "queues": unbounded})
            chosen += [(row["id"], None) for row in rows]
        if bounded:
            names = sorted(bounded)
            await lock_capacity(session, q, lock_prefix, names, scope)
            occupied = {
                (row["queue"], row["part"]): row["n"]
                for row in await session.fetch(
                    q["occupied_by_partition"], {**scope, "queues": names}
                )
            }
            rows = await session.fetch(q["undelivered_runs"], {**scope, "queues": names})
            chosen += reserve(rows, bounded, occupied, now_us)
        if not chosen:
            return 0
        (requested,) = await session.fetch(
            q["request_deliveries"],
            {
                **scope,
                "ids": [run_id for run_id, _ in chosen],
                "reserved_untils": [until for _, until in chosen],
            },
        )
    return int(requested["requested"])


def settle_params(environment: str, results: Sequence[OutboxResult], now_us: int) -> dict[str, Any]:
    """Parameters of ``settle_outbox``: one row per publish outcome."""
    return {
        "environment": environment,
        "now": now_us,
        "ids": [r.id for r in results],
        "published": [r.published for r in results],
        "provider_message_ids": [r.provider_message_id for r in results],
        "retry_ats": [
            (to_micros(r.retry_at) if r.retry_at is not None else now_us) for r in results
        ],
        "errors": [dumps(r.error or {}) for r in results],
    }
