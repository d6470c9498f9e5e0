"""SQLite schema migrations: applied on open, once, in order, from any older version."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.support import stored_history

from runlane import Context, Runlane, queue, sqlite_lane, task
from runlane.storage.sqlite import SqliteStorage, versioning
from runlane.storage.sqlite.versioning import apply_migrations
from runlane.types.clock import from_micros


@task("noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


#: Every version this code applies, in order.
LATEST = [version for version, _, _ in versioning._MIGRATIONS]


def _applied(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM runlane_migrations")]


def _runtime(path: Path) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path),
        queues=[queue("main", default=True)],
        tasks=[noop],
        environment="upgrade",
    )


def _migrate_up_to(path: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bring a new file to schema ``version`` only, as an older release left it."""
    with monkeypatch.context() as patch:
        older = [m for m in versioning._MIGRATIONS if m[0] <= version]
        patch.setattr(versioning, "_MIGRATIONS", older)
        conn = sqlite3.connect(path)
        with conn:
            apply_migrations(conn.cursor())
        conn.close()


def _store_queued_run(conn: sqlite3.Connection, run_id: str, *, first_run_at: bool = False) -> None:
    """Store a queued ``noop`` run with the columns an older release wrote (from version
    13, ``first_run_at`` too)."""
    columns = "run_at, first_run_at" if first_run_at else "run_at"
    values = "1, 1" if first_run_at else "1"
    conn.execute(
        "INSERT INTO runlane_runs (environment, id, task_id, queue, status, payload, "
        f"{columns}, created_at, updated_at, event_sequence, source) VALUES "
        f"('upgrade', ?, 'noop', 'main', 'queued', 'null', {values}, 1, 1, 1, ?)",
        (run_id, '{"type": "trigger"}'),
    )


async def test_a_file_at_version_6_is_upgraded_on_open_and_its_runs_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _migrate_up_to(path, 6, monkeypatch)
    with sqlite3.connect(path) as conn:
        _store_queued_run(conn, "old-run")
    assert _applied(path) == [1, 2, 3, 4, 5, 6]
    rl = _runtime(path)
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
    assert _applied(path) == LATEST
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        (finished,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'runlane_runs_finished'"
        ).fetchone()
    assert {"runlane_messages", "runlane_deduplication_keys", "runlane_runs_keyed"} <= tables
    assert "'discarded'" in finished


def _index_sizes(conn: sqlite3.Connection) -> dict[str, int]:
    """Entries per partial index, counted through the index itself (integrity_check
    would report an index that disagrees with its table)."""
    sizes = {}
    indexes = conn.execute(
        "SELECT name, tbl_name, replace(sql, char(10), ' ') FROM sqlite_master "
        "WHERE type = 'index' AND sql LIKE '% WHERE %'"
    ).fetchall()
    for name, table, sql in indexes:
        condition = sql.split(" WHERE ", 1)[1]
        sizes[name] = conn.execute(
            f"SELECT count(*) FROM {table} INDEXED BY {name} WHERE {condition}"
        ).fetchone()[0]
    return sizes


async def test_version_8_rebuilds_the_partial_indexes_with_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Migration 8 only rewrites the status sets of the partial indexes (IN lists
    # become OR chains): every index keeps exactly the rows it had, and runs left
    # queued, running and finished by the older version go on as before.
    path = tmp_path / "v7.db"
    _migrate_up_to(path, 7, monkeypatch)
    statuses = ["queued", "scheduled", "running", "succeeded", "failed", "retrying"]
    with sqlite3.connect(path) as conn:
        for number, status in enumerate(statuses):
            conn.execute(
                "INSERT INTO runlane_runs (environment, id, task_id, queue, status, payload, "
                "run_at, created_at, updated_at, event_sequence, source, lease_expires_at, "
                "singleton_key) VALUES ('upgrade', ?, 'noop', 'main', ?, 'null', 1, 1, 1, 1, "
                '\'{"type": "trigger"}\', ?, ?)',
                (f"run-{number}", status, 5 if status == "running" else None, f"s{number}"),
            )
        before = _index_sizes(conn)
    assert before["runlane_runs_claimable"] == 3 and before["runlane_runs_finished"] == 2
    rl = _runtime(path)
    async with rl:
        assert _applied(path) == LATEST
        with sqlite3.connect(path) as conn:
            after = _index_sizes(conn)
            # Migration 10 takes the delivery index out; a lane without a transport
            # does not create it again.
            assert "runlane_runs_undelivered" not in after
            # Migration 14 replaces runlane_runs_claimable by runlane_runs_claim_order,
            # which holds the same runs.
            assert "runlane_runs_claimable" not in after
            assert after["runlane_runs_claim_order"] == before["runlane_runs_claimable"]
            gone = {"runlane_runs_undelivered", "runlane_runs_claimable"}
            kept = {k: v for k, v in after.items() if k in before}
            assert kept == {k: v for k, v in before.items() if k not in gone}
            # Indexes of later migrations' new tables start empty.
            later = after.keys() - before.keys() - {"runlane_runs_claim_order"}
            assert all(after[k] == 0 for k in later)
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            sql = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'runlane_runs_claim_order'"
            ).fetchone()[0]
        assert " IN (" not in sql
        done = await rl.execute_next()
        assert done is not None and done.id == "run-0" and done.status.value == "succeeded"


async def test_a_run_created_before_version_9_keeps_its_stored_created_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v8.db"
    _migrate_up_to(path, 8, monkeypatch)
    created = {"task_id": "noop", "queue": "main", "run_at": "2026-01-01T00:00:00+00:00",
               "source": {"type": "trigger"}}  # fmt: skip
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO runlane_runs (environment, id, task_id, queue, status, payload, "
            "run_at, created_at, updated_at, event_sequence, source) VALUES ('upgrade', "
            "'old-run', 'noop', 'main', 'queued', 'null', 1767225600000000, 1, 1, 1, ?)",
            (json.dumps(created["source"]),),
        )
        conn.execute(
            "INSERT INTO runlane_run_events VALUES ('upgrade', 'old-run', 1, 'run.created', 1, ?)",
            (json.dumps(created),),
        )
    rl = _runtime(path)
    async with rl:
        assert _applied(path) == LATEST
        (event,) = await rl.runs.events("old-run")
        assert event.type.value == "run.created" and event.data == created
        new = await rl.trigger(noop, None)
        (implied,) = await rl.runs.events(new.id)
        assert implied.type.value == "run.created" and implied.sequence == 1
        assert implied.data == {
            "task_id": "noop",
            "queue": "main",
            "run_at": new.run_at.isoformat(),
            "source": new.source.to_json(),
        }
        done = await rl.execute_next()
        assert done is not None and done.id == "old-run"
        assert [e.type.value for e in await rl.runs.events("old-run")] == [
            "run.created", "run.started", "run.succeeded",
        ]  # fmt: skip
    with sqlite3.connect(path) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM runlane_run_events WHERE run_id = ? AND type = 'run.created'",
            (new.id,),
        ).fetchone()
    assert stored == (0,)


async def test_migrate_on_a_current_file_applies_nothing(tmp_path: Path) -> None:
    storage = sqlite_lane(tmp_path / "new.db").storage
    await storage.open()
    try:
        assert await storage.migrate() == []
    finally:
        await storage.close()
    assert _applied(tmp_path / "new.db") == LATEST


def _index_names(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }


async def test_the_delivery_index_follows_the_lane_and_stays_once_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only tick's requests for deliveries read runlane_runs_undelivered: a lane without
    # a transport writes no entry to it, a lane with one creates it on open.
    path = tmp_path / "app.db"
    _migrate_up_to(path, 9, monkeypatch)
    assert "runlane_runs_undelivered" in _index_names(path)
    plain = sqlite_lane(path).storage
    await plain.open()
    await plain.close()
    assert "runlane_runs_undelivered" not in _index_names(path)
    with_transport = sqlite_lane(path, transport=object()).storage
    assert isinstance(with_transport, SqliteStorage)
    await with_transport.open()
    await with_transport.close()
    assert "runlane_runs_undelivered" in _index_names(path)
    # A process of a lane without a transport on the same file leaves it alone.
    await plain.open()
    await plain.close()
    assert "runlane_runs_undelivered" in _index_names(path)


async def test_version_13_adds_flow_control_and_an_older_files_runs_wait_out_a_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _migrate_up_to(path, 12, monkeypatch)
    rl = _runtime(path)
    async with rl:
        run = await rl.trigger(noop, None)
        await rl.queues.pause("main")
        assert await rl.execute_next() is None
        await rl.queues.resume("main")
        done = await rl.execute_next()
        assert done is not None and done.id == run.id
    assert _applied(path) == LATEST


async def test_version_14_adds_priorities_and_an_older_files_runs_keep_their_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _migrate_up_to(path, 13, monkeypatch)
    with sqlite3.connect(path) as conn:
        _store_queued_run(conn, "queued-at-13", first_run_at=True)
    conn.close()
    rl = _runtime(path)
    async with rl:
        assert (await rl.runs.get("queued-at-13")).priority == 0
        # Due long ago at priority 0: it goes before a new run even of priority 10.
        urgent = await rl.trigger(noop, None, priority=10)
        first = await rl.execute_next()
        assert first is not None and first.id == "queued-at-13"
        second = await rl.execute_next()
        assert second is not None and second.id == urgent.id and second.priority == 10
    assert _applied(path) == LATEST


async def test_version_15_adds_rate_keys_and_a_queue_keyed_after_it_starts_its_older_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _migrate_up_to(path, 14, monkeypatch)
    with sqlite3.connect(path) as conn:
        _store_queued_run(conn, "queued-at-14", first_run_at=True)
    conn.close()
    keyed = Runlane(
        lane=sqlite_lane(path),
        queues=[queue("main", default=True, rate_limit="5/s", rate_limit_by="key")],
        tasks=[noop],
        environment="upgrade",
    )
    async with keyed:
        assert _applied(path) == LATEST
        # Written without a rate key, the run joins the queue's unkeyed partition.
        done = await keyed.execute_next()
        assert done is not None and done.id == "queued-at-14" and done.rate_key == ""
        later = await keyed.trigger(noop, None, rate_key="tenant-1")
        assert (await keyed.execute_next()) is not None
        assert (await keyed.runs.get(later.id)).status.value == "succeeded"


async def test_version_16_lists_history_stored_before_it_once_and_implies_what_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v15.db"
    _migrate_up_to(path, 15, monkeypatch)
    marks = ", ".join("?" * len(stored_history.RUN_COLUMNS.split(",")))
    with sqlite3.connect(path) as conn:
        conn.executemany(
            f"INSERT INTO runlane_runs ({stored_history.RUN_COLUMNS}) VALUES ({marks})",
            stored_history.run_rows("upgrade"),
        )
        conn.executemany(
            "INSERT INTO runlane_run_events VALUES (?, ?, ?, ?, ?, ?)",
            stored_history.event_rows("upgrade"),
        )
    rl = _runtime(path)
    async with rl:
        assert _applied(path) == LATEST
        await stored_history.check_upgraded_history(rl)
    with sqlite3.connect(path) as conn:
        counts = dict(
            conn.execute("SELECT run_id, count(*) FROM runlane_run_events GROUP BY run_id")
        )
    assert counts == stored_history.STORED_AFTER


async def test_version_17_moves_stored_progress_onto_the_runs_and_drops_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v16.db"
    _migrate_up_to(path, 16, monkeypatch)
    with sqlite3.connect(path) as conn:
        _store_queued_run(conn, "reported")
        conn.executemany(
            "INSERT INTO runlane_run_progress VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                ("upgrade", "reported", 2, 0.75, "three quarters", '{"page":3}', 42),
                ("upgrade", "pruned", 1, 0.5, None, None, 41),
            ],
        )
    rl = _runtime(path)
    async with rl:
        assert _applied(path) == LATEST
        progress = (await rl.runs.get("reported")).progress
        assert progress is not None
        assert (progress.fraction, progress.message, progress.data, progress.attempt) == (
            0.75, "three quarters", {"page": 3}, 2,
        )  # fmt: skip
        assert progress.updated_at == from_micros(42)
        done = await rl.execute_next()  # a settle without progress keeps the value
        assert done is not None and done.id == "reported"
        assert (await rl.runs.get("reported")).progress == progress
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "runlane_run_progress" not in tables


async def test_version_18_names_the_queues_that_hold_runs_with_concurrency_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v17.db"
    _migrate_up_to(path, 17, monkeypatch)
    with sqlite3.connect(path) as conn:
        _store_queued_run(conn, "plain", first_run_at=True)
        conn.execute(
            "INSERT INTO runlane_runs (environment, id, task_id, queue, status, payload, "
            "run_at, first_run_at, created_at, updated_at, event_sequence, source, "
            "concurrency_key) VALUES ('upgrade', 'keyed', 'noop', 'keyed', 'succeeded', "
            "'null', 1, 1, 1, 1, 1, ?, 'k')",
            ('{"type": "trigger"}',),
        )
    rl = _runtime(path)
    async with rl:
        assert _applied(path) == LATEST
        # Any statement that writes a keyed run names its queue from now on.
        await rl.trigger(noop, None, concurrency_key="tenant")
    with sqlite3.connect(path) as conn:
        named = conn.execute("SELECT environment, queue FROM runlane_partitioned_queues")
        assert sorted(named) == [("upgrade", "keyed"), ("upgrade", "main")]
