"""A PostgreSQL claim reads about as many rows as it takes, however long the backlog.

A plan that walks every due run to find the few it claims makes a drain quadratic:
each claim of 100 runs paid for the whole backlog (migration 010 removed such a
walk). The claim function is called here on the test's own connection, so the
rows its index scans fetched can be read from ``pg_stat_xact_user_tables`` in the
same transaction, then rolled back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import psycopg

from runlane.ports.storage import NewDelivery, NewMessage, NewRun, StoresMessages
from runlane.storage.postgres import PostgresStorage
from runlane.storage.sql.claiming import key_lock_prefix
from runlane.topics.publishing import canonical_envelope
from runlane.types.clock import to_micros
from runlane.types.priorities import DEFAULT_PRIORITY_WINDOW, claim_horizon
from runlane.types.runs import RunSource, RunStatus, SubscriptionMode

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BACKLOG = 3_000
CLAIMED = 10
#: Rows the claim may fetch: what it takes, the keyed rows it weighs, the rows it
#: updates (each found again by primary key), with room to spare; far below BACKLOG.
MOST_FETCHED = 200


def _runs(count: int) -> list[NewRun]:
    return [
        NewRun(
            id=f"r{n:05d}",
            task_id="noop",
            queue="main",
            status=RunStatus.QUEUED,
            payload=n,
            payload_json=str(n),
            run_at=NOW - timedelta(minutes=1),
            source=RunSource(),
        )
        for n in range(count)
    ]


def _keyed_message(n: int) -> NewMessage:
    return NewMessage(
        id=f"m{n}",
        topic="orders",
        payload=n,
        payload_json=str(n),
        attributes={},
        envelope=canonical_envelope("orders", n, {}),
        window_ends_at=NOW + timedelta(hours=1),
        deliveries=(
            NewDelivery(f"d{n}", "ship", "main", SubscriptionMode.EXCLUSIVE, f"key-{n % 3}"),
        ),
    )


def _rows_fetched_by_a_claim(dsn: str, store: PostgresStorage, environment: str) -> int:
    """Claim CLAIMED runs (rolled back); the runlane_runs rows its scans fetched."""
    schema = store.schema
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Statistics as a busy database has them (autovacuum analyses the table): a
        # generic plan's choices follow them.
        conn.execute(f"ANALYZE {schema}.runlane_runs")
    with psycopg.connect(dsn) as conn:
        claimed = conn.execute(
            f"SELECT id FROM {schema}.runlane_claim_due_runs("
            "%s, %s, %s, %s, %s, 'w', 't', %s, 'iso', %s)",
            (
                environment,
                ["main"],
                CLAIMED,
                to_micros(NOW),
                key_lock_prefix(schema, environment),
                to_micros(NOW + timedelta(minutes=5)),
                # The horizon (migration 015): now plus the default priority window.
                claim_horizon(to_micros(NOW), DEFAULT_PRIORITY_WINDOW),
            ),
        ).fetchall()
        assert len(claimed) == CLAIMED
        (fetched,) = conn.execute(
            "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) "
            "FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
            (f"{schema}.runlane_runs",),
        ).fetchone() or (None,)
        conn.rollback()
    assert fetched is not None
    return int(fetched)


async def test_a_claim_of_task_runs_does_not_read_the_backlog(
    postgres_storage: PostgresStorage, postgres_dsn: str, environment: str
) -> None:
    await postgres_storage.create_runs(environment, _runs(BACKLOG), NOW)
    assert _rows_fetched_by_a_claim(postgres_dsn, postgres_storage, environment) < MOST_FETCHED


async def test_a_claim_holding_key_locks_does_not_read_the_backlog(
    postgres_storage: PostgresStorage, postgres_dsn: str, environment: str
) -> None:
    await postgres_storage.create_runs(environment, _runs(BACKLOG), NOW)
    topics = cast(StoresMessages, postgres_storage)
    await topics.publish_messages(environment, [_keyed_message(n) for n in range(6)], NOW)
    assert _rows_fetched_by_a_claim(postgres_dsn, postgres_storage, environment) < MOST_FETCHED
