"""Turning psycopg failures into typed errors that never leak the DSN's password.

libpq reports connection failures without a SQLSTATE, so those are classified
by their (English) text; everything else by SQLSTATE class. Whatever the driver
said goes into ``meta["detail"]`` with the password scrubbed out; messages are
our own words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from runlane.types.errors import ErrorCode, RunlaneError

#: SQLSTATEs that mean "the same transaction may succeed if tried again".
CONFLICT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
#: A unique constraint refused a write: an id (or key) that exists already.
UNIQUE_VIOLATION = "23505"
#: The schema (or one of its tables) is not there: ``runlane migrate`` was not run.
MISSING_SCHEMA_SQLSTATES = frozenset({"42P01", "3F000"})
#: Connection exceptions, operator intervention, insufficient resources, system errors.
UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57", "58")

_CREDENTIAL_FAILURES = re.compile(
    r"password authentication failed|authentication failed|no password supplied"
    r"|password is required|no pg_hba\.conf entry|role \".*\" does not exist"
    r"|database \".*\" does not exist|permission denied for database"
    r"|invalid (?:connection option|integer value|sslmode value|port)",
    re.IGNORECASE,
)
#: ``password=...`` settings and ``scheme://user:password@`` URL parts, with their replacements.
_PASSWORD_SETTINGS = (
    (re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE), r"\1***"),
    (re.compile(r"(://[^:/@\s]*:)[^@\s]*@"), r"\1***@"),
)


@dataclass(frozen=True, slots=True)
class ConnectionTarget:
    """Where a DSN points, minus the password; scrubs driver text of that password."""

    host: str | None
    port: str | None
    dbname: str | None
    user: str | None
    password: str | None

    @classmethod
    def from_dsn(cls, dsn: str) -> ConnectionTarget:
        """Parse ``dsn`` (URL or ``key=value``); raise CONFIGURATION_INVALID if it is malformed."""
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error:
            raise RunlaneError(
                ErrorCode.CONFIGURATION_INVALID,
                "the PostgreSQL connection string could not be parsed; use "
                "'postgresql://user:password@host:port/dbname' or 'host=... dbname=...'.",
            ) from None
        return cls(
            host=_text(params.get("host") or params.get("hostaddr")),
            port=_text(params.get("port")),
            dbname=_text(params.get("dbname")),
            user=_text(params.get("user")),
            password=_text(params.get("password")),
        )

    @property
    def meta(self) -> dict[str, Any]:
        """Safe connection facts for error ``meta`` and ``repr``."""
        return {"host": self.host, "port": self.port, "dbname": self.dbname, "user": self.user}

    def scrub(self, text: str) -> str:
        """``text`` with the password (raw or URL-encoded) and password settings masked."""
        if self.password:
            for form in {self.password, quote(self.password, safe=""), quote_plus(self.password)}:
                text = text.replace(form, "***")
        for pattern, replacement in _PASSWORD_SETTINGS:
            text = pattern.sub(replacement, text)
        return text

    def error(self, error: BaseException, *, schema: str | None = None) -> RunlaneError:
        """The typed error for a psycopg (or pool) failure talking to this target."""
        sqlstate = getattr(error, "sqlstate", None)
        detail = self.scrub(str(error).strip())
        meta = {
            **self.meta,
            "schema": schema,
            "driver_error": type(error).__name__,
            "sqlstate": sqlstate,
            "detail": detail,
        }
        where = f"PostgreSQL at {self.host or 'localhost'}:{self.port or 5432}"
        if isinstance(error, PoolTimeout):
            return RunlaneError(
                ErrorCode.STORAGE_UNAVAILABLE,
                f"no connection to {where} became available in time; the server may be down "
                "or every pooled connection busy (raise max_size).",
                meta=meta,
                retryable=True,
            )
        if sqlstate in CONFLICT_SQLSTATES:
            return RunlaneError(
                ErrorCode.STORAGE_CONFLICT,
                "a concurrent transaction conflicted with this one; try again.",
                meta=meta,
                retryable=True,
            )
        if sqlstate == UNIQUE_VIOLATION:
            # Trying again would meet the same row: the caller must choose another id.
            return RunlaneError(
                ErrorCode.STORAGE_CONFLICT,
                "a row with the same id (or unique key) exists already; nothing was written.",
                meta=meta,
            )
        if sqlstate in MISSING_SCHEMA_SQLSTATES:
            return missing_schema(schema, meta)
        if (
            (sqlstate or "").startswith("28")
            or sqlstate in ("3D000", "42501")
            or (sqlstate is None and _CREDENTIAL_FAILURES.search(detail))
        ):
            return RunlaneError(
                ErrorCode.CONFIGURATION_INVALID,
                f"{where} refused the connection settings (user, password, database name or "
                "permissions); check the DSN.",
                meta=meta,
            )
        if (
            sqlstate is None
            or sqlstate.startswith(UNAVAILABLE_SQLSTATE_CLASSES)
            or isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
        ):
            return RunlaneError(
                ErrorCode.STORAGE_UNAVAILABLE,
                f"{where} could not be reached or dropped the connection; it is retried.",
                meta=meta,
                retryable=True,
            )
        return RunlaneError(
            ErrorCode.INTERNAL_ERROR,
            f"{where} rejected a runlane statement (SQLSTATE {sqlstate}).",
            meta=meta,
        )


def missing_schema(schema: str | None, meta: dict[str, Any] | None = None) -> RunlaneError:
    """The lane's tables are not there yet."""
    return RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        f"the runlane schema {schema!r} is missing from this database; "
        "run `runlane migrate` (or `await rl.migrate()`) first.",
        meta={**(meta or {}), "schema": schema},
    )


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
