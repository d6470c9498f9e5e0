"""The façade glue both SQL drivers share: methods that are one named statement and a
row decoder, the same in every dialect. A driver supplies how to run a named
statement (:meth:`SqlStorageBase._fetch`, :meth:`SqlStorageBase._count`)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runlane.model.queue_defs import UNKEYED
from runlane.model.rate_limiting import next_token_at
from runlane.ports.storage import (
    DeadLetterFilter,
    HaltedKey,
    ProgressWrite,
    QueuePause,
    QueuePolicy,
    RateLimitState,
    ScheduleState,
    StoredDeadLetter,
    StoredMessage,
    SubscriptionCounts,
    ThroughputRow,
)
from runlane.storage.sql.messages import (
    check_limit,
    dead_letter_cursor,
    dead_letter_from_row,
    halted_key_from_row,
    message_from_row,
    parse_dead_letter_cursor,
    subscription_counts,
)
from runlane.storage.sql.progress import progress_from_row, progress_writes_json
from runlane.storage.sql.rows import queue_pause_from_row, run_from_row, schedule_states
from runlane.storage.sql.stats import build_queue_stats, finished_counts, queue_stats_rows
from runlane.types.clock import from_micros, to_micros
from runlane.types.runs import Page, QueueStats, Run, RunProgress, RunStatus


class SqlStorageBase(ABC):
    """Storage methods written once for every SQL driver."""

    @abstractmethod
    async def _fetch(self, query: str, params: dict[str, Any]) -> list[Any]:
        """Rows of the named statement ``query``, read by column name."""

    @abstractmethod
    async def _count(self, query: str, params: dict[str, Any]) -> int:
        """Run the named writing statement ``query``; how many rows it changed."""

    @abstractmethod
    def _texts(self, values: Sequence[str]) -> Any:
        """A list of strings as this dialect's statements take one parameter of them."""

    # -- reads ---------------------------------------------------------------------

    async def get_run(self, environment: str, run_id: str) -> Run | None:
        """Read one run."""
        rows = await self._fetch("get_run", {"environment": environment, "id": run_id})
        return run_from_row(rows[0]) if rows else None

    async def get_runs(self, environment: str, run_ids: Sequence[str]) -> list[Run]:
        """The runs among ``run_ids`` that exist."""
        if not run_ids:
            return []
        params = {"environment": environment, "ids": self._texts(list(run_ids))}
        return [run_from_row(row) for row in await self._fetch("get_runs", params)]

    async def list_expired_leases(self, environment: str, now: datetime, limit: int) -> list[Run]:
        """Leased runs whose lease ran out, soonest expired first."""
        params = {"environment": environment, "now": to_micros(now), "limit": limit}
        return [run_from_row(row) for row in await self._fetch("list_expired_leases", params)]

    async def queue_stats(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime
    ) -> list[QueueStats]:
        """Counts per queue and status, and the capacity held at ``now``."""
        rows = await self._fetch("queue_stats", {"environment": environment, "now": to_micros(now)})
        return build_queue_stats(queues, queue_stats_rows(rows))

    async def count_finished_runs(
        self, environment: str, since: datetime
    ) -> dict[str, dict[RunStatus, int]]:
        """Finished runs per queue and status updated at or after ``since``."""
        params = {"environment": environment, "since": to_micros(since)}
        return finished_counts(await self._fetch("count_finished_runs", params))

    # -- progress ------------------------------------------------------------------

    async def write_progress(
        self, environment: str, writes: Sequence[ProgressWrite], now: datetime
    ) -> int:
        """Store each attempt's latest progress while it holds its lease (one statement)."""
        if not writes:
            return 0
        params = {
            "environment": environment,
            "writes": progress_writes_json(writes),
            # The runs' ids on their own, for a lookup by primary key (PostgreSQL).
            "ids": self._texts([write.run_id for write in writes]),
            "now": to_micros(now),
        }
        return await self._count("write_progress", params)

    async def get_progress(
        self, environment: str, run_ids: Sequence[str]
    ) -> dict[str, RunProgress]:
        """Stored progress by run id."""
        if not run_ids:
            return {}
        params = {"environment": environment, "ids": self._texts(list(run_ids))}
        rows = await self._fetch("get_progress", params)
        return {row["run_id"]: progress_from_row(row) for row in rows}

    # -- throughput ----------------------------------------------------------------

    async def record_throughput(
        self, environment: str, rows: Sequence[ThroughputRow], older_than: datetime
    ) -> None:
        """Add ``rows`` to the rollup; drop its minutes before ``older_than``."""
        if rows:
            encoded = json.dumps(
                [[row.queue, to_micros(row.period), row.series, row.count] for row in rows]
            )
            await self._count("record_throughput", {"environment": environment, "rows": encoded})
        params = {"environment": environment, "before": to_micros(older_than)}
        await self._count("prune_throughput", params)

    async def read_throughput(
        self, environment: str, since: datetime, bucket_seconds: int, queue: str | None
    ) -> list[ThroughputRow]:
        """The rollup from ``since`` summed per ``bucket_seconds`` (and series)."""
        params = {
            "environment": environment,
            "since": to_micros(since),
            "bucket": bucket_seconds * 1_000_000,
            "queue": queue,
        }
        query = "read_throughput" if queue is None else "read_queue_throughput"
        return [
            ThroughputRow(
                queue if queue is not None else "",
                from_micros(int(row["period"])),
                row["series"],
                int(row["n"]),
            )
            for row in await self._fetch(query, params)
        ]

    # -- idempotency ---------------------------------------------------------------

    async def release_expired_idempotency_keys(self, environment: str, now: datetime) -> int:
        """Drop ownership whose owner failed, finished in active-only mode, or expired."""
        params = {"environment": environment, "now": to_micros(now)}
        return await self._count("release_expired_idempotency_keys", params)

    async def reset_idempotency_key(self, environment: str, task_id: str, key: str) -> bool:
        """Drop one key's ownership."""
        params = {"environment": environment, "task_id": task_id, "key": key}
        return bool(await self._count("reset_idempotency_key", params))

    # -- outbox --------------------------------------------------------------------

    async def outbox_counts(self, environment: str) -> dict[str, int]:
        """Outbox messages per status (for operators and tests)."""
        rows = await self._fetch("outbox_counts", {"environment": environment})
        return {row["status"]: int(row["n"]) for row in rows}

    async def outbox_backlog(self, environment: str) -> dict[str, int]:
        """Delivery requests not yet published, per queue."""
        rows = await self._fetch("outbox_backlog", {"environment": environment})
        return {row["queue"]: int(row["n"]) for row in rows}

    # -- schedules -----------------------------------------------------------------

    async def get_schedule_states(self, environment: str) -> dict[str, ScheduleState]:
        """Stored schedule state by id."""
        return schedule_states(
            await self._fetch("get_schedule_states", {"environment": environment})
        )

    async def list_queue_pauses(self, environment: str) -> list[QueuePause]:
        """Every paused queue, by name."""
        rows = await self._fetch("list_queue_pauses", {"environment": environment})
        return [queue_pause_from_row(row) for row in rows]

    async def list_rate_limit_states(
        self, environment: str, now: datetime | None = None
    ) -> list[RateLimitState]:
        """Every rate-limit partition's token state (with its due runs at ``now``)."""
        rows = await self._fetch(
            "list_rate_limit_states",
            {"environment": environment, "now": -1 if now is None else to_micros(now)},
        )
        return [
            RateLimitState(row["queue"], row["rate_key"], row["tat"], row["due"]) for row in rows
        ]

    async def get_rate_limit_state(self, environment: str, queue: str, rate_key: str) -> int | None:
        """One partition's stored token state (its tat), or None when it has none."""
        rows = await self._fetch(
            "get_rate_limit_state",
            {"environment": environment, "queue": queue, "rate_key": rate_key},
        )
        return int(rows[0]["tat"]) if rows else None

    async def next_rate_token(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime
    ) -> datetime | None:
        """The soonest token ahead among the rate-limited ``queues``' partitions."""
        now_us = to_micros(now)
        soonest: int | None = None
        for policy in queues:
            limit = policy.rate_limit
            if limit is None:
                continue
            at: int | None
            if policy.rate_keyed:
                rows = await self._fetch(
                    "next_ready_partition",
                    {"environment": environment, "queue": policy.name, "now": now_us},
                )
                at = rows[0]["at"] if rows else None
            else:
                tat = await self.get_rate_limit_state(environment, policy.name, UNKEYED)
                at = next_token_at(limit, tat, now_us)
            if at is not None and at > now_us and (soonest is None or at < soonest):
                soonest = at
        return None if soonest is None else from_micros(soonest)

    # -- topics --------------------------------------------------------------------

    async def list_dead_letters(
        self,
        environment: str,
        dead_letter_filter: DeadLetterFilter,
        limit: int,
        cursor: str | None,
    ) -> Page[StoredDeadLetter]:
        """Dead letters with their messages, oldest first; one row more than ``limit``
        is read to know whether a next page exists."""
        check_limit(limit, "list_dead_letters")
        after_at, after_id = parse_dead_letter_cursor(cursor)
        params = {
            "environment": environment,
            "topic": dead_letter_filter.topic,
            "subscription": dead_letter_filter.subscription,
            "partition_key": dead_letter_filter.partition_key,
            "run_id": dead_letter_filter.run_id,
            "after_at": after_at,
            "after_id": after_id,
            "limit": limit + 1,
        }
        rows = await self._fetch("list_dead_letters", params)
        page = [dead_letter_from_row(row) for row in rows[:limit]]
        more = len(rows) > limit and page
        return Page(page, dead_letter_cursor(page[-1]) if more else None)

    async def get_messages(
        self, environment: str, message_ids: Sequence[str]
    ) -> dict[str, StoredMessage]:
        """Stored messages by id."""
        if not message_ids:
            return {}
        params = {"environment": environment, "ids": self._texts(list(message_ids))}
        rows = await self._fetch("get_messages", params)
        return {message.id: message for message in map(message_from_row, rows)}

    async def subscription_stats(
        self, environment: str, subscriptions: Sequence[str]
    ) -> list[SubscriptionCounts]:
        """Deliveries per status of each subscription, and its halted keys."""
        params = {"environment": environment, "subscriptions": self._texts(list(subscriptions))}
        return subscription_counts(await self._fetch("subscription_stats", params), subscriptions)

    async def list_halted_keys(
        self, environment: str, subscription: str, limit: int, cursor: str | None
    ) -> Page[HaltedKey]:
        """Halted ORDERED keys of ``subscription`` by key; the cursor is the last key."""
        check_limit(limit, "list_halted_keys")
        params = {
            "environment": environment,
            "subscription": subscription,
            "cursor": cursor,
            "limit": limit + 1,
        }
        rows = await self._fetch("list_halted_keys", params)
        keys = [halted_key_from_row(row) for row in rows[:limit]]
        return Page(keys, keys[-1].key if len(rows) > limit and keys else None)

    async def release_expired_deduplication_keys(self, environment: str, now: datetime) -> int:
        """Drop deduplication entries whose window has ended."""
        params = {"environment": environment, "now": to_micros(now)}
        return await self._count("release_expired_deduplication_keys", params)
