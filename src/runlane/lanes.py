"""Lane builders: one storage per lane, with optional wakeup and topic transports."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict, Unpack

from runlane.ports.lane import Lane
from runlane.ports.topic_transport import TopicTransport
from runlane.types.errors import configuration_error

#: SQLite's name for a database that lives in memory only.
MEMORY = ":memory:"


class SqliteOptions(TypedDict, total=False):
    """Options of :func:`sqlite_lane` (see :class:`runlane.storage.sqlite.SqliteStorage`)."""

    busy_timeout_ms: int
    synchronous: str


class PostgresOptions(TypedDict, total=False):
    """Options of :func:`postgres_lane` (see :class:`runlane.storage.postgres.PostgresStorage`)."""

    schema: str
    min_size: int
    max_size: int
    application_name: str | None
    connect_timeout: float
    pool_timeout: float


def sqlite_lane(
    path: str | Path = "runlane.db",
    *,
    transport: Any = None,
    topic_transport: TopicTransport | None = None,
    **options: Unpack[SqliteOptions],
) -> Lane:
    """The embedded default: one SQLite file, created with its schema on first use.

    A relative ``path`` is made absolute here, against the working directory of
    the process that builds the lane, so a worker or CLI started from another
    directory still opens the same file (``":memory:"`` stays in memory).
    ``topic_transport`` (``sns_transport(...)``) carries the topics bound to it.

    >>> lane = sqlite_lane("var/runlane.db")
    """
    from runlane.storage.sqlite import SqliteStorage

    if not isinstance(path, str | Path) or not str(path):
        raise configuration_error("sqlite_lane needs a file path.")
    _check_options(SqliteStorage, options, "sqlite_lane")
    where = str(path) if str(path) == MEMORY else str(Path(path).expanduser().absolute())
    return Lane(
        SqliteStorage(where, deliveries=transport is not None, **options),
        transport,
        name="sqlite",
        location=where,
        topic_transport=topic_transport,
    )


def postgres_lane(
    dsn: str,
    *,
    transport: Any = None,
    topic_transport: TopicTransport | None = None,
    **options: Unpack[PostgresOptions],
) -> Lane:
    """The production lane: PostgreSQL (``pip install 'runlane[postgres]'``).

    ``topic_transport`` (``sns_transport(...)``) carries the topics bound to it.

    >>> lane = postgres_lane("postgresql://app@db/app")
    """
    try:
        from runlane.storage.postgres import PostgresStorage
    except ImportError as error:  # pragma: no cover - depends on the install
        raise configuration_error(
            "postgres_lane needs psycopg with a libpq: install runlane[postgres] (uses the "
            "system's libpq) or runlane[postgres-binary] (bundles one).",
            missing=str(error),
        ) from None
    if not isinstance(dsn, str) or not dsn:
        raise configuration_error("postgres_lane needs a connection string.")
    _check_options(PostgresStorage, options, "postgres_lane")
    storage = PostgresStorage(dsn, deliveries=transport is not None, **options)
    return Lane(
        storage,
        transport,
        name="postgres",
        location=storage.location,
        topic_transport=topic_transport,
    )


def postgres_sqs_lane(
    *,
    postgres: str,
    sqs: Any,
    sns: TopicTransport | None = None,
    **options: Unpack[PostgresOptions],
) -> Lane:
    """The production lane: PostgreSQL for truth, SQS for wakeups, optionally SNS topics.

    >>> lane = postgres_sqs_lane(postgres=dsn, sqs=sqs_transport(client=client, queues=[...]),
    ...                          sns=sns_transport(client=sns_client, topics=[...]))
    """
    if sqs is None:
        raise configuration_error("postgres_sqs_lane needs sqs=sqs_transport(...).")
    return postgres_lane(postgres, transport=sqs, topic_transport=sns, **options)


def _check_options(driver: Callable[..., Any], options: Mapping[str, Any], builder: str) -> None:
    # Type checkers catch a misspelt option; this catches it for everyone else.
    # ``deliveries`` follows the lane's transport: the builder sets it, not the caller.
    accepted = set(inspect.signature(driver).parameters) - {"self", "path", "dsn", "deliveries"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise configuration_error(
            f"{builder} does not take {unknown}; it takes {sorted(accepted)}.", unknown=unknown
        )
