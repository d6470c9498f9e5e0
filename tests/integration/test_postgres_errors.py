"""Bad connection settings and lost servers: typed errors, never the password, recovery."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from tests.support.postgres_server import PostgresServer

from runlane import Context, ErrorCode, Runlane, RunlaneError, postgres_lane, queue, task

PASSWORD = "pw-S3cret/with:odd@chars"
#: The password as it appears URL-encoded in a DSN.
ENCODED_PASSWORD = "pw-S3cret%2Fwith%3Aodd%40chars"
ROLE = "runlane_pw_user"


@task("noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


def _runtime(dsn: str, environment: str, **options: Any) -> Runlane:
    return Runlane(
        lane=postgres_lane(dsn, **options),
        queues=[queue("main", default=True)],
        tasks=[noop],
        environment=environment,
    )


def _with_credentials(dsn: str, user: str, password: str | None = None) -> str:
    parts = urlsplit(dsn)
    host = parts.hostname or "127.0.0.1"
    auth = f"{user}:{password}" if password is not None else user
    return urlunsplit(parts._replace(netloc=f"{auth}@{host}:{parts.port}"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _assert_no_password(error: RunlaneError) -> None:
    shown = " ".join([str(error), repr(error), error.message, repr(error.meta)])
    assert PASSWORD not in shown and ENCODED_PASSWORD not in shown, shown
    assert "S3cret" not in shown, shown


async def _open_error(rl: Runlane) -> RunlaneError:
    with pytest.raises(RunlaneError) as caught:
        await rl.open()
    return caught.value


@pytest.fixture
def password_role(postgres_server: PostgresServer | None, postgres_dsn: str) -> Iterator[str]:
    """A role that must log in with ``PASSWORD`` (scram), on the throwaway server."""
    if postgres_server is None:
        pytest.skip("needs the throwaway server to configure password authentication")
    hba = postgres_server.data_dir / "pg_hba.conf"
    line = f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
        if not exists:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(ROLE), sql.Literal(PASSWORD)
                )
            )
        if line not in hba.read_text():
            hba.write_text(line + hba.read_text())
            conn.execute("SELECT pg_reload_conf()")
    yield ROLE


async def test_an_unreachable_server_is_storage_unavailable_fast_and_keeps_the_password(
    environment: str,
) -> None:
    dsn = f"postgresql://app:{ENCODED_PASSWORD}@127.0.0.1:{_free_port()}/app"
    rl = _runtime(dsn, environment)
    started = time.monotonic()
    error = await _open_error(rl)
    assert time.monotonic() - started < 5
    assert error.code is ErrorCode.STORAGE_UNAVAILABLE and error.retryable
    assert error.meta["host"] == "127.0.0.1" and error.meta["dbname"] == "app"
    assert error.meta["driver_error"] == "OperationalError"
    _assert_no_password(error)
    with pytest.raises(RunlaneError) as migrating:
        await rl.migrate()
    assert migrating.value.code is ErrorCode.STORAGE_UNAVAILABLE
    _assert_no_password(migrating.value)


async def test_a_wrong_password_is_a_configuration_error_without_the_password(
    postgres_dsn: str, password_role: str, environment: str
) -> None:
    wrong = _with_credentials(postgres_dsn, password_role, ENCODED_PASSWORD + "x")
    error = await _open_error(_runtime(wrong, environment))
    assert error.code is ErrorCode.CONFIGURATION_INVALID and not error.retryable
    assert error.meta["user"] == password_role
    _assert_no_password(error)
    right = _with_credentials(postgres_dsn, password_role, ENCODED_PASSWORD)
    missing_schema = await _open_error(_runtime(right, environment, schema="not_migrated"))
    assert "runlane migrate" in missing_schema.message
    _assert_no_password(missing_schema)


async def test_a_password_in_key_value_form_is_never_shown(
    postgres_dsn: str, password_role: str, environment: str
) -> None:
    parts = urlsplit(postgres_dsn)
    dsn = (
        f"host={parts.hostname} port={parts.port} dbname={parts.path.lstrip('/')} "
        f"user={password_role} password='{PASSWORD}x'"
    )
    storage = postgres_lane(dsn).storage
    assert PASSWORD not in repr(storage)
    error = await _open_error(_runtime(dsn, environment))
    assert error.code is ErrorCode.CONFIGURATION_INVALID
    _assert_no_password(error)


async def test_an_unknown_user_or_database_is_a_configuration_error(
    postgres_dsn: str, environment: str
) -> None:
    unknown_user = _with_credentials(postgres_dsn, "nobody_here", ENCODED_PASSWORD)
    parts = urlsplit(postgres_dsn)
    unknown_db = urlunsplit(parts._replace(path="/no_such_database"))
    for dsn in (unknown_user, unknown_db):
        error = await _open_error(_runtime(dsn, environment))
        assert error.code is ErrorCode.CONFIGURATION_INVALID, error
        assert "check the DSN" in error.message
        _assert_no_password(error)


def test_a_malformed_dsn_is_refused_at_the_call_without_echoing_it() -> None:
    with pytest.raises(RunlaneError) as caught:
        postgres_lane(f"host=localhost password='{PASSWORD}")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    _assert_no_password(caught.value)


def test_pool_options_are_validated_at_the_call() -> None:
    dsn = "postgresql://app@localhost/app"
    for options in ({"min_size": 0}, {"max_size": "10"}, {"min_size": 5, "max_size": 2},
                    {"connect_timeout": 0}, {"pool_timeout": -1}):  # fmt: skip
        with pytest.raises(RunlaneError) as caught:
            postgres_lane(dsn, **options)
        assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


@pytest.fixture
async def opened(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    rl = _runtime(postgres_dsn, environment)
    await rl.migrate()
    async with rl:
        yield rl


async def test_a_database_dropped_mid_run_gives_typed_errors(
    postgres_server: PostgresServer | None, environment: str
) -> None:
    if postgres_server is None:
        pytest.skip("needs the throwaway server to drop a database")
    name = f"runlane_dropped_{uuid.uuid4().hex[:6]}"
    dsn = postgres_server.create_database(name)
    rl = _runtime(dsn, environment, pool_timeout=1)
    await rl.migrate()
    async with rl:
        await rl.trigger(noop, None)
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        with pytest.raises(RunlaneError) as caught:
            await rl.trigger(noop, None)
        assert caught.value.code in (ErrorCode.STORAGE_UNAVAILABLE, ErrorCode.CONFIGURATION_INVALID)
        with pytest.raises(RunlaneError) as again:
            await rl.trigger(noop, None)
        assert again.value.code is ErrorCode.CONFIGURATION_INVALID
        assert again.value.meta["dbname"] == name


async def test_a_connection_that_is_not_psycopg_is_refused(opened: Runlane) -> None:
    with pytest.raises(RunlaneError) as caught:
        await opened.trigger(noop, None, connection=object())
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert (await opened.runs.list()).data == []
