"""PostgreSQL's maintenance lead is an advisory lock on a session of its own: when that
session ends, the lead is free at once, and the old leader learns it has lost it."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import psycopg

from runlane import postgres_lane
from runlane.storage.postgres.leadership import lock_name

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TTL = 15.0


def _end_leader_session(dsn: str, environment: str) -> None:
    """End the session holding ``environment``'s lead, and wait until the server has
    freed its lock (termination is asynchronous)."""
    holder = """
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(%s, 0)
    """
    name = lock_name("runlane", environment)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(holder, (name,)).fetchone()
        assert row is not None, "nobody holds the lead"
        conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        deadline = time.monotonic() + 10
        while conn.execute(holder, (name,)).fetchone() is not None:
            assert time.monotonic() < deadline, "the terminated session kept its lock"
            time.sleep(0.05)


async def test_a_leader_whose_session_ends_loses_the_lead_to_the_next_contender(
    postgres_dsn: str,
) -> None:
    environment = f"lead-{uuid.uuid4().hex[:8]}"
    leader, contender = postgres_lane(postgres_dsn).storage, postgres_lane(postgres_dsn).storage
    try:
        assert await leader.hold_maintenance_lead(environment, "leader", NOW, TTL)
        assert not await contender.hold_maintenance_lead(environment, "contender", NOW, TTL)

        _end_leader_session(postgres_dsn, environment)  # the leader's connection drops

        assert await contender.hold_maintenance_lead(environment, "contender", NOW, TTL)
        # The old leader finds its session gone, contends again on a new one, and loses.
        assert not await leader.hold_maintenance_lead(environment, "leader", NOW, TTL)
    finally:
        await leader.close()
        await contender.close()


async def test_a_leader_whose_session_ends_takes_the_lead_again_if_nobody_else_did(
    postgres_dsn: str,
) -> None:
    environment = f"lead-{uuid.uuid4().hex[:8]}"
    leader = postgres_lane(postgres_dsn).storage
    try:
        assert await leader.hold_maintenance_lead(environment, "leader", NOW, TTL)
        _end_leader_session(postgres_dsn, environment)
        assert await leader.hold_maintenance_lead(environment, "leader", NOW, TTL)
    finally:
        await leader.close()
