"""PostgreSQL schema migrations: versioned, idempotent, concurrent-safe, never implicit."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support import stored_history

import runlane.core.waiting as waiting_module
from runlane import Context, ErrorCode, Runlane, RunlaneError, postgres_lane, queue, task
from runlane.storage.postgres import PostgresStorage
from runlane.storage.postgres.queries import QUERY_TEMPLATES
from runlane.storage.postgres.versioning import MIGRATIONS, SCHEMA_VERSION
from runlane.types.clock import from_micros, to_micros

ROOT = Path(__file__).resolve().parents[2]
ALL_MIGRATIONS = [
    "001_initial",
    "002_schedules",
    "003_outbox",
    "004_implicit_created_event",
    "005_prune_bookkeeping",
    "006_payload_as_written",
    "007_schedule_first_seen",
    "008_topics",
    "009_claim_functions",
    "010_claim_reads_what_it_takes",
    "011_standby_workers",
    "012_observing_runs",
    "013_run_dependencies",
    "014_flow_control",
    "015_priorities",
    "016_rate_keys",
    "017_implied_attempt_events",
    "018_progress_on_runs",
    "019_cheaper_rate_key_trigger",
    "020_fewer_indexes_per_run",
    "021_announce_once_per_settle",
    "022_lighter_claims_and_triggers",
    "023_partitioned_queues",
]
#: Their versions.
ALL_VERSIONS = [int(name[:3]) for name in ALL_MIGRATIONS]


@task("noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


@pytest.fixture
def schema(postgres_dsn: str) -> Any:
    """A schema name of this test's own, dropped afterwards."""
    name = f"mig_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _versions(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT version FROM {}.runlane_migrations ORDER BY version")
        return [row[0] for row in conn.execute(query.format(sql.Identifier(schema)))]


def _runtime(dsn: str, schema: str, environment: str = "migrations") -> Runlane:
    return Runlane(
        lane=postgres_lane(dsn, schema=schema),
        queues=[queue("main", default=True)],
        tasks=[noop],
        environment=environment,
    )


async def test_migrate_applies_every_version_once_and_then_nothing(
    postgres_dsn: str, schema: str
) -> None:
    storage = PostgresStorage(postgres_dsn, schema=schema)
    assert await storage.migrate() == ALL_MIGRATIONS
    assert await storage.migrate() == []
    versions = _versions(postgres_dsn, schema)
    assert versions == ALL_VERSIONS == sorted(version for version, _, _ in MIGRATIONS)


async def test_migrate_works_on_a_runtime_that_is_not_open(postgres_dsn: str, schema: str) -> None:
    rl = _runtime(postgres_dsn, schema)
    assert await rl.migrate() == ALL_MIGRATIONS
    async with rl:
        run = await rl.trigger(noop, None)
        done = await rl.execute_next()
    assert done is not None and done.id == run.id


async def test_concurrent_migrations_in_one_process_apply_each_version_once(
    postgres_dsn: str, schema: str
) -> None:
    storages = [PostgresStorage(postgres_dsn, schema=schema) for _ in range(8)]
    results = await asyncio.gather(*(s.migrate() for s in storages))
    assert sorted(results, key=len) == [[]] * 7 + [ALL_MIGRATIONS]
    assert _versions(postgres_dsn, schema) == ALL_VERSIONS


def test_concurrent_migrations_from_several_processes_apply_each_version_once(
    postgres_dsn: str, schema: str
) -> None:
    script = (
        "import asyncio, json, sys\n"
        "from runlane.storage.postgres import PostgresStorage\n"
        "applied = asyncio.run(PostgresStorage(sys.argv[1], schema=sys.argv[2]).migrate())\n"
        "print(json.dumps(applied))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, postgres_dsn, schema],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    applied = sorted(json.loads(out) for out in outputs)
    assert applied == [[], [], [], ALL_MIGRATIONS]
    assert _versions(postgres_dsn, schema) == ALL_VERSIONS


async def test_open_refuses_a_missing_schema_and_says_to_migrate(
    postgres_dsn: str, schema: str
) -> None:
    rl = _runtime(postgres_dsn, schema)
    with pytest.raises(RunlaneError) as caught:
        await rl.open()
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "runlane migrate" in caught.value.message and schema in caught.value.message
    with pytest.raises(RunlaneError) as on_use:
        await rl.trigger(noop, None)
    assert on_use.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_open_refuses_an_older_schema_and_says_to_migrate(
    postgres_dsn: str, schema: str
) -> None:
    await PostgresStorage(postgres_dsn, schema=schema).migrate()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {}.runlane_migrations WHERE version = %s").format(
                sql.Identifier(schema)
            ),
            (SCHEMA_VERSION,),
        )
    rl = _runtime(postgres_dsn, schema)
    with pytest.raises(RunlaneError) as caught:
        await rl.open()
    error = caught.value
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    assert "runlane migrate" in error.message
    assert error.meta["found"] == ALL_VERSIONS[-2] and error.meta["required"] == SCHEMA_VERSION


async def test_a_run_created_before_version_4_keeps_its_stored_created_event(
    postgres_dsn: str, schema: str
) -> None:
    older = PostgresStorage(postgres_dsn, schema=schema)
    older._migrations = older._migrations[:3]
    await older.migrate()
    created = {"task_id": "noop", "queue": "main", "run_at": "2026-01-01T00:00:00+00:00",
               "source": {"type": "trigger"}}  # fmt: skip
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.runlane_runs (environment, id, task_id, queue, status, payload, "
                "run_at, created_at, updated_at, event_sequence, source) VALUES ('migrations', "
                "'old-run', 'noop', 'main', 'queued', 'null', 1767225600000000, 1, 1, 1, %s)"
            ).format(sql.Identifier(schema)),
            (json.dumps(created["source"]),),
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.runlane_run_events VALUES "
                "('migrations', 'old-run', 1, 'run.created', 1, %s)"
            ).format(sql.Identifier(schema)),
            (json.dumps(created),),
        )
    rl = _runtime(postgres_dsn, schema)
    assert await rl.migrate() == ALL_MIGRATIONS[3:]
    async with rl:
        (event,) = await rl.runs.events("old-run")
        assert event.type.value == "run.created" and event.data == created
        new = await rl.trigger(noop, None)
        (implied,) = await rl.runs.events(new.id)
        assert implied.data["run_at"] == new.run_at.isoformat()
        done = await rl.execute_next()
        assert done is not None and done.id == "old-run"
        assert [e.type.value for e in await rl.runs.events("old-run")] == [
            "run.created", "run.started", "run.succeeded",
        ]  # fmt: skip


async def test_version_6_keeps_payloads_as_written_and_runs_older_ones(
    postgres_dsn: str, schema: str
) -> None:
    older = PostgresStorage(postgres_dsn, schema=schema)
    older._migrations = older._migrations[:5]
    await older.migrate()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.runlane_runs (environment, id, task_id, queue, status, payload, "
                "run_at, first_run_at, created_at, updated_at, event_sequence, source) VALUES "
                "('migrations', 'old-run', 'noop', 'main', 'queued', %s::jsonb, 1, 1, 1, 1, 1, "
                '\'{{"type": "trigger"}}\')'
            ).format(sql.Identifier(schema)),
            (json.dumps({"old": [1, "two", None]}),),
        )
    rl = _runtime(postgres_dsn, schema)
    assert await rl.migrate() == ALL_MIGRATIONS[5:]
    async with rl:
        assert (await rl.runs.get("old-run")).payload == {"old": [1, "two", None]}
        written = {"big": 1e16, "huge": 1.5e300, "whole": 2.0, "tiny": 5e-324}
        new = await rl.trigger(noop, written)
        stored = (await rl.runs.get(new.id)).payload
        assert stored == written and all(type(v) is float for v in stored.values())
        done = await rl.execute_next()
        assert done is not None and done.id == "old-run" and done.status.value == "succeeded"


async def test_schemas_on_one_database_are_independent(postgres_dsn: str, schema: str) -> None:
    other = f"{schema}_b"
    try:
        first, second = _runtime(postgres_dsn, schema), _runtime(postgres_dsn, other)
        await first.migrate()
        await second.migrate()
        async with first, second:
            await first.trigger(noop, None)
            assert len((await first.runs.list()).data) == 1
            assert (await second.runs.list()).data == []
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other)))


def test_a_schema_name_that_is_not_a_plain_identifier_is_refused() -> None:
    for bad in ("", "has space", 'quo"te', "semi;colon", "x" * 64, "1starts_with_digit"):
        with pytest.raises(RunlaneError) as caught:
            postgres_lane("postgresql://app@localhost/app", schema=bad)
        assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


async def _queued_run_at_version(dsn: str, schema: str, version: int, run_id: str) -> Runlane:
    """A schema migrated up to ``version`` holding one queued run ``run_id``, and a
    runtime of this code on it that has checked it refuses to open there."""
    older = PostgresStorage(dsn, schema=schema)
    older._migrations = older._migrations[:version]
    await older.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.runlane_runs (environment, id, task_id, queue, status, payload, "
                "run_at, first_run_at, created_at, updated_at, event_sequence, source) VALUES "
                "('migrations', %s, 'noop', 'main', 'queued', 'null', 1, 1, 1, 1, 1, "
                '\'{{"type": "trigger"}}\')'
            ).format(sql.Identifier(schema)),
            (run_id,),
        )
    rl = _runtime(dsn, schema)
    with pytest.raises(RunlaneError) as refused:
        await rl.open()
    assert refused.value.code is ErrorCode.CONFIGURATION_INVALID
    meta = refused.value.meta
    assert (meta["found"], meta["required"]) == (version, SCHEMA_VERSION)
    return rl


async def test_version_8_adds_topics_and_keeps_task_runs_as_they_were(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 7, "old-run")
    assert await rl.migrate() == ALL_MIGRATIONS[7:]
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
    with psycopg.connect(postgres_dsn) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        }
        (finished,) = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (schema, "runlane_runs_finished"),
        ).fetchone() or ("",)
    assert {"runlane_messages", "runlane_deduplication_keys"} <= tables
    assert "'discarded'" in finished


async def test_version_9_moves_the_claim_into_functions_and_claims_runs_queued_before(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 8, "queued-at-8")
    assert await rl.migrate() == ALL_MIGRATIONS[8:]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        functions = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s ORDER BY p.proname",
            (schema,),
        ).fetchall()
    assert functions == [
        ("runlane_announce_finished",),
        ("runlane_claim_due_runs",),
        ("runlane_dependencies_met",),
        ("runlane_dependency_settled",),
        ("runlane_lock_claimable_keys",),
        ("runlane_rate_key_waiting",),
    ]
    async with rl:
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-8" and done.status.value == "succeeded"
        events = [event.type.value for event in await rl.runs.events("queued-at-8")]
        assert events == ["run.created", "run.started", "run.succeeded"]


async def test_version_10_replaces_the_claim_and_claims_runs_queued_before(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 9, "queued-at-9")
    assert await rl.migrate() == ALL_MIGRATIONS[9:]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        (settings,) = conn.execute(
            "SELECT p.proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND p.proname = 'runlane_claim_due_runs'",
            (schema,),
        ).fetchone() or ([],)
    assert "enable_bitmapscan=off" in settings
    async with rl:
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-9" and done.status.value == "succeeded"
        events = [event.type.value for event in await rl.runs.events("queued-at-9")]
        assert events == ["run.created", "run.started", "run.succeeded"]


async def test_version_11_adds_the_unlogged_standby_table_and_triggers_still_queue(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 10, "queued-at-10")
    assert await rl.migrate() == ALL_MIGRATIONS[10:]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        (persistence,) = conn.execute(
            "SELECT c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'runlane_standby'",
            (schema,),
        ).fetchone() or ("",)
    assert persistence == "u"  # unlogged: offers are not worth a WAL flush
    async with rl:
        run = await rl.trigger(noop, None)  # nobody stands by: queued as before
        assert run.status.value == "queued"
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-10"


async def test_version_12_adds_progress_and_announces_runs_queued_before_when_they_finish(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 11, "queued-at-11")
    assert await rl.migrate() == ALL_MIGRATIONS[11:]
    async with rl:
        waiting = asyncio.ensure_future(rl.runs.wait("queued-at-11", timeout="10s"))
        await asyncio.sleep(0.2)
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-11"
        finished = await waiting
        assert finished.status.value == "succeeded" and finished.progress is None


async def test_version_13_adds_dependencies_and_a_run_queued_before_can_be_depended_on(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 12, "queued-at-12")
    assert await rl.migrate() == ALL_MIGRATIONS[12:]
    async with rl:
        dependent = await rl.trigger(noop, None, after=["queued-at-12"])
        assert dependent.status.value == "waiting"
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-12"
        assert (await rl.runs.get(dependent.id)).status.value == "queued"


async def test_version_14_adds_flow_control_and_a_run_queued_before_waits_out_a_pause(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 13, "queued-at-13")
    assert await rl.migrate() == ALL_MIGRATIONS[13:]
    async with rl:
        await rl.queues.pause("main")
        assert await rl.execute_next() is None
        await rl.queues.resume("main")
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-13"


async def test_version_15_adds_priorities_and_a_run_queued_before_keeps_its_place(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 14, "queued-at-14")
    assert (await rl.migrate())[0] == "015_priorities"
    async with rl:
        assert (await rl.runs.get("queued-at-14")).priority == 0
        # Due long ago at priority 0: it goes before a new run even of priority 10.
        urgent = await rl.trigger(noop, None, priority=10)
        first = await rl.execute_next()
        assert first is not None and first.id == "queued-at-14"
        second = await rl.execute_next()
        assert second is not None and second.id == urgent.id and second.priority == 10


async def test_version_16_adds_rate_keys_and_a_queue_keyed_after_it_starts_its_older_runs(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 15, "queued-at-15")
    assert await rl.migrate() == ALL_MIGRATIONS[15:]
    keyed = Runlane(
        lane=postgres_lane(postgres_dsn, schema=schema),
        queues=[queue("main", default=True, rate_limit="5/s", rate_limit_by="key")],
        tasks=[noop],
        environment="migrations",
    )
    async with keyed:
        # Written without a rate key, the run joins the queue's unkeyed partition.
        done = await keyed.execute_next()
        assert done is not None and done.id == "queued-at-15" and done.rate_key == ""
        later = await keyed.trigger(noop, None, rate_key="tenant-1")
        assert await keyed.execute_next() is not None
        assert (await keyed.runs.get(later.id)).status.value == "succeeded"


async def test_version_17_lists_history_stored_before_it_once_and_implies_what_follows(
    postgres_dsn: str, schema: str
) -> None:
    older = PostgresStorage(postgres_dsn, schema=schema)
    older._migrations = [m for m in older._migrations if m[0] < 17]
    await older.migrate()
    marks = sql.SQL(", ").join([sql.Placeholder()] * len(stored_history.RUN_COLUMNS.split(",")))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {}.runlane_runs ({}) VALUES ({})").format(
                sql.Identifier(schema), sql.SQL(stored_history.RUN_COLUMNS), marks
            ),
            stored_history.run_rows("migrations"),
        )
        cur.executemany(
            sql.SQL("INSERT INTO {}.runlane_run_events VALUES (%s, %s, %s, %s, %s, %s)").format(
                sql.Identifier(schema)
            ),
            stored_history.event_rows("migrations"),
        )
    rl = _runtime(postgres_dsn, schema)
    assert await rl.migrate() == ALL_MIGRATIONS[16:]
    async with rl:
        await stored_history.check_upgraded_history(rl)
    with psycopg.connect(postgres_dsn) as conn:
        query = sql.SQL("SELECT run_id, count(*) FROM {}.runlane_run_events GROUP BY run_id")
        counts = dict(conn.execute(query.format(sql.Identifier(schema))).fetchall())
    assert counts == stored_history.STORED_AFTER


async def test_version_18_moves_stored_progress_onto_the_runs_and_drops_its_table(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 17, "reported-at-17")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.runlane_run_progress VALUES "
                "('migrations', 'reported-at-17', 2, 0.75, 'three quarters', "
                "'{{\"page\": 3}}', 42), "
                "('migrations', 'pruned-at-17', 1, 0.5, NULL, NULL, 41)"
            ).format(sql.Identifier(schema))
        )
    assert await rl.migrate() == ALL_MIGRATIONS[17:]
    async with rl:
        progress = (await rl.runs.get("reported-at-17")).progress
        assert progress is not None
        assert (progress.fraction, progress.message, progress.data, progress.attempt) == (
            0.75, "three quarters", {"page": 3}, 2,
        )  # fmt: skip
        assert progress.updated_at == from_micros(42)
        done = await rl.execute_next()  # the run still runs, its progress still shown
        assert done is not None and done.id == "reported-at-17"
        assert (await rl.runs.get("reported-at-17")).progress == progress
    with psycopg.connect(postgres_dsn) as conn:
        found = conn.execute(
            "SELECT to_regclass(%s)", (f'"{schema}".runlane_run_progress',)
        ).fetchone()
    assert found == (None,)


async def test_version_19_tests_only_the_rate_key_on_insert_and_keyed_runs_still_wait(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 18, "queued-at-18")
    assert await rl.migrate() == ALL_MIGRATIONS[18:]
    keyed = Runlane(
        lane=postgres_lane(postgres_dsn, schema=schema),
        queues=[queue("main", default=True, rate_limit="5/s", rate_limit_by="key")],
        tasks=[noop],
        environment="migrations",
    )
    runs = sql.Identifier(schema, "runlane_runs")
    limits = sql.Identifier(schema, "runlane_rate_limits")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        definition = conn.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgname = %s AND tgrelid = %s::regclass",
            ("runlane_rate_key_run_created", f'"{schema}".runlane_runs'),
        ).fetchone()
        assert definition is not None and "WHEN ((new.rate_key IS NOT NULL))" in definition[0]
        # A keyed run written leased (not waiting) leaves its partition alone.
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (environment, id, task_id, queue, status, payload, run_at, "
                "first_run_at, created_at, updated_at, event_sequence, source, rate_key) VALUES "
                "('migrations', 'leased-at-19', 'noop', 'main', 'running', 'null', 1, 1, 1, 1, "
                "1, '{{\"type\": \"trigger\"}}', 'tenant-0')"
            ).format(runs)
        )
    async with keyed:
        done = await keyed.execute_next()
        assert done is not None and done.id == "queued-at-18"
        later = await keyed.trigger(noop, None, rate_key="tenant-1")
        with psycopg.connect(postgres_dsn) as conn:
            partitions = conn.execute(
                sql.SQL("SELECT rate_key, due_at FROM {} ORDER BY rate_key").format(limits)
            ).fetchall()
        assert "tenant-0" not in [key for key, _ in partitions]
        assert ("tenant-1", to_micros(later.run_at)) in partitions
        assert await keyed.execute_next() is not None
        assert (await keyed.runs.get(later.id)).status.value == "succeeded"


def _indexes(dsn: str, schema: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = %s AND tablename = 'runlane_runs'",
            (schema,),
        ).fetchall()
    return {name: definition.replace(f'"{schema}".', "") for name, definition in rows}


async def test_version_20_drops_two_run_indexes_and_a_transport_lane_keeps_its_delivery_index(
    postgres_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 19, "queued-at-19")
    before = _indexes(postgres_dsn, schema)
    gone = {"runlane_runs_claimable", "runlane_runs_undelivered", "runlane_runs_reserved"}
    assert gone <= before.keys()
    # A lane without a transport (rl's) migrates: none of the three is left.
    assert await rl.migrate() == ALL_MIGRATIONS[19:]
    after = _indexes(postgres_dsn, schema)
    assert before.keys() - after.keys() == gone
    async with rl:
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-19"
    # A lane with a transport warns of the schema until it migrates, which puts the
    # delivery indexes back as they were (and reports no migration: none was applied).
    transported = PostgresStorage(postgres_dsn, schema=schema, deliveries=True)
    with caplog.at_level(logging.WARNING, logger="runlane.postgres"):
        await transported.open()
        await transported.close()
    (warning,) = [
        r.getMessage() for r in caplog.records if "runlane_runs_undelivered" in r.getMessage()
    ]
    assert "runlane migrate" in warning
    caplog.clear()
    assert await transported.migrate() == []
    restored = _indexes(postgres_dsn, schema)
    assert restored == {k: v for k, v in before.items() if k != "runlane_runs_claimable"}
    # The lane without a transport leaves it alone from then on.
    assert await rl.migrate() == []
    assert _indexes(postgres_dsn, schema) == restored
    with caplog.at_level(logging.WARNING, logger="runlane.postgres"):
        await transported.open()
        await transported.close()
    assert not [r for r in caplog.records if "runlane_runs_undelivered" in r.getMessage()]


async def test_version_21_skips_the_trigger_for_an_announced_environment_and_waiters_still_wake(
    postgres_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waiters hear of a finish only by its notification (no re-read meanwhile).
    monkeypatch.setattr(waiting_module, "REREAD_INTERVAL", 60.0)
    rl = await _queued_run_at_version(postgres_dsn, schema, 20, "queued-at-20")
    assert await rl.migrate() == ALL_MIGRATIONS[20:]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        definition = conn.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgname = %s AND tgrelid = %s::regclass",
            ("runlane_runs_finished", f'"{schema}".runlane_runs'),
        ).fetchone()
    assert definition is not None
    assert "current_setting('runlane.announced'::text, true)" in definition[0]
    async with rl:
        # Settled by the worker's statement, which announces it itself.
        waiting = asyncio.ensure_future(rl.runs.wait("queued-at-20", timeout="10s"))
        await asyncio.sleep(0.2)
        done = await rl.execute_next()
        assert done is not None and done.id == "queued-at-20"
        assert (await asyncio.wait_for(waiting, 5)).status.value == "succeeded"
        # Finished by SQL of the application's own: the trigger announces it.
        other = await rl.trigger(noop, None)
        waiting = asyncio.ensure_future(rl.runs.wait(other.id, timeout="10s"))
        await asyncio.sleep(0.2)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("UPDATE {} SET status = 'cancelled' WHERE id = %s").format(
                    sql.Identifier(schema, "runlane_runs")
                ),
                (other.id,),
            )
        assert (await asyncio.wait_for(waiting, 5)).status.value == "cancelled"


def _claim_counting_key_locks(dsn: str, schema: str, now: int) -> tuple[list[str], int]:
    """The unbounded claim's statement, as the driver sends it, in a transaction that
    counts the calls of the key locks' function: the ids claimed, and that count."""
    statement = QUERY_TEMPLATES["claim_due_runs"].replace("{schema}", f'"{schema}"')
    params = {
        "environment": "migrations", "queues": ["main"], "limit": 10, "now": now,
        "key_lock_prefix": "k:", "worker_id": "w", "lease_token": "t",
        "lease_expires_at": now + 60_000_000, "horizon": now,
    }  # fmt: skip
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("SET LOCAL track_functions = 'pl'")
        claimed = [row[1] for row in conn.execute(statement, params).fetchall()]
        (calls,) = conn.execute(
            "SELECT pg_stat_get_xact_function_calls(%s::regproc)",
            (f'"{schema}".runlane_lock_claimable_keys',),
        ).fetchone() or (None,)
    return claimed, int(calls or 0)


async def test_version_22_claims_without_key_locks_until_a_keyed_delivery_exists(
    postgres_dsn: str, schema: str
) -> None:
    rl = await _queued_run_at_version(postgres_dsn, schema, 21, "queued-at-21")
    assert await rl.migrate() == ALL_MIGRATIONS[21:]
    runs = sql.Identifier(schema, "runlane_runs")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        definitions = dict(
            conn.execute(
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                (f'"{schema}".runlane_runs',),
            ).fetchall()
        )
    assert "WHEN (new.has_dependents)" in definitions["runlane_dependency_settled"]
    assert "WHEN ((new.rate_key IS NOT NULL))" in definitions["runlane_rate_key_run_waiting"]
    # Task runs only: the claim takes no key lock.
    assert _claim_counting_key_locks(postgres_dsn, schema, 10) == (["queued-at-21"], 0)
    # An unfinished keyed delivery in the environment (leased: not claimable) sends the
    # claim through the key locks again; a plain run is claimed on that path too.
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (environment, id, task_id, queue, status, payload, run_at, "
                "first_run_at, created_at, updated_at, event_sequence, source, partition_key, "
                "subscription_mode, message_sequence, lease_expires_at) VALUES "
                "('migrations', 'keyed', 'sub', 'main', 'running', 'null', 1, 1, 1, 1, 1, "
                "'{{\"type\": \"trigger\"}}', 'k', 'exclusive', 1, 1000), "
                "('migrations', 'plain', 'noop', 'main', 'queued', 'null', 1, 1, 1, 1, 1, "
                '\'{{"type": "trigger"}}\', NULL, NULL, NULL, NULL)'
            ).format(runs)
        )
    assert _claim_counting_key_locks(postgres_dsn, schema, 10) == (["plain"], 1)


async def test_version_23_names_the_queues_that_hold_runs_with_concurrency_keys(
    postgres_dsn: str, schema: str
) -> None:
    older = PostgresStorage(postgres_dsn, schema=schema)
    older._migrations = older._migrations[:22]
    await older.migrate()
    runs = sql.Identifier(schema, "runlane_runs")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (environment, id, task_id, queue, status, payload, run_at, "
                "first_run_at, created_at, updated_at, event_sequence, source, concurrency_key) "
                "VALUES ('migrations', 'keyed', 'noop', 'main', 'succeeded', 'null', 1, 1, 1, 1, "
                "1, '{{\"type\": \"trigger\"}}', 'k'), "
                "('migrations', 'plain', 'noop', 'other', 'queued', 'null', 1, 1, 1, 1, 1, "
                '\'{{"type": "trigger"}}\', NULL)'
            ).format(runs)
        )
    assert await PostgresStorage(postgres_dsn, schema=schema).migrate() == ALL_MIGRATIONS[22:]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        named = conn.execute(
            sql.SQL("SELECT environment, queue FROM {}").format(
                sql.Identifier(schema, "runlane_partitioned_queues")
            )
        ).fetchall()
    # Finished or not, a keyed run names its queue; a queue without one is not named.
    assert named == [("migrations", "main")]
