"""The plan of PostgreSQL's claim on a schema holding 200,000 runnable runs in twenty
queues, a tenth of them with priorities and a tenth not due for hours: each queue's
runs are read from the claim-order expression index (due time less the priority
offset, then id) in order up to the queue's horizon, and the read stops at the limit,
with no sort of the queue's runs.

The claim is a PL/pgSQL function, so its statement's plan is the one auto_explain
reports for the nested statement (sent to this client as a notice)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from runlane.storage.postgres import PostgresStorage
from runlane.storage.postgres.queries import QUERY_TEMPLATES

HOUR = 3_600_000_000
NOW = 1_000 * HOUR


@pytest.fixture(scope="module")
def filled(postgres_dsn: str) -> Iterator[tuple[psycopg.Connection[tuple[object, ...]], str]]:
    schema = f"claim_plans_{uuid.uuid4().hex[:8]}"
    asyncio.run(PostgresStorage(postgres_dsn, schema=schema).migrate())
    conn = psycopg.connect(postgres_dsn, autocommit=True)
    quoted = sql.Identifier(schema)
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.runlane_runs (environment, id, task_id, queue, status, payload, "
            "run_at, created_at, updated_at, event_sequence, source, priority, priority_offset, "
            "rate_key) "
            "SELECT 'e', 'r' || i, 't', 'q' || (i %% 20), "
            "CASE WHEN i %% 10 = 1 THEN 'scheduled' ELSE 'queued' END, 'null', "
            "CASE WHEN i %% 10 = 1 THEN %s + %s ELSE %s - i END, i, i, 1, "
            '\'{{"type": "trigger"}}\', p, p * 30000000, '
            # Queue q7 is limited per key: its runs carry one of three rate keys.
            "CASE WHEN i %% 20 = 7 THEN 'k' || (i %% 3) END "
            "FROM generate_series(1, 200000) AS i, "
            "LATERAL (SELECT CASE WHEN i %% 10 = 2 THEN (i %% 21) - 10 ELSE 0 END AS p) AS pr"
        ).format(quoted),
        (NOW, 5 * HOUR, NOW),
    )
    conn.execute(sql.SQL("ANALYZE {}.runlane_runs").format(quoted))
    try:
        yield conn, f'"{schema}"'
    finally:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(quoted))
        conn.close()


def _claim_plan(filled: tuple[psycopg.Connection[tuple[object, ...]], str]) -> str:
    conn, schema = filled
    notices: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        notices.append(diagnostic.message_primary or "")

    conn.add_notice_handler(keep)
    params = {
        "environment": "e",
        "queues": ["q3", "q4"],
        "horizon": NOW + 300_000_000,
        "limit": 10,
        "now": NOW,
        "key_lock_prefix": "k:",
        "worker_id": "w",
        "lease_token": "t",
        "lease_expires_at": NOW + 60_000_000,
        "lease_expires_iso": "x",
    }
    statement = QUERY_TEMPLATES["claim_due_runs"].replace("{schema}", schema)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("LOAD 'auto_explain'")
            conn.execute("SET LOCAL auto_explain.log_min_duration = 0")
            conn.execute("SET LOCAL auto_explain.log_nested_statements = on")
            conn.execute("SET LOCAL auto_explain.log_level = notice")
            claimed = conn.execute(statement, params).fetchall()
    finally:
        conn.remove_notice_handler(keep)
    assert len(claimed) == 10
    plans = [notice for notice in notices if "runlane_runs" in notice and "LockRows" in notice]
    assert plans, notices
    plan = max(plans, key=len)
    print(f"\nclaim_due_runs:\n{plan}")
    return plan


def test_the_claim_reads_each_queue_in_claim_order_from_the_expression_index(
    filled: tuple,  # type: ignore[type-arg]
) -> None:
    plan = _claim_plan(filled)
    lines = plan.splitlines()
    reads = [
        i for i, line in enumerate(lines) if "Index Scan using runlane_runs_claim_order" in line
    ]
    assert reads, plan
    assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
    # The queue's read: Limit -> LockRows -> Index Scan, with no Sort between the
    # limit and the index (a sort there would read every due run of the queue).
    (read,) = reads
    above = lines[:read]
    limit = max(i for i, line in enumerate(above) if "Limit" in line)
    assert not any("Sort" in line for line in lines[limit:read]), plan
    # Its range ends at the queue's horizon: runs due later are not read.
    assert "(run_at - priority_offset) <=" in lines[read + 1], plan


def _generic_plan(
    filled: tuple[psycopg.Connection[tuple[object, ...]], str],
    query: str,
    values: dict[str, str],
    *,
    analyze: bool = False,
) -> str:
    """EXPLAIN of the plan the driver's prepared statement ends up with: a generic one
    (with ``analyze``, as it ran, in a transaction rolled back)."""
    conn, schema = filled
    statement = QUERY_TEMPLATES[query].replace("{schema}", schema)
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    prepared = re.sub(r"%\((\w+)\)[sb]", number, statement).strip().rstrip(";")
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE probe AS {prepared}")
        options = "(ANALYZE, COSTS OFF, TIMING OFF) " if analyze else ""
        rows = conn.execute(
            f"EXPLAIN {options}EXECUTE probe({', '.join(values[n] for n in names)})"
        )
        plan = "\n".join(str(row[0]) for row in rows)
        conn.execute("DEALLOCATE probe")
    print(f"\n{query}:\n{plan}")
    return plan


def test_a_keys_claim_reads_its_runs_in_claim_order_from_its_index(
    filled: tuple,  # type: ignore[type-arg]
) -> None:
    values = {
        "environment": "'e'",
        "queue": "'q7'",
        "rate_key": "'k1'",
        "now": str(NOW),
        "horizon": str(NOW + 300_000_000),
        "limit": "10",
    }
    plan = _generic_plan(filled, "due_rate_keyed_runs", values)
    # One key's runs, read in claim order up to the horizon, stopping at the limit.
    assert "Index Scan using runlane_runs_rate_claim_order" in plan, plan
    assert "Sort" not in plan and "Seq Scan" not in plan and "Bitmap" not in plan, plan
    assert "(run_at - priority_offset) <=" in plan, plan


def test_a_capacity_lock_looks_for_a_due_run_in_claim_order_up_to_the_horizon(
    filled: tuple,  # type: ignore[type-arg]
) -> None:
    values = {
        "environment": "'e'",
        "queues": "'{q3,q4}'",
        "now": str(NOW),
        "horizon": str(NOW + 300_000_000),
        "wait": "false",
        "lock_prefix": "'c:'",
    }
    plan = _generic_plan(filled, "lock_capacity", values)
    assert "Index Scan using runlane_runs_claim_order" in plan or (
        "Index Only Scan using runlane_runs_claim_order" in plan
    ), plan
    assert "Seq Scan on runlane_runs" not in plan and "Bitmap" not in plan, plan
    assert "(run_at - priority_offset) <=" in plan, plan


def test_a_bounded_claim_reads_no_more_due_runs_than_the_queues_limits(
    filled: tuple,  # type: ignore[type-arg]
) -> None:
    """Queues that never held a run with a concurrency key (migration 023): 10,000 due
    runs each, and the claim reads each one's first runs in claim order, as many as its
    limit, then takes the candidates by primary key."""
    values = {
        "environment": "'e'",
        "queues": "'{q3,q4}'::text[]",
        "limits": "'{2,3}'::int[]",
        "limit": "10",
        "now": str(NOW),
        "horizon": str(NOW + 300_000_000),
        "key_lock_prefix": "'k:'",
        "worker_id": "'w'",
        "lease_token": "'t'",
        "lease_expires_at": str(NOW + 60_000_000),
    }
    plan = _generic_plan(filled, "claim_bounded_runs", values, analyze=True)
    lines = plan.splitlines()
    scans = [
        i
        for i, line in enumerate(lines)
        if "using runlane_runs_claim_order" in line and "never executed" not in line
    ]
    # One read per queue, under its limit (2.5 rows a loop, shown rounded down).
    assert len(scans) == 1 and "Limit (actual rows=2 loops=2)" in lines[scans[0] - 1], plan
    assert "CTE Scan on claimed (actual rows=5 loops=1)" in plan, plan
    assert "Bitmap Heap Scan on runlane_runs" not in plan, plan
    table_scans = [line for line in lines if "Seq Scan on runlane_runs" in line]
    assert all("never executed" in line for line in table_scans), plan
