"""Dependencies and groups: counting dependents down when their dependencies settle
(every settle goes through :func:`~.transitions.apply_transitions`, which calls
:func:`settle_dependents`), the safety net, and groups. Releasing or cancelling a run
counted down to zero is the ``runlane_dependencies_met`` trigger of migration 012."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from runlane.storage.sqlite.creation import create_waiting_run
from runlane.storage.sqlite.queries import QUERIES
from runlane.types.clock import from_micros
from runlane.types.records import GroupStatus, NewGroup
from runlane.types.runs import Run, RunStatus


def settle_dependents(
    cur: sqlite3.Cursor, environment: str, run_ids: Sequence[str], now_us: int
) -> None:
    """Count down the dependents of ``run_ids`` (settled runs others depend on);
    ``runlane_dependencies_met`` releases or cancels those counted down to zero, and
    the dependents it cancelled settle their own dependents in turn."""
    scope = {"environment": environment, "ids": "[]", "now": now_us}
    frontier = list(run_ids)
    while frontier:
        scope["ids"] = json.dumps(frontier)
        cur.execute(QUERIES["count_down_dependents"], scope)
        dependents = {row[0] for row in cur.execute(QUERIES["resolve_edges"], scope)}
        if not dependents:
            return
        scope["ids"] = json.dumps(sorted(dependents))
        frontier = [row[0] for row in cur.execute(QUERIES["settled_with_dependents"], scope)]


def settle_stranded_waiting_runs(
    cur: sqlite3.Cursor, environment: str, now_us: int, limit: int
) -> int:
    """The safety net: release or cancel waiting runs whose dependencies all finished."""
    rows = cur.execute(
        QUERIES["settle_stranded_waiting_runs"],
        {"environment": environment, "now": now_us, "limit": limit},
    ).fetchall()
    # The runs it cancelled settle their own dependents.
    scope = {"environment": environment, "ids": json.dumps([row[0] for row in rows])}
    cancelled = [row[0] for row in cur.execute(QUERIES["settled_with_dependents"], scope)]
    settle_dependents(cur, environment, cancelled, now_us)
    return len(rows)


def create_group(
    cur: sqlite3.Cursor,
    environment: str,
    group: NewGroup,
    members: Sequence[Run],
    now_us: int,
) -> Run | None:
    """Tag the ``members`` just created, record ``group`` and create its callback."""
    cur.execute(
        QUERIES["join_group"],
        {
            "environment": environment,
            "group_id": group.id,
            "ids": json.dumps([run.id for run in members]),
        },
    )
    callback = None
    if group.callback is not None:
        callback = create_waiting_run(cur, environment, group.callback, now_us).run
    cur.execute(
        QUERIES["insert_group"],
        {
            "environment": environment,
            "id": group.id,
            "task_id": group.task_id,
            "total": len(members),
            "callback_id": callback.id if callback is not None else None,
            "now": now_us,
        },
    )
    return callback


def get_group(cur: sqlite3.Cursor, environment: str, group_id: str) -> GroupStatus | None:
    """A group with its members counted per status, or ``None``."""
    scope = {"environment": environment, "id": group_id, "group_id": group_id}
    row = cur.execute(QUERIES["get_group"], scope).fetchone()
    if row is None:
        return None
    counts = {
        RunStatus(count["status"]): count["n"]
        for count in cur.execute(QUERIES["group_counts"], scope)
    }
    return GroupStatus(
        id=row["id"],
        task_id=row["task_id"],
        total=row["total"],
        callback_id=row["callback_id"],
        created_at=from_micros(row["created_at"]),
        counts=counts,
    )
