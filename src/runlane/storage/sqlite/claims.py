"""Claiming runs under a lease, within durable queue capacity.

Claims run in IMMEDIATE transactions: the caller holds the write lock, so a
bounded queue's count of active leases cannot change between counting and
claiming. Each claimed run gets a ``run.started`` event.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from runlane.model.capacity import has_capacity
from runlane.ports.storage import QueuePolicy
from runlane.storage.sql.claiming import split_by_capacity
from runlane.storage.sql.rows import runs_from_rows
from runlane.storage.sqlite.queries import QUERIES
from runlane.types.runs import Run


class QueueRotation:
    """Which unbounded queue a worker's claim scans first; it moves on at every claim."""

    def __init__(self) -> None:
        self._start = 0

    def next_order(self, names: list[str]) -> list[str]:
        """``names`` starting one further along than last time."""
        self._start = (self._start + 1) % max(1, len(names))
        return names[self._start :] + names[: self._start]


def claim_due_runs(
    cur: sqlite3.Cursor,
    environment: str,
    queues: Sequence[QueuePolicy],
    limit: int,
    lease_params: dict[str, Any],
    rotation: QueueRotation,
) -> list[Run]:
    """Lease up to ``limit`` due runs (oldest ``run_at`` first) within queue capacity."""
    limits, unbounded = split_by_capacity(queues)
    runs: list[Run] = []
    if limits:
        runs += _claim_rows(
            cur,
            "claim_bounded_runs",
            {
                "environment": environment,
                "bounded": json.dumps(list(limits.items())),
                "limit": limit,
                **lease_params,
            },
        )
    # One indexed, ordered scan per queue; the starting queue rotates so a
    # worker on many queues serves them all.
    for name in rotation.next_order(unbounded):
        if len(runs) >= limit:
            break
        runs += _claim_rows(
            cur,
            "claim_due_runs",
            {
                "environment": environment,
                "queue": name,
                "limit": limit - len(runs),
                **lease_params,
            },
        )
    _insert_started_events(cur, environment, runs, lease_params["now"])
    return runs


def claim_run(
    cur: sqlite3.Cursor, environment: str, params: dict[str, Any], queue: QueuePolicy | None
) -> Run | None:
    """Lease one run if it is claimable, due, and its partition has capacity."""
    if queue is not None and queue.concurrency_limit is not None:
        current = cur.execute(QUERIES["get_run"], params).fetchone()
        if current is None:
            return None
        occupied = cur.execute(
            QUERIES["occupied_capacity"],
            {
                "environment": environment,
                "queue": current["queue"],
                "concurrency_key": current["concurrency_key"],
                "now": params["now"],
            },
        ).fetchone()["n"]
        if not has_capacity(occupied, queue.concurrency_limit):
            return None
    runs = _claim_rows(cur, "claim_run", params)
    _insert_started_events(cur, environment, runs, params["now"])
    return runs[0] if runs else None


def _claim_rows(cur: sqlite3.Cursor, query: str, params: dict[str, Any]) -> list[Run]:
    # One decoder for the claim: its runs share the lease, times and source, decoded once;
    # rows read by position.
    rows = cur.execute(QUERIES[query], params).fetchall()
    if not rows:
        return []
    return runs_from_rows(rows, [column[0] for column in cur.description])


def _insert_started_events(
    cur: sqlite3.Cursor, environment: str, runs: list[Run], now_us: int
) -> None:
    if not runs:
        return
    lease = runs[0].lease
    assert lease is not None  # one claim, one lease for all its runs
    cur.execute(
        QUERIES["insert_started_events"],
        {
            "environment": environment,
            "ids": json.dumps([run.id for run in runs]),
            "now": now_us,
            "lease_expires_iso": lease.expires_at.isoformat(),
        },
    )
