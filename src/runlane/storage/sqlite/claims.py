"""Claiming runs under a lease, within durable queue capacity.

Claims run in IMMEDIATE transactions: the caller holds the write lock, so a
bounded queue's count of active leases cannot change between counting and
claiming. A claimed run's ``run.started`` event is implied by its row (migration 016).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from runlane.model.capacity import has_capacity
from runlane.model.queue_defs import UNKEYED
from runlane.model.rate_limiting import (
    partition_scan,
    tat_after,
    token_time,
    tokens_available,
    tolerance,
)
from runlane.ports.storage import QueuePolicy
from runlane.storage.sql.claiming import (
    WHOLE_QUEUE,
    split_by_capacity,
    split_rate_limited,
    widest_priority_window,
)
from runlane.storage.sql.rows import runs_from_rows
from runlane.storage.sqlite.queries import QUERIES
from runlane.types.priorities import claim_horizon
from runlane.types.runs import Run


class QueueRotation:
    """Which unbounded queue a worker's claim scans first; it moves on at every claim.
    It also remembers the queues limited per key whose unkeyed runs this process has
    brought into their partition (:data:`adopted`)."""

    def __init__(self) -> None:
        self._start = 0
        self.adopted: set[tuple[str, str]] = set()

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
    """Lease up to ``limit`` due runs (first in claim order: due time less the
    priority offset) within queue capacity and, on rate-limited queues, the tokens
    their partitions have. The claim statements leave out queues paused in the
    database, whatever the caller last read: a pause stored by another process holds
    from its commit on."""
    rated, others = split_rate_limited(queues)
    limits, unbounded = split_by_capacity(others)
    runs: list[Run] = []
    for policy in rated:
        if len(runs) >= limit:
            break
        if policy.rate_keyed:
            if (environment, policy.name) not in rotation.adopted:
                ensure_rate_key_triggers(cur)
                adopt_unkeyed_runs(cur, environment, policy.name)
                assert policy.rate_limit is not None
                cur.execute(
                    QUERIES["retime_rate_partitions"],
                    {
                        "environment": environment,
                        "queue": policy.name,
                        "tolerance": tolerance(policy.rate_limit),
                    },
                )
                rotation.adopted.add((environment, policy.name))
            runs += _claim_keyed(cur, environment, policy, limit - len(runs), lease_params)
            continue
        runs += _claim_with_tokens(cur, environment, policy, limit - len(runs), lease_params)
    now = lease_params["now"]
    horizon = claim_horizon(now, widest_priority_window(others))
    if limits and len(runs) < limit:
        runs += _claim_rows(
            cur,
            "claim_bounded_runs",
            {
                **bounded_params(cur, environment, limits, now, horizon),
                "limit": limit - len(runs),
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
                "horizon": horizon,
                **lease_params,
            },
        )
    return runs


def _claim_with_tokens(
    cur: sqlite3.Cursor,
    environment: str,
    policy: QueuePolicy,
    limit: int,
    lease_params: dict[str, Any],
) -> list[Run]:
    """Claim up to the tokens the queue's partition has (and ``limit``), and take one
    token per run claimed, in the caller's write transaction."""
    assert policy.rate_limit is not None
    state = {"environment": environment, "queue": policy.name, "rate_key": WHOLE_QUEUE}
    row = cur.execute(QUERIES["get_rate_limit_state"], state).fetchone()
    tat = None if row is None else row["tat"]
    now = lease_params["now"]
    take = min(limit, tokens_available(policy.rate_limit, tat, now))
    if take < 1:
        return []
    horizon = claim_horizon(now, policy.priority_window)
    if policy.concurrency_limit is not None:
        limits = {policy.name: policy.concurrency_limit}
        params = {**bounded_params(cur, environment, limits, now, horizon), "limit": take}
        runs = _claim_rows(cur, "claim_bounded_runs", {**params, **lease_params})
    else:
        params = {
            "environment": environment,
            "queue": policy.name,
            "limit": take,
            "horizon": horizon,
        }
        runs = _claim_rows(cur, "claim_due_runs", {**params, **lease_params})
    if runs:
        new_tat = tat_after(policy.rate_limit, tat, now, len(runs))
        cur.execute(QUERIES["set_rate_limit_state"], {**state, "tat": new_tat})
    return runs


def ensure_rate_key_triggers(cur: sqlite3.Cursor) -> None:
    """Create the triggers that keep each rate-key partition's due_at (once per file:
    they stay), in the caller's write transaction, before it writes or claims runs with
    a rate key."""
    cur.execute(QUERIES["create_rate_key_created_trigger"])
    cur.execute(QUERIES["create_rate_key_waiting_trigger"])


def adopt_unkeyed_runs(cur: sqlite3.Cursor, environment: str, queue: str) -> None:
    """Bring a queue's waiting runs written before it was limited per key (without a
    rate key) into its unkeyed partition: once per process and queue."""
    cur.execute(QUERIES["adopt_unkeyed_runs"], {"environment": environment, "queue": queue})


def _claim_keyed(
    cur: sqlite3.Cursor,
    environment: str,
    policy: QueuePolicy,
    limit: int,
    lease_params: dict[str, Any],
) -> list[Run]:
    """A queue limited per key: of the partitions that have a token and a due run
    (an index range, however many others are exhausted), the oldest due runs of each
    within its tokens in claim order, one token taken per run started."""
    rate = policy.rate_limit
    assert rate is not None
    now = lease_params["now"]
    base = {"environment": environment, "queue": policy.name}
    if cur.execute(QUERIES["queue_is_paused"], base).fetchone() is not None:
        return []  # paused by some process since the caller last read the pauses
    horizon = claim_horizon(now, policy.priority_window)
    partitions = cur.execute(
        QUERIES["ready_rate_partitions"],
        {**base, "now": now, "limit": partition_scan(limit)},
    ).fetchall()
    runs: list[Run] = []
    for partition in partitions:
        if len(runs) >= limit:
            break
        key, tat = partition["rate_key"], partition["tat"]
        taken = 0
        tokens = min(limit - len(runs), tokens_available(rate, tat, now))
        if tokens > 0:
            due = cur.execute(
                QUERIES["due_rate_keyed_runs"],
                {**base, "rate_key": key, "now": now, "horizon": horizon, "limit": tokens},
            ).fetchall()
            for row in due:
                run = _claim_one(cur, environment, policy, row["id"], lease_params)
                if run is not None:
                    runs.append(run)
                    taken += 1
        new_tat = tat_after(rate, tat, now, taken) if taken else tat
        cur.execute(
            QUERIES["settle_rate_partition"],
            {**base, "rate_key": key, "tat": new_tat, "token_at": token_time(rate, new_tat)},
        )
    return runs


def _claim_one(
    cur: sqlite3.Cursor,
    environment: str,
    policy: QueuePolicy,
    run_id: str,
    lease_params: dict[str, Any],
) -> Run | None:
    """Lease one run (its key rules checked by the statement) within the queue's
    capacity when it is bounded."""
    params = {"environment": environment, "id": run_id, **lease_params}
    if policy.concurrency_limit is not None:
        current = cur.execute(QUERIES["get_run"], params).fetchone()
        if current is None:
            return None
        occupied = cur.execute(
            QUERIES["occupied_capacity"],
            {
                "environment": environment,
                "queue": current["queue"],
                "concurrency_key": current["concurrency_key"],
                "now": lease_params["now"],
            },
        ).fetchone()["n"]
        if not has_capacity(occupied, policy.concurrency_limit):
            return None
    claimed = _claim_rows(cur, "claim_run", params)
    return claimed[0] if claimed else None


def _claim_run_keyed(
    cur: sqlite3.Cursor, environment: str, params: dict[str, Any], queue: QueuePolicy
) -> Run | None:
    """``claim_run`` on a queue limited per key: only with a token of the run's own
    partition, which it takes."""
    rate = queue.rate_limit
    assert rate is not None
    ensure_rate_key_triggers(cur)
    current = cur.execute(QUERIES["get_run"], params).fetchone()
    if current is None:
        return None
    key = current["rate_key"] if current["rate_key"] is not None else UNKEYED
    state = {"environment": environment, "queue": queue.name, "rate_key": key}
    row = cur.execute(QUERIES["get_rate_partition"], state).fetchone()
    tat = None if row is None else row["tat"]
    now = params["now"]
    if tokens_available(rate, tat, now) < 1:
        return None
    lease = {k: v for k, v in params.items() if k not in ("environment", "id")}
    run = _claim_one(cur, environment, queue, current["id"], lease)
    if run is None:
        return None
    new_tat = tat_after(rate, tat, now, 1)
    if row is None:
        cur.execute(QUERIES["set_rate_limit_state"], {**state, "tat": new_tat})
    cur.execute(
        QUERIES["settle_rate_partition"],
        {**state, "tat": new_tat, "token_at": token_time(rate, new_tat)},
    )
    return run


def claim_run(
    cur: sqlite3.Cursor, environment: str, params: dict[str, Any], queue: QueuePolicy | None
) -> Run | None:
    """Lease one run if it is claimable, due, its partition has capacity and, on a
    rate-limited queue, a token (taken here)."""
    if queue is not None and queue.rate_keyed and queue.rate_limit is not None:
        return _claim_run_keyed(cur, environment, params, queue)
    tat: int | None = None
    state: dict[str, Any] = {}
    if queue is not None and queue.rate_limit is not None:
        state = {"environment": environment, "queue": queue.name, "rate_key": WHOLE_QUEUE}
        row = cur.execute(QUERIES["get_rate_limit_state"], state).fetchone()
        tat = None if row is None else row["tat"]
        if tokens_available(queue.rate_limit, tat, params["now"]) < 1:
            return None
    if queue is not None:
        lease = {k: v for k, v in params.items() if k not in ("environment", "id")}
        run = _claim_one(cur, environment, queue, params["id"], lease)
    else:
        runs = _claim_rows(cur, "claim_run", params)
        run = runs[0] if runs else None
    if run is not None and queue is not None and queue.rate_limit is not None:
        new_tat = tat_after(queue.rate_limit, tat, params["now"], 1)
        cur.execute(
            QUERIES["set_rate_limit_state"],
            {
                "environment": environment,
                "queue": queue.name,
                "rate_key": WHOLE_QUEUE,
                "tat": new_tat,
            },
        )
    return run


def bounded_params(
    cur: sqlite3.Cursor, environment: str, limits: dict[str, int], now: int, horizon: int
) -> dict[str, Any]:
    """``claim_bounded_runs``' choice of runs to rank, in the caller's transaction: of
    the queues that have held a run with a concurrency key (migration 018) every due
    run, of the others (one partition each) only their first due runs (claimable by
    ``horizon``), as many as their limit: no later run of theirs can be taken."""
    scope = {"environment": environment, "bounded": json.dumps(list(limits.items()))}
    partitioned = {row[0] for row in cur.execute(QUERIES["partitioned_queues"], scope)}
    firsts: list[str] = []
    for name, lim in limits.items():
        if name not in partitioned:
            one = {"environment": environment, "queue": name, "now": now, "take": lim}
            rows = cur.execute(QUERIES["first_due_runs"], {**one, "horizon": horizon})
            firsts += [row[0] for row in rows]
    ranked = [(name, lim) for name, lim in limits.items() if name in partitioned]
    return {**scope, "ranked": json.dumps(ranked), "firsts": json.dumps(firsts)}


def _claim_rows(cur: sqlite3.Cursor, query: str, params: dict[str, Any]) -> list[Run]:
    # One decoder for the claim: its runs share the lease, times and source, decoded once;
    # rows read by position.
    rows = cur.execute(QUERIES[query], params).fetchall()
    if not rows:
        return []
    return runs_from_rows(rows, [column[0] for column in cur.description])
