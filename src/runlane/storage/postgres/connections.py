"""Connections: settings, the pool's per-connection setup, and its cheap health check."""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from runlane.storage.postgres.sessions import load_json_as_text

DEFAULT_APPLICATION_NAME = "runlane"

#: The listening connection notices a silently dead peer within about a minute.
LISTENER_OPTIONS: dict[str, Any] = {
    "autocommit": True,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def connect_kwargs(
    dsn: str, application_name: str | None, connect_timeout: float
) -> dict[str, Any]:
    """Connection settings the DSN does not already choose."""
    chosen = conninfo_to_dict(dsn)
    kwargs: dict[str, Any] = {}
    if application_name is not None or "application_name" not in chosen:
        kwargs["application_name"] = application_name or DEFAULT_APPLICATION_NAME
    if "connect_timeout" not in chosen:
        kwargs["connect_timeout"] = max(1, round(connect_timeout))
    return kwargs


async def configure_pooled(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every pooled connection hands JSON over as text (see :mod:`.sessions`)."""
    load_json_as_text(conn.adapters)


async def check_pooled(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool check without a round trip in the common case.

    An idle connection has nothing to read. If its socket is readable, the server
    sent something (typically "terminating connection" before a restart) or hung
    up: ask it properly, and the pool replaces it if it is gone. So after a server
    restart, stale connections are dropped before anyone uses them.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection closed")
    if _readable(conn.pgconn.socket):
        await AsyncConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))
