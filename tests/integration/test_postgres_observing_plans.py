"""PostgreSQL plans of the statements that observe runs, on a schema holding a million
runs and a day of rollup for twenty queues: the throughput charts read a range of the
rollup's keys, and a progress write finds each run by primary key."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from runlane.storage.postgres import PostgresStorage
from runlane.storage.postgres.queries import QUERY_TEMPLATES

MINUTE = 60_000_000


@pytest.fixture(scope="module")
def filled(postgres_dsn: str) -> Iterator[tuple[psycopg.Connection[tuple[object, ...]], str]]:
    """A migrated schema with 1,000,000 runs (100,000 running) and two days of rollup
    (20 queues x 2,880 minutes x 8 series), analyzed."""
    import asyncio

    schema = f"plans_{uuid.uuid4().hex[:8]}"
    asyncio.run(PostgresStorage(postgres_dsn, schema=schema).migrate())
    conn = psycopg.connect(postgres_dsn, autocommit=True)
    quoted = sql.Identifier(schema)
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.runlane_runs (environment, id, task_id, queue, status, payload, "
            "run_at, created_at, updated_at, event_sequence, source) "
            "SELECT 'e', 'r' || i, 't', 'q' || (i % 20), "
            "CASE WHEN i % 10 = 0 THEN 'running' ELSE 'succeeded' END, 'null', i, i, i, 3, "
            '\'{{"type": "trigger"}}\' FROM generate_series(1, 1000000) AS i'
        ).format(quoted)
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.runlane_throughput (environment, queue, minute, series, n) "
            "SELECT 'e', 'q' || q, m::bigint * %s, s, 1 FROM generate_series(0, 19) AS q, "
            "generate_series(0, 2879) AS m, unnest(ARRAY['succeeded', 'failed', 'retried', "
            "'latency_00', 'latency_01', 'latency_02', 'latency_03', 'latency_04']) AS s"
        ).format(quoted),
        (MINUTE,),
    )
    # A tenth of them running under a lease, as a busy store's are.
    conn.execute(
        sql.SQL(
            "UPDATE {}.runlane_runs SET lease_owner = 'w', lease_token = 't' || id, "
            "lease_expires_at = 9000000000000000 WHERE status = 'running'"
        ).format(quoted)
    )
    conn.execute(sql.SQL("ANALYZE {}.runlane_runs").format(quoted))
    conn.execute(sql.SQL("ANALYZE {}.runlane_throughput").format(quoted))
    try:
        yield conn, f'"{schema}"'
    finally:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(quoted))
        conn.close()


def _plan(
    filled: tuple[psycopg.Connection[tuple[object, ...]], str], name: str, params: dict[str, object]
) -> str:
    conn, schema = filled
    statement = QUERY_TEMPLATES[name].replace("{schema}", schema)
    with conn.transaction(force_rollback=True):
        rows = conn.execute(f"EXPLAIN {statement}", params).fetchall()
    plan = "\n".join(str(row[0]) for row in rows)
    print(f"\n{name}:\n{plan}")
    return plan


def test_a_queue_chart_reads_a_range_of_the_rollup_primary_key(filled: tuple) -> None:  # type: ignore[type-arg]
    day_ago = 1_440 * MINUTE
    params = {"environment": "e", "since": day_ago, "bucket": 900_000_000, "queue": "q3"}
    plan = _plan(filled, "read_queue_throughput", params)
    assert "runlane_throughput_pkey" in plan and "Seq Scan" not in plan


def test_the_overview_chart_reads_a_range_of_minutes(filled: tuple) -> None:  # type: ignore[type-arg]
    hour_ago = (2_880 - 60) * MINUTE
    params = {"environment": "e", "since": hour_ago, "bucket": 60_000_000, "queue": None}
    plan = _plan(filled, "read_throughput", params)
    assert "runlane_throughput_by_minute" in plan and "Seq Scan" not in plan


def test_a_progress_write_finds_each_run_by_primary_key(filled: tuple) -> None:  # type: ignore[type-arg]
    writes = [{"id": f"r{i}", "token": "t", "attempt": 1, "fraction": 0.5, "message": None,
               "data": None} for i in range(32)]  # fmt: skip
    ids = [write["id"] for write in writes]
    params = {"environment": "e", "writes": json.dumps(writes), "ids": ids, "now": 0}
    plan = _plan(filled, "write_progress", params)
    assert "runlane_runs_pkey" in plan and "Seq Scan" not in plan
