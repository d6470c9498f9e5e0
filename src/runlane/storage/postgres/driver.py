"""PostgreSQL storage: psycopg 3 async, a connection pool, one schema of tables.

Hot operations are one statement each on an autocommit connection, so one round
trip and one commit: creating a batch of runs with their events and wakeup,
claiming due runs (``FOR UPDATE SKIP LOCKED``) with their ``run.started`` events,
applying a batch of compare-and-set transitions with their events. Creating runs
with keys, claims on bounded queues and tick duties take short transactions.

The driver never migrates on its own: :meth:`PostgresStorage.open` refuses a
missing or older schema and asks for ``runlane migrate``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import psycopg

from runlane.ports.storage import (
    CreateOutcome,
    GroupStatus,
    LeaseRequest,
    NewGroup,
    NewMessage,
    NewRun,
    NewWaitingRun,
    OutboxMessage,
    OutboxResult,
    PublishOutcome,
    QueuePause,
    QueuePolicy,
    RunFilter,
    ScheduleOccurrence,
    StorageCapabilities,
    Transition,
)
from runlane.storage.postgres import (
    claims,
    creation,
    dependencies,
    dispatch,
    pruning,
    schedules,
    versioning,
)
from runlane.storage.postgres.bare import BareStatement
from runlane.storage.postgres.connections import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_SIZE,
    DEFAULT_MIN_SIZE,
    DEFAULT_POOL_TIMEOUT,
    PostgresConnection,
    count_rows,
    fetch_rows,
)
from runlane.storage.postgres.leadership import MaintenanceLeadership
from runlane.storage.postgres.listener import WorkListener
from runlane.storage.postgres.listing import list_params
from runlane.storage.postgres.params import (
    WORK_CHANNEL,
    creation_batch,
    lease_params,
    lone_outcome,
    lone_params,
    lone_row,
    may_hand_off,
    plain_batch,
)
from runlane.storage.postgres.pruning import prune_params
from runlane.storage.postgres.publishing import PublishCall
from runlane.storage.postgres.queries import QUERY_TEMPLATES
from runlane.storage.postgres.server_time import ServerTime
from runlane.storage.postgres.sessions import AsyncSession, DriverConnection
from runlane.storage.postgres.standby import HandOffCalls
from runlane.storage.postgres.transitions import (
    apply_transitions,
    transition_params,
    transition_rounds,
)
from runlane.storage.postgres.waiting import FinishedRunListeners
from runlane.storage.sql.batches import check_distinct_delivery_ids, check_distinct_ids
from runlane.storage.sql.claiming import key_lock_prefix
from runlane.storage.sql.encoding import micros_or_none
from runlane.storage.sql.facade import SqlStorageBase
from runlane.storage.sql.rows import (
    outbox_from_row,
    queue_pause_from_row,
    run_events_from_rows,
    run_from_row,
    run_page,
)
from runlane.storage.sql.schedules import seen_params
from runlane.types.clock import Clock, to_micros
from runlane.types.runs import Page, Run, RunEvent, RunStatus

Connection = DriverConnection

DEFAULT_SCHEMA = "runlane"
#: Once a lone trigger found no worker standing by on its queue, the next ones skip
#: looking (the statement that looks costs more) for this many seconds.
HANDOFF_RECHECK = 0.02
#: Plain batches at least this large go in with COPY (a transaction of three round
#: trips); smaller ones in one autocommitted INSERT.
COPY_THRESHOLD = 64

POSTGRES_CAPABILITIES = StorageCapabilities(
    reads_run_history=True,
    prunes_runs=True,
    enforces_idempotency=True,
    stores_messages=True,
)


logger = logging.getLogger("runlane.postgres")


class PostgresStorage(HandOffCalls, SqlStorageBase):
    """Storage in one PostgreSQL schema. Build it through :func:`runlane.postgres_lane`.

    Options: ``schema`` (where the tables live, a plain identifier), ``min_size`` /
    ``max_size`` (the connection pool), ``application_name`` (shown in
    ``pg_stat_activity``), ``connect_timeout`` (seconds before an unreachable server
    fails with STORAGE_UNAVAILABLE) and ``pool_timeout`` (seconds an operation waits
    for a free pooled connection). Settings in the DSN itself win over defaults.

    >>> lane = postgres_lane("postgresql://app@db/app", schema="runlane", max_size=20)
    """

    capabilities = POSTGRES_CAPABILITIES

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = DEFAULT_MIN_SIZE,
        max_size: int = DEFAULT_MAX_SIZE,
        application_name: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
        deliveries: bool = True,
    ) -> None:
        """``deliveries``: the lane wakes workers through a transport, so tick requests
        deliveries and the schema keeps the indexes those requests and the dispatch
        reservations read (``postgres_lane`` passes whether it has a transport;
        :meth:`migrate` creates them, and :meth:`open` warns on a schema without them).
        Without a transport, no run writes them."""
        self._deliveries = deliveries
        self._db = PostgresConnection(
            dsn,
            schema=schema,
            min_size=min_size,
            max_size=max_size,
            application_name=application_name,
            connect_timeout=connect_timeout,
            pool_timeout=pool_timeout,
        )
        self.schema = schema
        quoted = f'"{schema}"'
        self._q = {name: sql.replace("{schema}", quoted) for name, sql in QUERY_TEMPLATES.items()}
        # A lone trigger's statements go through libpq directly (bare.py).
        self._insert_run = BareStatement.from_query("insert_run", self._q["insert_run"])
        self._insert_run_handoff = BareStatement.from_query(
            "insert_run_handoff", self._q["insert_run_handoff"]
        )
        self._migrations = [
            (version, name, sql.replace("{schema}", quoted))
            for version, name, sql in versioning.MIGRATIONS
        ]
        self._opening: asyncio.Lock | None = None
        self._listener: WorkListener | None = None
        #: Queues limited per key this driver prepared for its claims (environment and
        #: queue): older runs adopted into the unkeyed partition, next tokens retimed.
        self._rate_keys_adopted: set[str] = set()
        self._finished = FinishedRunListeners(self._db.connect_listener)
        #: Per (environment, queue): until when lone triggers skip looking for an offer.
        self._no_offer_until: dict[tuple[str, str], float] = {}
        self._leadership = MaintenanceLeadership(self._db.connect_listener, schema)
        self._time = ServerTime(self.location)

    def __repr__(self) -> str:
        target = self._db.target
        return (
            f"PostgresStorage(host={target.host!r}, port={target.port!r}, "
            f"dbname={target.dbname!r}, schema={self.schema!r})"
        )

    @property
    def location(self) -> str:
        """Server, database and schema, as operators are shown them (never the password)."""
        target = self._db.target
        return f"postgresql {target.host}:{target.port}/{target.dbname} (schema {self.schema})"

    @property
    def server_clock(self) -> Clock:
        """The server's time on this host, read at :meth:`open` and every minute while
        open (:mod:`.server_time`); the runtime's clock unless it was given one."""
        return self._time.clock

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Check the schema version, then open the pool; never migrates."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._db.is_open:
                return
            async with await self._db.connect() as conn:
                try:
                    await versioning.check_version(conn, self._q, self.schema, self._db.target.meta)
                    missing = (
                        await versioning.missing_delivery_indexes(conn, self._q, self.schema)
                        if self._deliveries
                        else []
                    )
                    if missing:
                        # Not refused: the runs are served, only tick reads every
                        # waiting run of the queues for its requests instead.
                        logger.warning(
                            "the runlane schema %r lacks %s, which a lane with a transport "
                            "needs (a lane without one migrated it): run `runlane migrate` "
                            "(or `await rl.migrate()`) with the lane that has the transport",
                            self.schema,
                            " and ".join(missing),
                        )
                    await self._time.read(conn)
                except psycopg.Error as error:
                    raise self._db.error(error) from None
            await self._db.open_pool()
            self._time.keep_read(self._db.run)

    async def close(self) -> None:
        """Stop listening and close the pool; :meth:`open` may be called again later."""
        self._opening = None
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        await self._finished.close()
        await self._leadership.close()
        await self._time.stop()
        await self._db.close()

    async def migrate(self) -> list[str]:
        """Apply pending migrations in one transaction, serialised across processes.

        Works without :meth:`open`: it uses a connection of its own.
        """
        async with await self._db.connect() as conn:
            try:
                return await versioning.apply_migrations(
                    conn, self._q, self.schema, self._migrations, deliveries=self._deliveries
                )
            except psycopg.Error as error:
                raise self._db.error(error) from None

    async def wait_for_work(self, environment: str, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for a trigger to announce due work in ``environment``.

        True when one did (possibly while the caller was busy); False on timeout or
        when announcements may have been missed (listening connection lost or just
        made): the caller should then poll.
        """
        return await self._work_listener().wait(environment, timeout)

    async def listen_for_finished_runs(self, environment: str, within: float) -> bool:
        """Start listening for runs of ``environment`` that finish (waiting.py)."""
        return await self._finished.listen(environment, within)

    async def wait_for_finished_runs(self, environment: str, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for runs of ``environment`` to be announced
        finished (waiting.py); False on timeout or when announcements may have been missed."""
        return await self._finished.wait(environment, timeout)

    def _work_listener(self) -> WorkListener:
        if self._listener is None:
            self._listener = WorkListener(self._db.connect_listener, WORK_CHANNEL)
        return self._listener

    # -- plumbing ------------------------------------------------------------------

    async def _fetch(self, query: str, params: dict[str, Any]) -> list[Any]:
        return await self._db.run(partial(fetch_rows, self._q[query], params))

    async def _count(self, query: str, params: dict[str, Any]) -> int:
        return await self._db.run(partial(count_rows, self._q[query], params))

    def _texts(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def _lock_prefix(self, environment: str) -> str:
        return claims.capacity_lock_prefix(self.schema, environment)

    def _key_lock_prefix(self, environment: str) -> str:
        return key_lock_prefix(self.schema, environment)

    # -- runs ----------------------------------------------------------------------

    async def create_runs(
        self,
        environment: str,
        runs: Sequence[NewRun],
        now: datetime,
        *,
        lease: LeaseRequest | None = None,
        connection: Any = None,
        outbox_claimed_until: datetime | None = None,
    ) -> list[CreateOutcome]:
        """Create runs with their events, ownership rows, delivery requests and wakeup.

        Runs without keys go in one statement. With ``connection`` (the caller's
        psycopg connection, sync or async) the writes join the caller's open
        transaction and are not committed here.
        """
        if not runs:
            return []
        check_distinct_ids(runs)
        now_us = to_micros(now)
        bare = connection is None and lease is None
        if bare and len(runs) == 1 and lone_row(runs[0]):
            return [await self.create_lone_run(environment, runs[0], now)]
        if bare and len(runs) >= COPY_THRESHOLD and plain_batch(runs):
            # A one-batch stream; a tuple can be sent again if a conflict aborts it.
            created = await self._copy_stream(environment, (runs,), now_us, retry=True)
            return [CreateOutcome(run, created=True) for run in created]
        if any(isinstance(new, NewWaitingRun) for new in runs):
            # Dependencies are rare: such calls go one run at a time, in a transaction.
            create = partial(
                dependencies.create_runs_with_dependencies,
                q=self._q,
                environment=environment,
                runs=runs,
                now_us=now_us,
                outbox_claimed_until=micros_or_none(outbox_claimed_until),
            )
            if connection is not None:
                return await creation.in_caller_transaction(connection, create, self._db.error)
            return await self._db.run(partial(_in_transaction, create), replay=False)
        batch = creation_batch(
            environment, runs, now_us, lease, micros_or_none(outbox_claimed_until)
        )
        if connection is not None:
            return await creation.create_in_caller_transaction(
                connection, self._q, batch, self._db.error
            )
        return await self._db.run(partial(creation.create_batch, self._q, batch), replay=False)

    async def create_lone_run(self, environment: str, new: NewRun, now: datetime) -> CreateOutcome:
        """:meth:`create_runs` of one run (a lone trigger's): for a plain run, one
        autocommitted statement sent through libpq directly, with no batch columns to
        build; a due run may be handed to a worker standing by (standby.py)."""
        if not lone_row(new):
            (outcome,) = await self.create_runs(environment, [new], now)
            return outcome
        now_us = to_micros(now)
        params = lone_params(environment, new, now_us)
        if may_hand_off(new, params["run_at"], now_us) and self._may_find_offer(
            environment, new.queue
        ):
            result = await self._db.run_bare(self._insert_run_handoff, params)
            handed = creation.handed_lease(result)
            if handed is None:
                self._no_offer_until[environment, new.queue] = time.monotonic() + HANDOFF_RECHECK
            return lone_outcome(environment, new, now, handed)
        await self._db.run_bare(self._insert_run, params)
        return lone_outcome(environment, new, now)

    def _may_find_offer(self, environment: str, queue: str) -> bool:
        until = self._no_offer_until.get((environment, queue))
        return until is None or time.monotonic() >= until

    async def create_run_stream(
        self, environment: str, batches: Iterable[Sequence[NewRun]], now: datetime
    ) -> list[Run]:
        """Create the plain runs of ``batches`` through one COPY in one transaction: the
        server stores each batch while the next is built; all or none."""
        # Not retried: the batches are consumed as they are written.
        return await self._copy_stream(
            environment, creation.plain_batches(batches), to_micros(now), retry=False
        )

    async def _copy_stream(
        self, environment: str, batches: Iterable[Sequence[NewRun]], now_us: int, *, retry: bool
    ) -> list[Run]:
        stream = partial(creation.copy_stream, self._q, environment, batches, now_us)
        return await self._db.run(stream, retry=retry, replay=False)

    async def claim_due_runs(
        self,
        environment: str,
        queues: Sequence[QueuePolicy],
        limit: int,
        lease: LeaseRequest,
        now: datetime,
    ) -> list[Run]:
        """Lease up to ``limit`` due runs, skipping runs other claimers hold, within capacity."""
        if limit < 1 or not queues:
            return []
        params = {
            "environment": environment,
            "limit": limit,
            "key_lock_prefix": self._key_lock_prefix(environment),
            **lease_params(lease, to_micros(now)),
        }
        prefix = self._lock_prefix(environment)
        return await self._db.run(
            lambda conn: claims.claim_due_runs(
                conn, self._q, prefix, queues, limit, params, self._rate_keys_adopted
            )
        )

    async def claim_run(
        self,
        environment: str,
        run_id: str,
        lease: LeaseRequest,
        now: datetime,
        *,
        queue: QueuePolicy | None = None,
    ) -> Run | None:
        """Lease one run if it is claimable, due and (bounded ``queue``) within capacity."""
        params = {
            "environment": environment,
            "id": run_id,
            "key_lock_prefix": self._key_lock_prefix(environment),
            **lease_params(lease, to_micros(now)),
        }
        prefix = self._lock_prefix(environment)
        return await self._db.run(
            lambda conn: claims.claim_run(conn, self._q, prefix, queue, params)
        )

    async def mark_key_unavailable(self, environment: str, run_id: str, now: datetime) -> bool:
        """Whether the due, waiting delivery is kept waiting by its key (5.7.5); its
        delivery request is cleared, so ``tick`` requests it again once claimable."""
        rows = await self._fetch(
            "key_unavailable", {"environment": environment, "id": run_id, "now": to_micros(now)}
        )
        return bool(rows) and bool(rows[0]["blocked"])

    async def heartbeat(
        self, environment: str, run_id: str, lease_token: str, expires_at: datetime, now: datetime
    ) -> RunStatus | None:
        """Extend a held, unexpired lease; ``None`` if it is lost (or already expired)."""
        rows = await self._fetch(
            "heartbeat",
            {
                "environment": environment,
                "id": run_id,
                "lease_token": lease_token,
                "lease_expires_at": to_micros(expires_at),
                "now": to_micros(now),
            },
        )
        return RunStatus(rows[0]["status"]) if rows else None

    # -- dependencies and groups ---------------------------------------------------

    async def list_dependencies(self, environment: str, run_id: str) -> list[Run]:
        """The runs ``run_id`` waits (or waited) for, in the order given."""
        rows = await self._fetch(
            "list_dependencies", {"environment": environment, "run_id": run_id}
        )
        return [run_from_row(row) for row in rows]

    async def list_dependents(self, environment: str, run_id: str, limit: int) -> list[Run]:
        """Runs created after ``run_id``, by id."""
        rows = await self._fetch(
            "list_dependents", {"environment": environment, "run_id": run_id, "limit": limit}
        )
        return [run_from_row(row) for row in rows]

    async def settle_stranded_waiting_runs(
        self, environment: str, now: datetime, limit: int
    ) -> int:
        """Release or cancel waiting runs whose dependencies all finished."""
        rows = await self._fetch(
            "settle_stranded_waiting_runs",
            {"environment": environment, "now": to_micros(now), "limit": limit},
        )
        return len(rows)

    async def create_group(
        self,
        environment: str,
        group: NewGroup,
        members: Sequence[NewRun],
        now: datetime,
        *,
        outbox_claimed_until: datetime | None = None,
    ) -> tuple[list[CreateOutcome], Run | None]:
        """Members, group and callback in one transaction."""
        check_distinct_ids(members)
        return await self._db.run(
            partial(
                dependencies.create_group,
                self._q,
                environment,
                group,
                members,
                to_micros(now),
                outbox_claimed_until=micros_or_none(outbox_claimed_until),
            ),
            replay=False,
        )

    async def get_group(self, environment: str, group_id: str) -> GroupStatus | None:
        """A group with its members counted per status."""
        return await self._db.run(partial(dependencies.get_group, self._q, environment, group_id))

    async def apply_transitions(
        self, environment: str, transitions: Sequence[Transition], now: datetime
    ) -> list[bool]:
        """Compare-and-set each transition: one statement per round of distinct runs."""
        if not transitions:
            return []
        return await self._db.run(
            partial(apply_transitions, self._q, environment, transitions, to_micros(now))
        )

    async def apply_transitions_and_claim(
        self,
        environment: str,
        transitions: Sequence[Transition],
        now: datetime,
        queues: Sequence[QueuePolicy],
        limit: int,
        lease: LeaseRequest,
    ) -> tuple[list[bool], list[Run]]:
        """Apply transitions, then claim due runs that sees them, in one transaction."""
        if not transitions:
            return [], await self.claim_due_runs(environment, queues, limit, lease, now)
        if limit < 1 or not queues:
            return await self.apply_transitions(environment, transitions, now), []
        now_us = to_micros(now)
        rounds = transition_rounds(transitions)
        round_params = [
            transition_params(environment, [transitions[i] for i in indexes], now_us)
            for indexes in rounds
        ]
        params = {
            "environment": environment,
            "limit": limit,
            "key_lock_prefix": self._key_lock_prefix(environment),
            **lease_params(lease, now_us),
        }
        prefix = self._lock_prefix(environment)
        done, claimed = await self._db.run(
            lambda conn: claims.apply_and_claim(
                conn, self._q, prefix, round_params, queues, limit, params, self._rate_keys_adopted
            )
        )
        applied = [False] * len(transitions)
        for indexes, ids in zip(rounds, done, strict=True):
            for i in indexes:
                applied[i] = transitions[i].run_id in ids
        return applied, claimed

    # -- reads ---------------------------------------------------------------------

    async def list_runs(
        self, environment: str, run_filter: RunFilter, limit: int, cursor: str | None
    ) -> Page[Run]:
        """Runs newest first; the cursor is the last id of the previous page."""
        rows = await self._fetch("list_runs", list_params(environment, run_filter, limit, cursor))
        return run_page(rows, limit)

    async def list_run_events(self, environment: str, run_id: str) -> list[RunEvent]:
        """A run's history, oldest first."""
        rows = await self._fetch("list_run_events", {"environment": environment, "run_id": run_id})
        return run_events_from_rows(rows)

    # -- maintenance ---------------------------------------------------------------

    async def prune_runs(
        self, environment: str, older_than: datetime, statuses: Sequence[RunStatus], limit: int
    ) -> int:
        """Delete up to ``limit`` finished runs with their history, ownership, outbox and
        occurrence rows."""
        params = prune_params(environment, older_than, statuses, limit)
        return await self._db.run(partial(pruning.prune_runs, self._q, params))

    # -- topics --------------------------------------------------------------------

    async def publish_messages(
        self,
        environment: str,
        messages: Sequence[NewMessage],
        now: datetime,
        *,
        connection: Any = None,
        outbox_claimed_until: datetime | None = None,
    ) -> list[PublishOutcome]:
        """Publish messages with their deduplication entries and delivery runs atomically.

        With ``connection`` (the caller's psycopg connection, sync or async) the writes
        join the caller's open transaction, in a savepoint: a refused message id takes
        back this call's writes only.
        """
        if not messages:
            return []
        check_distinct_delivery_ids(messages)
        call = PublishCall(
            self._q,
            self.schema,
            environment,
            messages,
            to_micros(now),
            micros_or_none(outbox_claimed_until),
        )
        if connection is not None:
            return await call.in_caller_transaction(connection, self._db.error)
        return await self._db.run(call.on_connection, replay=False)

    # -- dispatch and outbox -------------------------------------------------------

    async def request_due_deliveries(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime, limit: int
    ) -> int:
        """Delivery requests for due runs without one; bounded queues within capacity."""
        scope = {"environment": environment, "now": to_micros(now), "limit": limit}
        prefix = self._lock_prefix(environment)
        return await self._db.run(
            lambda conn: dispatch.request_due_deliveries(conn, self._q, prefix, queues, scope)
        )

    async def expire_dispatch_reservations(self, environment: str, now: datetime) -> int:
        """Free reservations nobody claimed within their window."""
        return await self._count(
            "expire_dispatch_reservations", {"environment": environment, "now": to_micros(now)}
        )

    async def claim_outbox(
        self, environment: str, now: datetime, limit: int, claimed_until: datetime
    ) -> list[OutboxMessage]:
        """Claim outbox messages to publish; concurrent claimers never get the same one."""
        rows = await self._fetch(
            "claim_outbox",
            {
                "environment": environment,
                "now": to_micros(now),
                "limit": limit,
                "claimed_until": to_micros(claimed_until),
            },
        )
        ordered = sorted(rows, key=lambda row: (row["available_at"], row["id"]))
        return [outbox_from_row(row) for row in ordered]

    async def settle_outbox(
        self, environment: str, results: Sequence[OutboxResult], now: datetime
    ) -> None:
        """Record publish outcomes of claimed messages."""
        if results:
            await self._count(
                "settle_outbox", dispatch.settle_params(environment, results, to_micros(now))
            )

    # -- maintenance leadership ----------------------------------------------------

    async def hold_maintenance_lead(
        self, environment: str, holder: str, now: datetime, ttl: float
    ) -> bool:
        """Hold the environment's advisory lock on a session of its own (``ttl`` is not
        needed: the lock ends with the holder's session)."""
        try:
            return await self._leadership.hold(environment, holder)
        except psycopg.Error as error:
            raise self._db.error(error) from None

    async def release_maintenance_lead(self, environment: str, holder: str) -> None:
        """Unlock if ``holder`` has the lock."""
        await self._leadership.release(environment, holder)

    # -- schedules -----------------------------------------------------------------

    async def defer_delivery(
        self,
        environment: str,
        run_id: str,
        available_at: datetime,
        interval: float,
        now: datetime,
    ) -> bool:
        """A delivery request for a waiting run, published when a token is due for it."""
        rows = await self._fetch(
            "defer_delivery_request",
            {
                "environment": environment,
                "id": run_id,
                "now": to_micros(now),
                "available_at": to_micros(available_at),
                "interval": round(interval * 1_000_000),
            },
        )
        return bool(rows[0]["deferred"])

    async def pause_queue(
        self, environment: str, queue: str, reason: str | None, now: datetime
    ) -> QueuePause:
        """Store a pause of ``queue`` (a paused queue keeps its first pause)."""
        rows = await self._fetch(
            "pause_queue",
            {"environment": environment, "queue": queue, "reason": reason, "now": to_micros(now)},
        )
        await self._announce_pauses(environment)
        return queue_pause_from_row(rows[0])

    async def resume_queue(self, environment: str, queue: str) -> bool:
        """Drop the pause of ``queue`` and its waiting runs' ignored delivery requests."""
        rows = await self._fetch("resume_queue", {"environment": environment, "queue": queue})
        await self._announce_pauses(environment)
        return bool(rows[0]["resumed"])

    async def _announce_pauses(self, environment: str) -> None:
        # After the commit that stored the change: a listener that reads the pauses on
        # hearing it sees the change.
        await self._fetch("announce_pauses", {"environment": environment, "channel": WORK_CHANNEL})

    async def listen_for_pauses(self, environment: str, within: float) -> bool:
        """Start hearing pause announcements (on the work listener's connection)."""
        return await self._work_listener().start(within)

    def pauses_version(self, environment: str) -> object:
        """Changes whenever a pause or resume of ``environment`` was announced, or the
        listening connection was lost (announcements may have been missed)."""
        listener = self._listener
        return None if listener is None else listener.pause_epoch

    async def set_schedule_paused(
        self, environment: str, schedule_id: str, paused: bool, now: datetime
    ) -> None:
        """Pause or resume one schedule."""
        await self._count(
            "set_schedule_paused",
            {
                "environment": environment,
                "schedule_id": schedule_id,
                "paused": paused,
                "now": to_micros(now),
            },
        )

    async def mark_schedules_seen(
        self, environment: str, schedule_ids: Sequence[str], now: datetime
    ) -> None:
        """Record the first-seen point of schedules that have none."""
        if not schedule_ids:
            return
        params = seen_params(environment, schedule_ids, to_micros(now))
        await self._db.run(partial(schedules.mark_seen, self._q, params))

    async def materialize_schedule_occurrences(
        self, environment: str, occurrences: Sequence[ScheduleOccurrence], now: datetime
    ) -> list[Run]:
        """Claim occurrences and create their runs in one transaction."""
        if not occurrences:
            return []
        materialize = partial(
            schedules.materialize, self._q, environment, occurrences, to_micros(now)
        )
        return await self._db.run(materialize)


async def _in_transaction(
    create: Callable[..., Awaitable[list[CreateOutcome]]], conn: DriverConnection
) -> list[CreateOutcome]:
    async with conn.transaction():
        return await create(AsyncSession(conn))
