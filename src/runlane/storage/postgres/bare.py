"""Statements sent through libpq directly: the lone trigger's one statement.

A lone trigger is one statement and one commit, and the client's share of it is
mostly psycopg's cursor layer: the query's conversion, a transformer and its
dumpers per call, and the generators that send and wait. psycopg exposes the libpq
binding it runs on (``conn.pgconn``, :mod:`psycopg.pq`) for what its API does not
cover; through it a statement prepared once per connection is sent with one call
and its result read with a few. In a loop of the lone trigger's ``INSERT`` on one
connection that made the statement about 15 % faster than a kept cursor's
``execute`` (``bench/README.md``).

Only statements whose parameters are text, integers or NULL go this way, and the
caller reads the raw result (:class:`psycopg.pq.PGresult`). A server error comes
back as the :class:`psycopg.Error` subclass its SQLSTATE names, as from a cursor.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result
from psycopg.pq.abc import PGconn, PGresult

_PLACEHOLDER = re.compile(r"%\((\w+)\)([sb])|%%")
#: Type oids a prepared statement's parameters are declared with (0: the server infers).
_INT8_OID = 20
_BOOL_OID = 16
_UNKNOWN_OID = 0
#: SQLSTATE of a prepared statement the session no longer has (DEALLOCATE ALL).
_NO_SUCH_STATEMENT = b"26000"
#: A failed statement's status, as a plain int (an enum member's lookup per call costs).
_FATAL_ERROR = int(pq.ExecStatus.FATAL_ERROR)


@dataclass(frozen=True, slots=True)
class BareStatement:
    """A statement of the driver's, as libpq takes it: ``$n`` placeholders and the
    parameter names in their order."""

    name: bytes
    text: bytes
    params: tuple[str, ...]

    @classmethod
    def from_query(cls, name: str, query: str) -> BareStatement:
        """``query`` (psycopg's ``%(name)s`` placeholders) under the prepared name
        ``runlane_<name>``."""
        order: dict[str, int] = {}

        def number(match: re.Match[str]) -> str:
            if match.group(0) == "%%":
                return "%"
            if match.group(2) != "s":
                raise ValueError(f"{name}: binary parameters are not sent bare")
            return f"${order.setdefault(match.group(1), len(order) + 1)}"

        text = _PLACEHOLDER.sub(number, query)
        return cls(f"runlane_{name}".encode(), text.encode(), tuple(order))


async def execute_bare(
    pgconn: PGconn,
    encoding: str,
    prepared: set[bytes],
    statement: BareStatement,
    params: Mapping[str, Any],
) -> PGresult:
    """Run ``statement`` on ``pgconn`` (autocommit, idle, used by nobody else; text in
    ``encoding``), preparing it first when ``prepared`` (the names prepared on this
    connection) lacks it; the statement's result. A server error raises as a cursor's
    would."""
    values = [params[name] for name in statement.params]
    for attempt in (1, 2):
        if statement.name not in prepared:
            pgconn.send_prepare(statement.name, statement.text, param_types=_types(values))
            check_result(await read_result(pgconn), encoding)
            prepared.add(statement.name)
        pgconn.send_query_prepared(statement.name, _encoded(values, encoding))
        result = await read_result(pgconn)
        if attempt == 1 and statement_lost(result):
            # The session lost it (DEALLOCATE ALL, DISCARD ALL): prepare it again.
            prepared.discard(statement.name)
            continue
        check_result(result, encoding)
        return result
    raise AssertionError("unreachable")


def send_prepared(
    pgconn: PGconn, encoding: str, statement: BareStatement, params: Mapping[str, Any]
) -> None:
    """Send ``statement``, already prepared on ``pgconn``, to be read with
    :func:`read_result` (then :func:`statement_lost` and :func:`check_result`): what
    :func:`execute_bare` does once the statement is prepared, with no coroutine."""
    values = [params[name] for name in statement.params]
    pgconn.send_query_prepared(statement.name, _encoded(values, encoding))


def statement_lost(result: PGresult) -> bool:
    """Whether ``result`` says the session no longer has the prepared statement."""
    return (
        result.status == _FATAL_ERROR
        and result.error_field(pq.DiagnosticField.SQLSTATE) == _NO_SUCH_STATEMENT
    )


def _types(values: Sequence[Any]) -> list[int]:
    return [
        _BOOL_OID
        if isinstance(value, bool)
        else _INT8_OID
        if isinstance(value, int)
        else _UNKNOWN_OID
        for value in values
    ]


def _encoded(values: Sequence[Any], encoding: str) -> list[bytes | None]:
    # One comprehension, exact types first: a lone trigger's values are text, None and
    # small integers. ``str.encode()`` without an argument is UTF-8 with no codec lookup.
    if encoding == "utf-8":
        return [
            value.encode()
            if type(value) is str
            else None
            if value is None
            else b"%d" % value
            if type(value) is int
            else _other(value, encoding)
            for value in values
        ]
    return [
        value.encode(encoding)
        if type(value) is str
        else None
        if value is None
        else b"%d" % value
        if type(value) is int
        else _other(value, encoding)
        for value in values
    ]


def _other(value: Any, encoding: str) -> bytes:
    """A value of a subclass of the types a bare statement takes (a bool is an int,
    but goes as t or f)."""
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, str):
        return value.encode(encoding)
    if isinstance(value, int):
        return b"%d" % value
    raise TypeError(f"a bare statement takes text, integers or None, not {value!r}")


def check_result(result: PGresult, encoding: str) -> None:
    """Raise a failed statement's error as a cursor would (the psycopg.Error its
    SQLSTATE names)."""
    if result.status == _FATAL_ERROR:
        raise error_from_result(result, encoding=encoding)


async def read_result(pgconn: PGconn) -> PGresult:
    """Send what libpq holds, then read until the statement's results end: its result
    (one statement, one result)."""
    loop = asyncio.get_running_loop()
    fd = pgconn.socket
    while pgconn.flush():
        # A large statement (a big payload) may not fit the socket's buffer: wait until
        # it can take more, reading whatever the server sends meanwhile (as libpq asks).
        if await _ready(loop, fd, write=True):
            pgconn.consume_input()
    result: PGresult | None = None
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():
            got = pgconn.get_result()
            if got is None:
                if result is None:
                    raise psycopg.OperationalError("the server sent no result")
                return result
            result = got
        # Wait until the socket is readable: _ready's work, inline (no coroutine and
        # no closure per wait; every statement waits at least once).
        ready = loop.create_future()
        loop.add_reader(fd, _wake, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> bool:
    """Wait until ``fd`` is readable, or (``write``) readable or writable; whether it
    is readable."""
    ready: asyncio.Future[bool] = loop.create_future()

    def wake(readable: bool) -> None:
        if not ready.done():
            ready.set_result(readable)

    loop.add_reader(fd, wake, True)
    if write:
        loop.add_writer(fd, wake, False)
    try:
        return await ready
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)
