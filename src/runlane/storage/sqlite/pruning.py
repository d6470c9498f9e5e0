"""Pruning: deleting finished runs (their progress is on their rows) with their
history, ownership, outbox and schedule occurrence rows."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runlane.storage.sqlite.queries import QUERIES
from runlane.types.clock import to_micros
from runlane.types.runs import RunStatus


def prune_params(
    environment: str, older_than: datetime, statuses: Sequence[RunStatus], limit: int
) -> dict[str, Any]:
    """Parameters of ``prune_runs``: which finished runs, last updated before when, how many."""
    return {
        "environment": environment,
        "older_than": to_micros(older_than),
        "statuses": json.dumps([s.value for s in statuses]),
        "limit": limit,
    }


def prune_runs(cur: sqlite3.Cursor, environment: str, params: dict[str, Any]) -> int:
    """Delete the runs :func:`prune_params` selects, then every row that belongs to them,
    and messages left without runs whose deduplication window ended before ``older_than``."""
    ids = [row["id"] for row in cur.execute(QUERIES["prune_runs"], params).fetchall()]
    if ids:
        scope = {"environment": environment, "run_ids": json.dumps(ids)}
        for query in (
            "delete_run_events",
            "delete_idempotency_keys_of_runs",
            "delete_outbox_of_runs",
            "delete_schedule_occurrences_of_runs",
            "delete_dependency_edges_of_runs",
            "delete_waiting_rows_of_runs",
            "delete_group_membership_of_runs",
        ):
            cur.execute(QUERIES[query], scope)
    cur.execute(QUERIES["prune_messages"], params)
    return len(ids)
