"""Transport lanes: delivery requests, bounded-queue reservations and the outbox.

A due run gets one delivery request (an outbox row and ``run.delivery_requested``)
until it is claimed or changes state. On a bounded queue a request also reserves
capacity for the queue's reservation window; writes hold SQLite's write lock, so
the occupied counts cannot change while the requests are decided.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from runlane.ports.storage import OutboxMessage, OutboxResult, QueuePolicy
from runlane.storage.sql.encoding import dumps, micros_or_none
from runlane.storage.sql.reservations import reserve
from runlane.storage.sql.rows import run_from_row
from runlane.storage.sqlite.params import delivery_event
from runlane.storage.sqlite.queries import QUERIES
from runlane.types.clock import from_micros
from runlane.types.runs import Run


def request_due_deliveries(
    cur: sqlite3.Cursor, environment: str, queues: Sequence[QueuePolicy], now_us: int, limit: int
) -> int:
    """Delivery requests for due runs without one; bounded queues within capacity."""
    scope = {"environment": environment, "now": now_us, "limit": limit}
    unbounded = [q.name for q in queues if q.concurrency_limit is None]
    bounded = {q.name: q for q in queues if q.concurrency_limit is not None}
    rows = cur.execute(
        QUERIES["undelivered_runs"], {**scope, "queues": json.dumps(unbounded)}
    ).fetchall()
    chosen: list[tuple[str, int | None]] = [(row["id"], None) for row in rows]
    if bounded:
        names = json.dumps(sorted(bounded))
        occupied = {
            (row["queue"], row["part"]): row["n"]
            for row in cur.execute(QUERIES["occupied_by_partition"], {**scope, "queues": names})
        }
        rows = cur.execute(QUERIES["undelivered_runs"], {**scope, "queues": names}).fetchall()
        chosen += reserve(rows, bounded, occupied, now_us)
    for run_id, reserved_until in chosen:
        marked = cur.execute(
            QUERIES["mark_delivery_requested"],
            {
                "environment": environment,
                "id": run_id,
                "now": now_us,
                "reserved_until": reserved_until,
            },
        ).fetchone()
        run = run_from_row(marked)
        cur.execute(
            QUERIES["insert_event"],
            delivery_event(environment, run, run.event_sequence, now_us),
        )
        insert_outbox(cur, environment, run, run.event_sequence, now_us, None)
    return len(chosen)


def insert_outbox(
    cur: sqlite3.Cursor,
    environment: str,
    run: Run,
    sequence: int,
    now_us: int,
    claimed_until: int | None,
) -> OutboxMessage:
    """Write the outbox row of ``run``'s delivery request ``sequence``; already claimed
    by the caller until ``claimed_until`` if given."""
    message = OutboxMessage(
        id=f"{run.id}.{sequence}",
        run_id=run.id,
        queue=run.queue,
        requested_at=from_micros(now_us),
        trace_carrier=run.trace_carrier,
        attempts=0,
    )
    cur.execute(
        QUERIES["insert_outbox"],
        {
            "environment": environment,
            "id": message.id,
            "run_id": run.id,
            "queue": run.queue,
            "status": "claimed" if claimed_until is not None else "pending",
            "now": now_us,
            "claimed_until": claimed_until,
            "trace_carrier": dumps(run.trace_carrier) if run.trace_carrier else None,
        },
    )
    return message


def settle_params(
    environment: str, results: Sequence[OutboxResult], now_us: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Parameters of ``mark_outbox_published`` and of ``mark_outbox_failed``, one per result."""
    published = [
        {
            "environment": environment,
            "id": r.id,
            "now": now_us,
            "provider_message_id": r.provider_message_id,
        }
        for r in results
        if r.published
    ]
    failed = [
        {
            "environment": environment,
            "id": r.id,
            "retry_at": micros_or_none(r.retry_at) or now_us,
            "last_error": dumps(r.error or {}),
        }
        for r in results
        if not r.published
    ]
    return published, failed


def settle_outbox(
    cur: sqlite3.Cursor, published: list[dict[str, Any]], failed: list[dict[str, Any]]
) -> None:
    """Record publish outcomes (see :func:`settle_params`)."""
    if published:
        cur.executemany(QUERIES["mark_outbox_published"], published)
    if failed:
        cur.executemany(QUERIES["mark_outbox_failed"], failed)
