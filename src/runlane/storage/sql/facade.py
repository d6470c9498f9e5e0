"""The façade glue both SQL drivers share: methods that are one named statement and a
row decoder, the same in every dialect. A driver supplies how to run a named
statement (:meth:`SqlStorageBase._fetch`, :meth:`SqlStorageBase._count`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runlane.core.clock import to_micros
from runlane.storage.protocol import QueuePolicy, ScheduleState
from runlane.storage.sql.rows import run_from_row, schedule_states
from runlane.storage.sql.stats import build_queue_stats, finished_counts, queue_stats_rows
from runlane.types.runs import QueueStats, Run, RunStatus


class SqlStorageBase(ABC):
    """Storage methods written once for every SQL driver."""

    @abstractmethod
    async def _fetch(self, query: str, params: dict[str, Any]) -> list[Any]:
        """Rows of the named statement ``query``, read by column name."""

    @abstractmethod
    async def _count(self, query: str, params: dict[str, Any]) -> int:
        """Run the named writing statement ``query``; how many rows it changed."""

    # -- reads ---------------------------------------------------------------------

    async def get_run(self, environment: str, run_id: str) -> Run | None:
        """Read one run."""
        rows = await self._fetch("get_run", {"environment": environment, "id": run_id})
        return run_from_row(rows[0]) if rows else None

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
