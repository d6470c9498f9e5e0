"""Pruning leaves nothing of a run behind: outbox rows and schedule occurrences go too."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runlane import Context, Lane, Runlane, postgres_lane, queue, schedule, sqlite_lane, task
from runlane.testing import ManualClock, drain
from runlane.transport.memory import MemoryTransport

TABLES = ("runlane_runs", "runlane_run_events", "runlane_outbox", "runlane_schedule_occurrences")
main = queue("main", default=True)


@task("pruning.work", schedules=[schedule("pruning.minutely", every="1m")])
async def work(payload: Any, ctx: Context) -> None:
    return None


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(driver, where): a SQLite file or a PostgreSQL DSN."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "prune.db")
    return "postgres", str(request.getfixturevalue("postgres_dsn"))


def _counts(store: tuple[str, str], environment: str) -> dict[str, int]:
    driver, where = store
    if driver == "sqlite":
        with sqlite3.connect(where) as conn:
            return {
                table: conn.execute(
                    f"SELECT count(*) FROM {table} WHERE environment = ?",
                    (environment,),
                ).fetchone()[0]
                for table in TABLES
            }
    with psycopg.connect(where) as pg:
        counts = {}
        for table in TABLES:
            row = pg.execute(
                f"SELECT count(*) FROM runlane.{table} WHERE environment = %s",
                (environment,),
            ).fetchone()
            assert row is not None
            counts[table] = row[0]
        return counts


async def test_pruned_runs_take_their_outbox_rows_and_schedule_occurrences_along(
    store: tuple[str, str],
) -> None:
    driver, where = store
    environment = f"prune-{uuid.uuid4().hex[:8]}"
    storage = sqlite_lane(where).storage if driver == "sqlite" else postgres_lane(where).storage
    clock = ManualClock()
    rl = Runlane(
        lane=Lane(storage, MemoryTransport([main])),
        queues=[main],
        tasks=[work],
        environment=environment,
        clock=clock,
    )
    await rl.migrate()
    async with rl:
        triggered = await rl.trigger(work, None)
        assert (await rl.tick()).schedules_materialized == 0  # first seen
        clock.advance("1m")
        assert (await rl.tick()).schedules_materialized == 1
        await drain(rl)
        before = _counts(store, environment)
        assert before["runlane_outbox"] >= 1 and before["runlane_schedule_occurrences"] == 1
        clock.advance("2d")
        fresh = await rl.trigger(work, None)
        assert await rl.runs.prune(older_than="1d") == 2
        after = _counts(store, environment)
        assert after == {
            "runlane_runs": 1,
            "runlane_run_events": after["runlane_run_events"],
            "runlane_outbox": 1,
            "runlane_schedule_occurrences": 0,
        }
        assert [r.id for r in (await rl.runs.list()).data] == [fresh.id]
        assert triggered.id != fresh.id
        # The pruned slot is not proposed again: only the slot due now fires.
        assert (await rl.tick()).schedules_materialized == 1
