"""Schedules: stored state per schedule, and occurrences claimed once per slot."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from runlane.ports.storage import ScheduleOccurrence
from runlane.storage.sql.schedules import occurrence_scope, seen_params
from runlane.storage.sqlite.creation import create_run
from runlane.storage.sqlite.queries import QUERIES
from runlane.types.runs import Run


def materialize_occurrences(
    cur: sqlite3.Cursor, environment: str, occurrences: Sequence[ScheduleOccurrence], now_us: int
) -> list[Run]:
    """Claim each occurrence's slot, advance its schedule, and create the run of a new claim."""
    created: list[Run] = []
    for occurrence in occurrences:
        scope = occurrence_scope(environment, occurrence, now_us)
        claimed = cur.execute(
            QUERIES["claim_schedule_occurrence"],
            {**scope, "run_id": occurrence.run.id},
        ).fetchone()
        cur.execute(QUERIES["advance_schedule"], scope)
        if claimed is None:
            continue
        outcome = create_run(cur, environment, occurrence.run, now_us, None, None)
        if outcome.created:
            created.append(outcome.run)
    return created


def mark_seen(
    cur: sqlite3.Cursor, environment: str, schedule_ids: Sequence[str], now_us: int
) -> None:
    """Record ``now_us`` as the first-seen point of schedules that have none."""
    cur.executemany(QUERIES["mark_schedule_seen"], seen_params(environment, schedule_ids, now_us))
