"""SQLite storage: WAL mode, a busy timeout, and IMMEDIATE transactions for writes.

One connection per storage object, used by one operation at a time. Operations
first run inline on the event loop with a zero busy timeout: an uncontended
SQLite write takes microseconds, far less than a hop to a thread. Only when
another process holds the write lock does the operation move to a dedicated
thread that waits up to ``busy_timeout`` for it, so the loop never blocks on
another process. Readers never block in WAL mode.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from runlane.core.clock import from_micros, to_micros
from runlane.core.errors import ErrorCode, RunlaneError
from runlane.core.ids import new_token
from runlane.core.models import (
    Page,
    QueueStats,
    Run,
    RunEvent,
    RunEventType,
    RunStatus,
)
from runlane.storage.protocol import (
    CreateOutcome,
    LeaseRequest,
    NewRun,
    OutboxMessage,
    OutboxResult,
    QueuePolicy,
    RunFilter,
    ScheduleOccurrence,
    ScheduleState,
    StorageCapabilities,
    Transition,
)
from runlane.storage.records import (
    build_queue_stats,
    dumps,
    event_from_row,
    load_migrations,
    load_queries,
    outbox_from_row,
    run_from_row,
)

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_MS = 30_000
SQLITE_CAPABILITIES = StorageCapabilities(
    durable_state=True,
    process_local_state=False,
    reads_run_history=True,
    prunes_runs=True,
    leases_runs=True,
    claims_schedule_occurrences=True,
    persists_outbox=True,
    enforces_idempotency=True,
    enforces_singleton=True,
    enforces_queue_concurrency=True,
)

_QUERIES = load_queries("runlane.storage.sqlite")
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


class _Busy(Exception):
    """Another connection holds the write lock; retry where waiting is allowed."""


_MIGRATIONS = load_migrations("runlane.storage.sqlite.migrations")


class SqliteStorage:
    """Storage in one SQLite file. Build it through :func:`runlane.sqlite_lane`."""

    capabilities = SQLITE_CAPABILITIES

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        synchronous: str = "NORMAL",
    ) -> None:
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._rotation = 0
        self._lock: asyncio.Lock | None = None
        self._patient = False
        self._executor: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"SqliteStorage({self.path!r})"

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and its schema on first use)."""
        if self._executor is None:
            await self._connect_once()
            await self._run(self._migrate_sync)

    async def _connect_once(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runlane-sqlite")
        await self._run(self._connect)

    async def close(self) -> None:
        """Close the connection and its thread."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._disconnect)
        executor.shutdown(wait=True)

    async def migrate(self) -> list[str]:
        """Create or upgrade the schema (also done on open); return what was applied."""
        if self._executor is None:
            await self._connect_once()
        return await self._run(self._migrate_sync)

    def _connect(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_timeout_ms / 1000,
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error as error:
            raise _unavailable(error, self.path) from error
        self._conn = conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _migrate_sync(self) -> list[str]:
        applied: list[str] = []
        with self._transaction() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS runlane_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
            )
            done = {row[0] for row in cur.execute("SELECT version FROM runlane_migrations")}
            for version, name, sql in _MIGRATIONS:
                if version in done:
                    continue
                for statement in _split_statements(sql):
                    cur.execute(statement)
                cur.execute(
                    "INSERT INTO runlane_migrations VALUES (?, ?, strftime('%s','now') * 1000000)",
                    (version, name),
                )
                applied.append(f"{version:03d}_{name}")
        return applied

    # -- plumbing ------------------------------------------------------------------

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RunlaneError(
                ErrorCode.STORAGE_UNAVAILABLE, "SQLite storage is not open.", retryable=True
            )
        return self._conn

    async def _run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` inline; if the write lock is taken, in the thread, waiting for it."""
        executor = self._executor
        if executor is None:
            raise RunlaneError(
                ErrorCode.STORAGE_UNAVAILABLE, "SQLite storage is not open.", retryable=True
            )
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._conn is not None:
                try:
                    return fn()
                except _Busy:
                    pass
            return await asyncio.get_running_loop().run_in_executor(
                executor, self._run_patiently, fn
            )

    def _run_patiently(self, fn: Callable[[], T]) -> T:
        conn = self._conn
        if conn is None:
            return fn()  # opening: nothing to wait for yet
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        self._patient = True
        try:
            return fn()
        finally:
            self._patient = False
            conn.execute("PRAGMA busy_timeout = 0")

    def _check_busy(self, error: sqlite3.Error) -> None:
        if not self._patient and getattr(error, "sqlite_errorcode", None) in _BUSY_CODES:
            raise _Busy from error

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Cursor]:
        own = conn is None
        conn = conn or self._require()
        cur = conn.cursor()
        try:
            if own:
                cur.execute("BEGIN IMMEDIATE")
            yield cur
            if own:
                cur.execute("COMMIT")
        except BaseException as error:
            if own and conn.in_transaction:
                conn.rollback()
            if isinstance(error, sqlite3.OperationalError):
                self._check_busy(error)
                raise _unavailable(error, self.path) from error
            raise
        finally:
            cur.close()

    def _read(self, query: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        try:
            return self._require().execute(query, params).fetchall()
        except sqlite3.OperationalError as error:
            self._check_busy(error)
            raise _unavailable(error, self.path) from error

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
        if connection is not None:
            if not isinstance(connection, sqlite3.Connection):
                raise RunlaneError(
                    ErrorCode.CONFIGURATION_INVALID,
                    "a SQLite lane enqueues inside a sqlite3.Connection transaction only.",
                )
            return self._create_runs_sync(
                environment, runs, now, lease, connection, outbox_claimed_until
            )
        return await self._run(
            lambda: self._create_runs_sync(
                environment, runs, now, lease, None, outbox_claimed_until
            )
        )

    def _create_runs_sync(
        self,
        environment: str,
        runs: Sequence[NewRun],
        now: datetime,
        lease: LeaseRequest | None,
        connection: sqlite3.Connection | None,
        outbox_claimed_until: datetime | None,
    ) -> list[CreateOutcome]:
        now_us = to_micros(now)
        claimed_until = _micros_or_none(outbox_claimed_until)
        outcomes: list[CreateOutcome] = []
        token = new_token() if lease is not None else None
        with self._transaction(connection) as cur:
            if lease is None and all(_is_plain(new) for new in runs):
                return self._create_plain_runs(cur, environment, runs, now_us, claimed_until)
            for new in runs:
                outcomes.append(
                    self._create_one(cur, environment, new, now_us, lease, token, claimed_until)
                )
        return outcomes

    def _create_plain_runs(
        self,
        cur: sqlite3.Cursor,
        environment: str,
        runs: Sequence[NewRun],
        now_us: int,
        claimed_until: int | None,
    ) -> list[CreateOutcome]:
        """Runs without keys or lease own nothing and conflict with nothing: write them in bulk."""
        cur.executemany(
            _QUERIES["insert_plain_run"],
            [_insert_params(environment, new, now_us, None, None) for new in runs],
        )
        now = from_micros(now_us)
        created = [_run_from_new(environment, new, now) for new in runs]
        cur.executemany(
            _QUERIES["insert_event"],
            [
                event
                for run, new in zip(created, runs, strict=True)
                for event in _creation_events(environment, run, now_us, new.request_delivery)
            ],
        )
        outcomes = []
        for run, new in zip(created, runs, strict=True):
            outbox: tuple[OutboxMessage, ...] = ()
            if new.request_delivery:
                outbox = (self._insert_outbox(cur, environment, run, 2, now_us, claimed_until),)
            outcomes.append(CreateOutcome(run, created=True, outbox=outbox))
        return outcomes

    def _create_one(
        self,
        cur: sqlite3.Cursor,
        environment: str,
        new: NewRun,
        now_us: int,
        lease: LeaseRequest | None,
        token: str | None,
        outbox_claimed_until: int | None = None,
    ) -> CreateOutcome:
        existing = self._find_owner(cur, environment, new, now_us)
        if existing is not None:
            return CreateOutcome(existing, created=False)
        row = cur.execute(
            _QUERIES["insert_run"], _insert_params(environment, new, now_us, lease, token)
        ).fetchone()
        if row is None:
            # Lost a race on the singleton index; the winner is the owner.
            owner = self._find_owner(cur, environment, new, now_us)
            if owner is None:
                raise RunlaneError(
                    ErrorCode.STORAGE_CONFLICT,
                    f"run {new.id} could not be created.",
                    retryable=True,
                )
            return CreateOutcome(owner, created=False)
        run = run_from_row(row)
        cur.executemany(
            _QUERIES["insert_event"],
            _creation_events(environment, run, now_us, new.request_delivery),
        )
        outbox: tuple[OutboxMessage, ...] = ()
        if new.request_delivery:
            outbox = (self._insert_outbox(cur, environment, run, 2, now_us, outbox_claimed_until),)
        if new.idempotency_key is not None:
            cur.execute(
                _QUERIES["upsert_idempotency_key"],
                {
                    "environment": environment,
                    "task_id": new.task_id,
                    "key": new.idempotency_key,
                    "run_id": new.id,
                    "expires_at": _micros_or_none(new.idempotency_expires_at),
                },
            )
        return CreateOutcome(run, created=True, outbox=outbox)

    def _insert_outbox(
        self,
        cur: sqlite3.Cursor,
        environment: str,
        run: Run,
        sequence: int,
        now_us: int,
        claimed_until: int | None,
    ) -> OutboxMessage:
        message = OutboxMessage(
            id=f"{run.id}.{sequence}",
            run_id=run.id,
            queue=run.queue,
            requested_at=from_micros(now_us),
            trace_carrier=run.trace_carrier,
            attempts=0,
        )
        cur.execute(
            _QUERIES["insert_outbox"],
            {
                "environment": environment,
                "id": message.id,
                "run_id": run.id,
                "queue": run.queue,
                "status": "claimed" if claimed_until is not None else "pending",
                "now": now_us,
                "claimed_until": claimed_until,
                "trace_carrier": dumps(run.trace_carrier) if run.trace_carrier else None,
            },
        )
        return message

    def _find_owner(
        self, cur: sqlite3.Cursor, environment: str, new: NewRun, now_us: int
    ) -> Run | None:
        if new.idempotency_key is not None:
            row = cur.execute(
                _QUERIES["get_idempotency_owner"],
                {"environment": environment, "task_id": new.task_id, "key": new.idempotency_key},
            ).fetchone()
            if row is not None and row["id"] is not None and _owner_holds(row, now_us):
                return run_from_row(row)
        if new.singleton_key is not None:
            row = cur.execute(
                _QUERIES["get_active_singleton_owner"],
                {
                    "environment": environment,
                    "task_id": new.task_id,
                    "singleton_key": new.singleton_key,
                },
            ).fetchone()
            if row is not None:
                return run_from_row(row)
        return None

    async def claim_due_runs(
        self,
        environment: str,
        queues: Sequence[QueuePolicy],
        limit: int,
        lease: LeaseRequest,
        now: datetime,
    ) -> list[Run]:
        """Lease up to ``limit`` due runs (oldest ``run_at`` first) within queue capacity."""
        lease_params = _lease_params(lease, now)
        bounded = [[q.name, q.concurrency_limit] for q in queues if q.concurrency_limit is not None]
        unbounded = [q.name for q in queues if q.concurrency_limit is None]

        def claim() -> list[Run]:
            with self._transaction() as cur:
                runs: list[Run] = []
                if bounded:
                    runs += self._claim_rows(
                        cur,
                        "claim_bounded_runs",
                        {
                            "environment": environment,
                            "bounded": json.dumps(bounded),
                            "limit": limit,
                            **lease_params,
                        },
                    )
                # One indexed, ordered scan per queue; the starting queue rotates so a
                # worker on many queues serves them all.
                self._rotation = (self._rotation + 1) % max(1, len(unbounded))
                for name in unbounded[self._rotation :] + unbounded[: self._rotation]:
                    if len(runs) >= limit:
                        break
                    runs += self._claim_rows(
                        cur,
                        "claim_due_runs",
                        {
                            "environment": environment,
                            "queue": name,
                            "limit": limit - len(runs),
                            **lease_params,
                        },
                    )
                self._insert_started_events(cur, environment, runs, lease_params["now"])
            return runs

        return await self._run(claim)

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
        params = {"environment": environment, "id": run_id, **_lease_params(lease, now)}

        def claim() -> Run | None:
            with self._transaction() as cur:
                if queue is not None and queue.concurrency_limit is not None:
                    current = cur.execute(_QUERIES["get_run"], params).fetchone()
                    if current is None:
                        return None
                    occupied = cur.execute(
                        _QUERIES["occupied_capacity"],
                        {
                            "environment": environment,
                            "queue": current["queue"],
                            "concurrency_key": current["concurrency_key"],
                            "now": params["now"],
                        },
                    ).fetchone()["n"]
                    if occupied >= queue.concurrency_limit:
                        return None
                runs = self._claim_rows(cur, "claim_run", params)
                self._insert_started_events(cur, environment, runs, params["now"])
            return runs[0] if runs else None

        return await self._run(claim)

    def _claim_rows(self, cur: sqlite3.Cursor, query: str, params: dict[str, Any]) -> list[Run]:
        return [run_from_row(row) for row in cur.execute(_QUERIES[query], params).fetchall()]

    def _insert_started_events(
        self, cur: sqlite3.Cursor, environment: str, runs: list[Run], now_us: int
    ) -> None:
        if runs:
            cur.executemany(
                _QUERIES["insert_event"], [_started_event(environment, run, now_us) for run in runs]
            )

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

        def beat() -> RunStatus | None:
            with self._transaction() as cur:
                row = cur.execute(_QUERIES["heartbeat"], params).fetchone()
            return RunStatus(row["status"]) if row is not None else None

        return await self._run(beat)

    async def apply_transitions(
        self, environment: str, transitions: Sequence[Transition], now: datetime
    ) -> list[bool]:
        """Compare-and-set each transition in one transaction."""
        now_us = to_micros(now)
        query = _QUERIES["apply_transition"]

        def apply() -> list[bool]:
            applied: list[bool] = []
            events: list[dict[str, Any]] = []
            with self._transaction() as cur:
                for transition in transitions:
                    ok = (
                        cur.execute(
                            query, _transition_params(environment, transition, now_us)
                        ).rowcount
                        == 1
                    )
                    applied.append(ok)
                    if ok:
                        events += _transition_events(environment, transition, now_us)
                cur.executemany(_QUERIES["insert_event"], events)
            return applied

        return await self._run(apply)

    # -- reads ---------------------------------------------------------------------

    async def get_run(self, environment: str, run_id: str) -> Run | None:
        """Read one run."""
        rows = await self._run(
            lambda: self._read(_QUERIES["get_run"], {"environment": environment, "id": run_id})
        )
        return run_from_row(rows[0]) if rows else None

    async def list_runs(
        self, environment: str, run_filter: RunFilter, limit: int, cursor: str | None
    ) -> Page[Run]:
        """Runs newest first; the cursor is the last id of the previous page."""
        clauses = ["environment = :environment"]
        params: dict[str, Any] = {"environment": environment, "limit": limit + 1}
        for column, values in (
            ("status", [s.value for s in run_filter.statuses]),
            ("task_id", list(run_filter.task_ids)),
            ("queue", list(run_filter.queues)),
        ):
            if values:
                clauses.append(f"{column} IN (SELECT value FROM json_each(:{column}s))")
                params[f"{column}s"] = json.dumps(values)
        if cursor is not None:
            clauses.append("id < :cursor")
            params["cursor"] = cursor
        query = (
            f"SELECT * FROM runlane_runs WHERE {' AND '.join(clauses)} "
            "ORDER BY id DESC LIMIT :limit"
        )
        rows = await self._run(lambda: self._read(query, params))
        runs = [run_from_row(row) for row in rows[:limit]]
        next_cursor = runs[-1].id if len(rows) > limit and runs else None
        return Page(runs, next_cursor)

    async def list_run_events(self, environment: str, run_id: str) -> list[RunEvent]:
        """A run's history, oldest first."""
        rows = await self._run(
            lambda: self._read(
                _QUERIES["list_run_events"], {"environment": environment, "run_id": run_id}
            )
        )
        return [event_from_row(row) for row in rows]

    async def list_expired_leases(self, environment: str, now: datetime, limit: int) -> list[Run]:
        """Leased runs whose lease ran out."""
        params = {"environment": environment, "now": to_micros(now), "limit": limit}
        rows = await self._run(lambda: self._read(_QUERIES["list_expired_leases"], params))
        return [run_from_row(row) for row in rows]

    # -- maintenance ---------------------------------------------------------------

    async def release_expired_idempotency_keys(self, environment: str, now: datetime) -> int:
        """Drop ownership whose owner failed, finished in active-only mode, or expired."""
        params = {"environment": environment, "now": to_micros(now)}
        return await self._run(
            lambda: self._write_count(_QUERIES["release_expired_idempotency_keys"], params)
        )

    async def reset_idempotency_key(self, environment: str, task_id: str, key: str) -> bool:
        """Drop one key's ownership."""
        params = {"environment": environment, "task_id": task_id, "key": key}
        return bool(
            await self._run(lambda: self._write_count(_QUERIES["reset_idempotency_key"], params))
        )

    def _write_count(self, query: str, params: dict[str, Any]) -> int:
        with self._transaction() as cur:
            return cur.execute(query, params).rowcount

    async def prune_runs(
        self, environment: str, older_than: datetime, statuses: Sequence[RunStatus], limit: int
    ) -> int:
        """Delete finished runs with their history and ownership rows."""
        params = {
            "environment": environment,
            "older_than": to_micros(older_than),
            "statuses": json.dumps([s.value for s in statuses]),
            "limit": limit,
        }

        def prune() -> int:
            with self._transaction() as cur:
                ids = [row["id"] for row in cur.execute(_QUERIES["prune_runs"], params).fetchall()]
                if ids:
                    scope = {"environment": environment, "run_ids": json.dumps(ids)}
                    cur.execute(_QUERIES["delete_run_events"], scope)
                    cur.execute(_QUERIES["delete_idempotency_keys_of_runs"], scope)
            return len(ids)

        return await self._run(prune)

    async def queue_stats(
        self, environment: str, queues: Sequence[QueuePolicy]
    ) -> list[QueueStats]:
        """Counts per queue and status."""
        rows = await self._run(
            lambda: self._read(_QUERIES["queue_stats"], {"environment": environment})
        )
        return build_queue_stats(
            queues, ((r["queue"], r["concurrency_key"], r["status"], r["count"]) for r in rows)
        )

    # -- dispatch and outbox --------------------------------------------------------

    async def request_due_deliveries(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime, limit: int
    ) -> int:
        """Delivery requests for due runs without one; bounded queues within capacity."""
        now_us = to_micros(now)

        def request() -> int:
            with self._transaction() as cur:
                scope = {"environment": environment, "now": now_us, "limit": limit}
                unbounded = [q.name for q in queues if q.concurrency_limit is None]
                bounded = {q.name: q for q in queues if q.concurrency_limit is not None}
                rows = cur.execute(
                    _QUERIES["undelivered_runs"], {**scope, "queues": json.dumps(unbounded)}
                ).fetchall()
                chosen: list[tuple[str, int | None]] = [(row["id"], None) for row in rows]
                if bounded:
                    names = json.dumps(sorted(bounded))
                    occupied = {
                        (row["queue"], row["part"]): row["n"]
                        for row in cur.execute(
                            _QUERIES["occupied_by_partition"], {**scope, "queues": names}
                        )
                    }
                    for row in cur.execute(
                        _QUERIES["undelivered_runs"], {**scope, "queues": names}
                    ).fetchall():
                        policy = bounded[row["queue"]]
                        part = (row["queue"], row["concurrency_key"] or "")
                        assert policy.concurrency_limit is not None
                        if occupied.get(part, 0) >= policy.concurrency_limit:
                            continue
                        occupied[part] = occupied.get(part, 0) + 1
                        window = policy.reservation_window or 30.0
                        chosen.append((row["id"], now_us + int(window * 1_000_000)))
                for run_id, reserved_until in chosen:
                    marked = cur.execute(
                        _QUERIES["mark_delivery_requested"],
                        {
                            "environment": environment,
                            "id": run_id,
                            "now": now_us,
                            "reserved_until": reserved_until,
                        },
                    ).fetchone()
                    run = run_from_row(marked)
                    cur.execute(
                        _QUERIES["insert_event"],
                        _delivery_event(environment, run, run.event_sequence, now_us),
                    )
                    self._insert_outbox(cur, environment, run, run.event_sequence, now_us, None)
                return len(chosen)

        return await self._run(request)

    async def expire_dispatch_reservations(self, environment: str, now: datetime) -> int:
        """Free reservations nobody claimed within their window."""
        params = {"environment": environment, "now": to_micros(now)}
        return await self._run(
            lambda: self._write_count(_QUERIES["expire_dispatch_reservations"], params)
        )

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

        def claim() -> list[OutboxMessage]:
            with self._transaction() as cur:
                rows = cur.execute(_QUERIES["claim_outbox"], params).fetchall()
            return [outbox_from_row(row) for row in rows]

        return await self._run(claim)

    async def settle_outbox(
        self, environment: str, results: Sequence[OutboxResult], now: datetime
    ) -> None:
        """Record publish outcomes."""
        now_us = to_micros(now)
        published = [
            {
                "environment": environment,
                "id": r.id,
                "now": now_us,
                "provider_message_id": r.provider_message_id,
            }
            for r in results
            if r.published
        ]
        failed = [
            {
                "environment": environment,
                "id": r.id,
                "retry_at": _micros_or_none(r.retry_at) or now_us,
                "last_error": dumps(r.error or {}),
            }
            for r in results
            if not r.published
        ]

        def settle() -> None:
            with self._transaction() as cur:
                if published:
                    cur.executemany(_QUERIES["mark_outbox_published"], published)
                if failed:
                    cur.executemany(_QUERIES["mark_outbox_failed"], failed)

        await self._run(settle)

    async def outbox_counts(self, environment: str) -> dict[str, int]:
        """Outbox messages per status (for operators and tests)."""
        rows = await self._run(
            lambda: self._read(_QUERIES["outbox_counts"], {"environment": environment})
        )
        return {row["status"]: row["n"] for row in rows}

    # -- schedules -----------------------------------------------------------------

    async def get_schedule_states(self, environment: str) -> dict[str, ScheduleState]:
        """Stored schedule state by id."""
        rows = await self._run(
            lambda: self._read(_QUERIES["get_schedule_states"], {"environment": environment})
        )
        return {
            row["schedule_id"]: ScheduleState(
                row["schedule_id"],
                from_micros(row["last_slot"]) if row["last_slot"] is not None else None,
                bool(row["paused"]),
            )
            for row in rows
        }

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
        await self._run(lambda: self._write_count(_QUERIES["set_schedule_paused"], params))

    async def materialize_schedule_occurrences(
        self, environment: str, occurrences: Sequence[ScheduleOccurrence], now: datetime
    ) -> list[Run]:
        """Claim occurrences and create their runs in one transaction."""
        now_us = to_micros(now)

        def materialize() -> list[Run]:
            created: list[Run] = []
            with self._transaction() as cur:
                for occurrence in occurrences:
                    slot = to_micros(occurrence.slot)
                    scope = {
                        "environment": environment,
                        "schedule_id": occurrence.schedule_id,
                        "slot": slot,
                        "now": now_us,
                    }
                    claimed = cur.execute(
                        _QUERIES["claim_schedule_occurrence"],
                        {**scope, "run_id": occurrence.run.id},
                    ).fetchone()
                    cur.execute(_QUERIES["advance_schedule"], scope)
                    if claimed is None:
                        continue
                    outcome = self._create_one(cur, environment, occurrence.run, now_us, None, None)
                    if outcome.created:
                        created.append(outcome.run)
            return created

        return await self._run(materialize)


def _is_plain(new: NewRun) -> bool:
    return new.idempotency_key is None and new.singleton_key is None


def _run_from_new(environment: str, new: NewRun, now: datetime) -> Run:
    """The run exactly as storage now holds it, without reading it back."""
    return Run(
        id=new.id,
        environment=environment,
        task_id=new.task_id,
        queue=new.queue,
        status=new.status,
        payload=new.payload,
        attempt=0,
        failure_count=0,
        run_at=from_micros(to_micros(new.run_at)),
        created_at=now,
        updated_at=now,
        event_sequence=1 + int(new.request_delivery),
        source=new.source,
        concurrency_key=new.concurrency_key,
        trace_carrier=new.trace_carrier,
    )


def _owner_holds(row: sqlite3.Row, now_us: int) -> bool:
    status = RunStatus(row["status"])
    if status.is_active:
        return True
    if status is RunStatus.FAILED or row["key_expires_at"] is None:
        return False
    return bool(row["key_expires_at"] > now_us)


def _micros_or_none(moment: datetime | None) -> int | None:
    return to_micros(moment) if moment is not None else None


def _insert_params(
    environment: str, new: NewRun, now_us: int, lease: LeaseRequest | None, token: str | None
) -> dict[str, Any]:
    leased = lease is not None
    return {
        "environment": environment,
        "id": new.id,
        "task_id": new.task_id,
        "queue": new.queue,
        "status": RunStatus.RUNNING.value if leased else new.status.value,
        "payload": new.payload_json,
        "attempt": 1 if leased else 0,
        "run_at": to_micros(new.run_at),
        "now": now_us,
        "event_sequence": 1 + int(leased) + int(new.request_delivery),
        "delivery_requested_at": now_us if new.request_delivery else None,
        "source": dumps(new.source.to_json()),
        "idempotency_key": new.idempotency_key,
        "singleton_key": new.singleton_key,
        "concurrency_key": new.concurrency_key,
        "trace_carrier": dumps(new.trace_carrier) if new.trace_carrier is not None else None,
        "lease_owner": lease.worker_id if lease else None,
        "lease_token": token,
        "lease_expires_at": to_micros(lease.expires_at) if lease else None,
    }


def _lease_params(lease: LeaseRequest, now: datetime) -> dict[str, Any]:
    return {
        "worker_id": lease.worker_id,
        "lease_token": new_token(),
        "lease_expires_at": to_micros(lease.expires_at),
        "now": to_micros(now),
    }


def _event_row(
    environment: str,
    run_id: str,
    sequence: int,
    type_: RunEventType,
    now_us: int,
    data: dict[str, Any],
) -> dict[str, Any]:
    return {
        "environment": environment,
        "run_id": run_id,
        "sequence": sequence,
        "type": type_.value,
        "occurred_at": now_us,
        "data": dumps(data),
    }


def _creation_events(
    environment: str, run: Run, now_us: int, delivery_requested: bool
) -> list[dict[str, Any]]:
    events = [
        _event_row(
            environment,
            run.id,
            1,
            RunEventType.CREATED,
            now_us,
            {
                "task_id": run.task_id,
                "queue": run.queue,
                "run_at": run.run_at.isoformat(),
                "source": run.source.to_json(),
            },
        )
    ]
    if delivery_requested:
        events.append(_delivery_event(environment, run, 2, now_us))
    if run.status is RunStatus.RUNNING:
        events.append(_started_event(environment, run, now_us))
    return events


def _delivery_event(environment: str, run: Run, sequence: int, now_us: int) -> dict[str, Any]:
    return _event_row(
        environment,
        run.id,
        sequence,
        RunEventType.DELIVERY_REQUESTED,
        now_us,
        {"queue": run.queue, "outbox_id": f"{run.id}.{sequence}"},
    )


def _started_event(environment: str, run: Run, now_us: int) -> dict[str, Any]:
    assert run.lease is not None
    return _event_row(
        environment,
        run.id,
        run.event_sequence,
        RunEventType.STARTED,
        now_us,
        {
            "attempt": run.attempt,
            "worker_id": run.lease.owner,
            "lease_expires_at": run.lease.expires_at.isoformat(),
        },
    )


def _transition_params(environment: str, transition: Transition, now_us: int) -> dict[str, Any]:
    changes = transition.changes
    return {
        "environment": environment,
        "id": transition.run_id,
        "status": changes.status.value,
        "run_at": _micros_or_none(changes.run_at),
        "result": dumps(changes.result) if changes.result is not None else None,
        "failure": dumps(changes.failure.to_json()) if changes.failure is not None else None,
        "cancel_reason": changes.cancel_reason,
        "add_failure": int(changes.add_failure),
        "event_count": len(transition.events),
        "now": now_us,
        "keep_lease": int(changes.keep_lease),
        "expected_sequence": transition.expected_sequence,
        "lease_token": transition.lease_token,
        "lease_expired_by": _micros_or_none(transition.lease_expired_by),
    }


def _transition_events(
    environment: str, transition: Transition, now_us: int
) -> list[dict[str, Any]]:
    return [
        _event_row(
            environment,
            transition.run_id,
            transition.expected_sequence + offset,
            event.type,
            now_us,
            event.data,
        )
        for offset, event in enumerate(transition.events, start=1)
    ]


def _split_statements(sql: str) -> list[str]:
    return [s.strip() for s in sqlite3_statements(sql) if s.strip()]


def sqlite3_statements(sql: str) -> Iterator[str]:
    """Split a migration into statements (ours hold no ';' inside literals)."""
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer
            buffer = ""
    if buffer.strip():
        yield buffer


def _unavailable(error: sqlite3.Error, path: str) -> RunlaneError:
    return RunlaneError(
        ErrorCode.STORAGE_UNAVAILABLE,
        "The SQLite database could not be used; check the path, permissions and disk space.",
        meta={
            "path": path,
            "driver_error": str(error),
            "sqlite_code": getattr(error, "sqlite_errorname", None),
        },
        retryable=True,
    )
