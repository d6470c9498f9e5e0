"""Listing runs: newest first, filtered, one page at a time behind an id cursor."""

from __future__ import annotations

from typing import Any

from runlane.ports.storage import RunFilter


def list_params(
    environment: str, run_filter: RunFilter, limit: int, cursor: str | None
) -> dict[str, Any]:
    """Parameters of ``list_runs`` for one page; it reads one row more than ``limit``."""
    return {
        "environment": environment,
        "statuses": [s.value for s in run_filter.statuses],
        "task_ids": list(run_filter.task_ids),
        "queues": list(run_filter.queues),
        "group_id": run_filter.group,
        "cursor": cursor,
        "limit": limit + 1,
    }
