"""SQLite storage: WAL mode, a busy timeout, and IMMEDIATE transactions for writes.

:class:`SqliteStorage` implements the storage protocol by composing this
package's modules: :mod:`.connection` runs each operation (inline first, in a
thread that waits for the write lock only when another process holds it),
:mod:`.versioning` migrates, and :mod:`.creation`, :mod:`.claims`,
:mod:`.transitions`, :mod:`.listing`, :mod:`.pruning`, :mod:`.dispatch` and
:mod:`.schedules` hold the statements of each concern.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from runlane.ports.storage import (
    CreateOutcome,
    GroupStatus,
    LeaseRequest,
    NewGroup,
    NewMessage,
    NewRun,
    NewRunBatch,
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
from runlane.storage.sql.batches import check_distinct_ids
from runlane.storage.sql.encoding import micros_or_none
from runlane.storage.sql.facade import SqlStorageBase
from runlane.storage.sql.rows import (
    outbox_from_row,
    queue_pause_from_row,
    run_events_from_rows,
    run_from_row,
    run_page,
)
from runlane.storage.sqlite import (
    claims,
    creation,
    dependencies,
    dispatch,
    listing,
    pruning,
    publishing,
    schedules,
)
from runlane.storage.sqlite.connections import DEFAULT_BUSY_TIMEOUT_MS, SqliteConnection
from runlane.storage.sqlite.listener import WorkListener
from runlane.storage.sqlite.params import lease_params
from runlane.storage.sqlite.queries import QUERIES
from runlane.storage.sqlite.transitions import apply_transitions
from runlane.storage.sqlite.versioning import apply_migrations_for
from runlane.types.clock import to_micros
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.runs import Page, Run, RunEvent, RunStatus

SQLITE_CAPABILITIES = StorageCapabilities(
    reads_run_history=True,
    prunes_runs=True,
    enforces_idempotency=True,
    stores_messages=True,
)


class SqliteStorage(SqlStorageBase):
    """Storage in one SQLite file. Build it through :func:`runlane.sqlite_lane`."""

    capabilities = SQLITE_CAPABILITIES

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        synchronous: str = "NORMAL",
        deliveries: bool = True,
    ) -> None:
        """``deliveries``: the lane wakes workers through a transport, so tick requests
        deliveries and the file keeps the index those requests read (``sqlite_lane``
        passes whether it has a transport; without one, no run writes that index)."""
        self.path = str(path)
        self._deliveries = deliveries
        self._db = SqliteConnection(
            self.path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous
        )
        self._rotation = claims.QueueRotation()
        self._listener: WorkListener | None = None

    def __repr__(self) -> str:
        return f"SqliteStorage({self.path!r})"

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and its schema on first use)."""
        if await self._db.connect():
            await self._db.transact(self._apply_migrations)

    async def close(self) -> None:
        """Stop watching for commits; close the connection and its thread."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        await self._db.close()

    async def migrate(self) -> list[str]:
        """Create or upgrade the schema (also done on open); return what was applied."""
        await self._db.connect()
        return await self._db.transact(self._apply_migrations)

    def _apply_migrations(self, cur: sqlite3.Cursor) -> list[str]:
        return apply_migrations_for(cur, deliveries=self._deliveries)

    async def _fetch(self, query: str, params: dict[str, Any]) -> list[Any]:
        return await self._db.fetch(QUERIES[query], params)

    async def _count(self, query: str, params: dict[str, Any]) -> int:
        return await self._db.write_count(QUERIES[query], params)

    def _texts(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    async def wait_for_work(self, environment: str, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for a commit to the file by any process.

        True when one was seen (possibly while the caller was busy, or just as watching
        began); False on timeout or when commits may have been missed: the caller
        should then poll. SQLite cannot say what a commit wrote, so any commit counts.
        """
        if self._listener is None:
            self._listener = WorkListener(self.path)
        return await self._listener.wait(environment, timeout)

    async def listen_for_finished_runs(self, environment: str, within: float) -> bool:
        """Start watching the file for commits, if not yet; whether it is watched."""
        await self.wait_for_finished_runs(environment, 0.0)
        return self._listener is not None and self._listener.listening

    async def wait_for_finished_runs(self, environment: str, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for a commit that may have finished runs: the
        same watcher as :meth:`wait_for_work`, so any commit counts."""
        if self._listener is None:
            self._listener = WorkListener(self.path)
        return await self._listener.wait(f"finished:{environment}", timeout)

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
        """Create runs with their events, ownership rows and delivery requests atomically."""
        if connection is not None:  # (no call on the common path: lone triggers)
            _check_connection(connection)
        check_distinct_ids(runs)
        create = partial(
            creation.create_runs,
            self._db,
            environment,
            runs,
            now,
            lease,
            connection,
            outbox_claimed_until,
        )
        if connection is not None:
            # The connection and its open transaction are the caller's: use them here, on
            # the caller's thread, not through ours.
            return create()
        return await self._db.run(create)

    async def create_run_batch(
        self, environment: str, batch: NewRunBatch, now: datetime, *, connection: Any = None
    ) -> list[Run]:
        """Create the plain runs of ``batch`` with one statement (``CreatesRunBatches``)."""
        if connection is not None:  # (no call on the common path: lone triggers)
            _check_connection(connection)
        create = partial(creation.create_run_batch, self._db, environment, batch, now, connection)
        if connection is not None:
            return create()  # the caller's connection, on the caller's thread (create_runs)
        return await self._db.run(create)

    async def claim_due_runs(
        self,
        environment: str,
        queues: Sequence[QueuePolicy],
        limit: int,
        lease: LeaseRequest,
        now: datetime,
    ) -> list[Run]:
        """Lease up to ``limit`` due runs (oldest ``run_at`` first) within queue capacity."""
        params = lease_params(lease, now)
        return await self._db.transact(
            lambda cur: claims.claim_due_runs(
                cur, environment, queues, limit, params, self._rotation
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
        """Lease one run if it is claimable, due, and its partition has capacity."""
        params = {"environment": environment, "id": run_id, **lease_params(lease, now)}
        return await self._db.transact(
            lambda cur: claims.claim_run(cur, environment, params, queue)
        )

    async def mark_key_unavailable(self, environment: str, run_id: str, now: datetime) -> bool:
        """Whether the due, waiting delivery is kept waiting by its key (5.7.5); its
        delivery request is cleared, so ``tick`` requests it again once claimable."""
        params = {"environment": environment, "id": run_id, "now": to_micros(now)}
        row = await self._db.transact(
            lambda cur: cur.execute(QUERIES["key_unavailable"], params).fetchone()
        )
        return row is not None and bool(row["blocked"])

    async def heartbeat(
        self, environment: str, run_id: str, lease_token: str, expires_at: datetime, now: datetime
    ) -> RunStatus | None:
        """Extend the lease; ``None`` if it is no longer held (or already expired)."""
        params = {
            "environment": environment,
            "id": run_id,
            "lease_token": lease_token,
            "lease_expires_at": to_micros(expires_at),
            "now": to_micros(now),
        }
        row = await self._db.transact(
            lambda cur: cur.execute(QUERIES["heartbeat"], params).fetchone()
        )
        return RunStatus(row["status"]) if row is not None else None

    async def apply_transitions(
        self, environment: str, transitions: Sequence[Transition], now: datetime
    ) -> list[bool]:
        """Compare-and-set each transition in one transaction."""
        now_us = to_micros(now)
        # Settles come in batches from workers running other attempts meanwhile.
        return await self._db.transact(
            lambda cur: apply_transitions(cur, environment, transitions, now_us), overlap=True
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
        now_us = to_micros(now)
        params = lease_params(lease, now)

        def op(cur: sqlite3.Cursor) -> tuple[list[bool], list[Run]]:
            applied = apply_transitions(cur, environment, transitions, now_us)
            if limit < 1 or not queues:
                return applied, []
            claimed = claims.claim_due_runs(cur, environment, queues, limit, params, self._rotation)
            return applied, claimed

        return await self._db.transact(op, overlap=True)

    # -- reads ---------------------------------------------------------------------

    async def list_runs(
        self, environment: str, run_filter: RunFilter, limit: int, cursor: str | None
    ) -> Page[Run]:
        """Runs newest first; the cursor is the last id of the previous page."""
        params = listing.list_params(environment, run_filter, limit, cursor)
        return run_page(await self._db.fetch(QUERIES["list_runs"], params), limit)

    async def list_run_events(self, environment: str, run_id: str) -> list[RunEvent]:
        """A run's history, oldest first."""
        rows = await self._db.fetch(
            QUERIES["list_run_events"], {"environment": environment, "run_id": run_id}
        )
        return run_events_from_rows(rows)

    # -- maintenance ---------------------------------------------------------------

    async def prune_runs(
        self, environment: str, older_than: datetime, statuses: Sequence[RunStatus], limit: int
    ) -> int:
        """Delete finished runs with their history, ownership, outbox and occurrence rows."""
        params = pruning.prune_params(environment, older_than, statuses, limit)
        return await self._db.transact(lambda cur: pruning.prune_runs(cur, environment, params))

    # -- dependencies and groups ---------------------------------------------------

    async def list_dependencies(self, environment: str, run_id: str) -> list[Run]:
        """The runs ``run_id`` waits (or waited) for, in the order given."""
        rows = await self._db.fetch(
            QUERIES["list_dependencies"], {"environment": environment, "run_id": run_id}
        )
        return [run_from_row(row) for row in rows]

    async def list_dependents(self, environment: str, run_id: str, limit: int) -> list[Run]:
        """Runs created after ``run_id``, by id."""
        rows = await self._db.fetch(
            QUERIES["list_dependents"],
            {"environment": environment, "run_id": run_id, "limit": limit},
        )
        return [run_from_row(row) for row in rows]

    async def settle_stranded_waiting_runs(
        self, environment: str, now: datetime, limit: int
    ) -> int:
        """Release or cancel waiting runs whose dependencies all finished."""
        now_us = to_micros(now)
        return await self._db.transact(
            lambda cur: dependencies.settle_stranded_waiting_runs(cur, environment, now_us, limit)
        )

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
        now_us = to_micros(now)
        claimed_until = micros_or_none(outbox_claimed_until)

        def op(cur: sqlite3.Cursor) -> tuple[list[CreateOutcome], Run | None]:
            try:
                outcomes = creation.create_members(cur, environment, members, now_us, claimed_until)
            except sqlite3.IntegrityError:
                raise RunlaneError(
                    ErrorCode.STORAGE_CONFLICT,
                    "the group's members could not be created; trigger the group again.",
                    retryable=True,
                ) from None
            created = [outcome.run for outcome in outcomes]
            return outcomes, dependencies.create_group(cur, environment, group, created, now_us)

        return await self._db.transact(op)

    async def get_group(self, environment: str, group_id: str) -> GroupStatus | None:
        """A group with its members counted per status."""
        return await self._db.transact(
            lambda cur: dependencies.get_group(cur, environment, group_id)
        )

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
        """Publish messages with their deduplication entries and delivery runs atomically."""
        if connection is not None and not isinstance(connection, sqlite3.Connection):
            raise RunlaneError(
                ErrorCode.CONFIGURATION_INVALID,
                "a SQLite lane publishes inside a sqlite3.Connection transaction only.",
            )
        publish = partial(
            publishing.publish_messages,
            self._db,
            environment,
            messages,
            now,
            connection,
            outbox_claimed_until,
        )
        if connection is not None:
            return publish()
        return await self._db.run(publish)

    # -- dispatch and outbox --------------------------------------------------------

    async def request_due_deliveries(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime, limit: int
    ) -> int:
        """Delivery requests for due runs without one; bounded queues within capacity."""
        now_us = to_micros(now)
        return await self._db.transact(
            lambda cur: dispatch.request_due_deliveries(cur, environment, queues, now_us, limit)
        )

    async def expire_dispatch_reservations(self, environment: str, now: datetime) -> int:
        """Free reservations nobody claimed within their window."""
        params = {"environment": environment, "now": to_micros(now)}
        return await self._db.write_count(QUERIES["expire_dispatch_reservations"], params)

    async def claim_outbox(
        self, environment: str, now: datetime, limit: int, claimed_until: datetime
    ) -> list[OutboxMessage]:
        """Claim outbox messages to publish."""
        params = {
            "environment": environment,
            "now": to_micros(now),
            "limit": limit,
            "claimed_until": to_micros(claimed_until),
        }
        rows = await self._db.transact(
            lambda cur: cur.execute(QUERIES["claim_outbox"], params).fetchall()
        )
        return [outbox_from_row(row) for row in rows]

    async def settle_outbox(
        self, environment: str, results: Sequence[OutboxResult], now: datetime
    ) -> None:
        """Record publish outcomes."""
        published, failed = dispatch.settle_params(environment, results, to_micros(now))
        await self._db.transact(lambda cur: dispatch.settle_outbox(cur, published, failed))

    # -- maintenance leadership ----------------------------------------------------

    async def hold_maintenance_lead(
        self, environment: str, holder: str, now: datetime, ttl: float
    ) -> bool:
        """Take or renew the environment's lease row until ``now + ttl``."""
        params = {
            "environment": environment,
            "holder": holder,
            "now": to_micros(now),
            "expires_at": to_micros(now + timedelta(seconds=ttl)),
        }
        rows = await self._db.transact(
            lambda cur: cur.execute(QUERIES["hold_maintenance_lead"], params).fetchall()
        )
        return bool(rows)

    async def release_maintenance_lead(self, environment: str, holder: str) -> None:
        """Delete the lease row if ``holder`` has it."""
        params = {"environment": environment, "holder": holder}
        await self._db.write_count(QUERIES["release_maintenance_lead"], params)

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
        now_us = to_micros(now)
        params = {"environment": environment, "id": run_id, "now": now_us}

        def defer(cur: sqlite3.Cursor) -> bool:
            ahead = cur.execute(QUERIES["due_runs_ahead"], params).fetchone()["ahead"]
            row = cur.execute(QUERIES["defer_delivery_request"], params).fetchone()
            if row is None:
                return False
            outbox_id = f"{row['id']}.{row['event_sequence']}"
            cur.execute(
                QUERIES["insert_event"],
                {
                    "environment": environment,
                    "run_id": run_id,
                    "sequence": row["event_sequence"],
                    "type": "run.delivery_requested",
                    "occurred_at": now_us,
                    "data": json.dumps(
                        {"queue": row["queue"], "outbox_id": outbox_id, "reason": "rate_limited"}
                    ),
                },
            )
            cur.execute(
                QUERIES["insert_deferred_outbox"],
                {
                    "environment": environment,
                    "id": outbox_id,
                    "run_id": run_id,
                    "queue": row["queue"],
                    "available_at": to_micros(available_at) + ahead * round(interval * 1_000_000),
                    "now": now_us,
                    "trace_carrier": row["trace_carrier"],
                },
            )
            return True

        return await self._db.transact(defer)

    async def pause_queue(
        self, environment: str, queue: str, reason: str | None, now: datetime
    ) -> QueuePause:
        """Store a pause of ``queue`` (a paused queue keeps its first pause)."""
        params = {"environment": environment, "queue": queue, "reason": reason}

        def pause(cur: sqlite3.Cursor) -> QueuePause:
            cur.execute(QUERIES["pause_queue"], {**params, "now": to_micros(now)})
            return queue_pause_from_row(cur.execute(QUERIES["get_queue_pause"], params).fetchone())

        return await self._db.transact(pause)

    async def resume_queue(self, environment: str, queue: str) -> bool:
        """Drop the pause of ``queue`` and its waiting runs' ignored delivery requests."""
        params = {"environment": environment, "queue": queue}

        def resume(cur: sqlite3.Cursor) -> bool:
            if cur.execute(QUERIES["resume_queue"], params).rowcount == 0:
                return False
            cur.execute(QUERIES["forget_paused_delivery_requests"], params)
            return True

        return await self._db.transact(resume)

    async def set_schedule_paused(
        self, environment: str, schedule_id: str, paused: bool, now: datetime
    ) -> None:
        """Pause or resume one schedule."""
        params = {
            "environment": environment,
            "schedule_id": schedule_id,
            "paused": int(paused),
            "now": to_micros(now),
        }
        await self._db.write_count(QUERIES["set_schedule_paused"], params)

    async def mark_schedules_seen(
        self, environment: str, schedule_ids: Sequence[str], now: datetime
    ) -> None:
        """Record the first-seen point of schedules that have none."""
        if not schedule_ids:
            return
        now_us = to_micros(now)
        await self._db.transact(
            lambda cur: schedules.mark_seen(cur, environment, schedule_ids, now_us)
        )

    async def materialize_schedule_occurrences(
        self, environment: str, occurrences: Sequence[ScheduleOccurrence], now: datetime
    ) -> list[Run]:
        """Claim occurrences and create their runs in one transaction."""
        now_us = to_micros(now)
        return await self._db.transact(
            lambda cur: schedules.materialize_occurrences(cur, environment, occurrences, now_us)
        )


def _check_connection(connection: Any) -> None:
    """Refuse a caller's connection that is not a ``sqlite3.Connection``."""
    if not isinstance(connection, sqlite3.Connection):
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "a SQLite lane enqueues inside a sqlite3.Connection transaction only.",
        )
