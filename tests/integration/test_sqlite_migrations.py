"""SQLite schema migrations: applied on open, once, in order, from any older version."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, Runlane, queue, sqlite_lane, task
from runlane.storage.sqlite import versioning
from runlane.storage.sqlite.versioning import apply_migrations


@task("noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


def _applied(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM runlane_migrations")]


def _migrate_up_to(path: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bring a new file to schema ``version`` only, as an older release left it."""
    with monkeypatch.context() as patch:
        older = [m for m in versioning._MIGRATIONS if m[0] <= version]
        patch.setattr(versioning, "_MIGRATIONS", older)
        conn = sqlite3.connect(path)
        with conn:
            apply_migrations(conn.cursor())
        conn.close()


async def test_a_file_at_version_6_is_upgraded_on_open_and_its_runs_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _migrate_up_to(path, 6, monkeypatch)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO runlane_runs (environment, id, task_id, queue, status, payload, "
            "run_at, created_at, updated_at, event_sequence, source) VALUES "
            "('upgrade', 'old-run', 'noop', 'main', 'queued', 'null', 1, 1, 1, 1, "
            '\'{"type": "trigger"}\')'
        )
    assert _applied(path) == [1, 2, 3, 4, 5, 6]
    rl = Runlane(
        lane=sqlite_lane(path),
        queues=[queue("main", default=True)],
        tasks=[noop],
        environment="upgrade",
    )
    async with rl:
        old = await rl.runs.get("old-run")
        assert (old.partition_key, old.replays, old.mode, old.message_sequence) == (
            None, 0, None, None,
        )  # fmt: skip
        assert (old.dead_letter_reason, old.dead_lettered_at, old.is_delivery) == (
            None, None, False,
        )  # fmt: skip
        done = await rl.execute_next()
        assert done is not None and done.id == "old-run" and done.status.value == "succeeded"
    assert _applied(path) == [1, 2, 3, 4, 5, 6, 7]
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        (finished,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'runlane_runs_finished'"
        ).fetchone()
    assert {"runlane_messages", "runlane_deduplication_keys", "runlane_runs_keyed"} <= tables
    assert "'discarded'" in finished


async def test_migrate_on_a_current_file_applies_nothing(tmp_path: Path) -> None:
    storage = sqlite_lane(tmp_path / "new.db").storage
    await storage.open()
    try:
        assert await storage.migrate() == []
    finally:
        await storage.close()
    assert _applied(tmp_path / "new.db") == [1, 2, 3, 4, 5, 6, 7]
