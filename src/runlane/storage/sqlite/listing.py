"""Listing runs: newest first, filtered, one page at a time behind an id cursor."""

from __future__ import annotations

import json
from typing import Any

from runlane.storage.protocol import RunFilter


def run_page_query(
    environment: str, run_filter: RunFilter, limit: int, cursor: str | None
) -> tuple[str, dict[str, Any]]:
    """The query for one page and its parameters; it reads one row more than ``limit``."""
    clauses = ["environment = :environment"]
    params: dict[str, Any] = {"environment": environment, "limit": limit + 1}
    for column, values in (
        ("status", [s.value for s in run_filter.statuses]),
        ("task_id", list(run_filter.task_ids)),
        ("queue", list(run_filter.queues)),
    ):
        if values:
            clauses.append(f"{column} IN (SELECT value FROM json_each(:{column}s))")
            params[f"{column}s"] = json.dumps(values)
    if cursor is not None:
        clauses.append("id < :cursor")
        params["cursor"] = cursor
    query = (
        f"SELECT * FROM runlane_runs WHERE {' AND '.join(clauses)} ORDER BY id DESC LIMIT :limit"
    )
    return query, params
