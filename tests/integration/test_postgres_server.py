"""Integration tests for the throwaway PostgreSQL helper in tests/support."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.support.postgres_server import PostgresServer, PostgresUnavailable, postgres_missing


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        postgres_missing(exc.reason)
    try:
        yield server
    finally:
        server.stop()


def _scalar(dsn: str, query: str) -> object:
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_start_connect_and_settings(pg: PostgresServer) -> None:
    assert pg.dsn == f"postgresql://runlane@127.0.0.1:{pg.port}/postgres"
    assert pg.port != 5432
    assert _scalar(pg.dsn, "SELECT current_user") == "runlane"
    assert _scalar(pg.dsn, "SHOW fsync") == "on"
    assert _scalar(pg.dsn, "SHOW max_connections") == "200"
    assert (
        _scalar(
            pg.dsn,
            "SELECT pg_encoding_to_char(encoding) FROM pg_database "
            "WHERE datname = current_database()",
        )
        == "UTF8"
    )


def test_create_database_is_fresh(pg: PostgresServer) -> None:
    dsn = pg.create_database("runlane_helper_test")
    assert dsn.endswith(f":{pg.port}/runlane_helper_test")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE leftover (id int)")
    # Recreating drops the old database (even with a session still open).
    holder = psycopg.connect(dsn)
    try:
        dsn_again = pg.create_database("runlane_helper_test")
    finally:
        holder.close()
    assert dsn_again == dsn
    assert _scalar(dsn, "SELECT count(*) FROM pg_tables WHERE tablename = 'leftover'") == 0


def test_restart_keeps_port_and_data(pg: PostgresServer) -> None:
    dsn = pg.create_database("runlane_restart_test")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE durable (v text)")
        conn.execute("INSERT INTO durable VALUES ('kept')")
    port = pg.port
    live = psycopg.connect(dsn, autocommit=True)
    try:
        pg.restart()
        assert pg.port == port
        with pytest.raises(psycopg.OperationalError):
            live.execute("SELECT 1")
    finally:
        live.close()
    assert _scalar(dsn, "SELECT v FROM durable") == "kept"


def test_stop_is_idempotent_and_cleans_up() -> None:
    server = PostgresServer()
    try:
        with server:
            data_dir = server.data_dir
            assert (data_dir / "PG_VERSION").exists()
            assert _scalar(server.dsn, "SELECT 1") == 1
    except PostgresUnavailable as exc:
        postgres_missing(exc.reason)
    assert not server.running
    assert not Path(data_dir).exists()
    server.stop()  # second stop is a no-op
    with pytest.raises(RuntimeError):
        _ = server.dsn
