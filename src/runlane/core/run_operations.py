"""Operator calls on runs: ``rl.runs``, ``rl.idempotency_keys`` and the queue counts
(``rl.queue_stats``, ``rl.throughput``, ``rl.outbox_backlog``)."""

from __future__ import annotations

import asyncio
import base64
import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runlane.core.maintenance import prune_finished_runs
from runlane.core.waiting import RunWatcher
from runlane.model.definitions import TaskDef
from runlane.model.queue_defs import QueueDef
from runlane.model.rate_limiting import rate_limited_counts, tokens_available
from runlane.model.transitions import project, request_cancellation
from runlane.ports.storage import TracksDependencies
from runlane.topics.states import RunsOperation, delivery_state, refuse_runs_operation
from runlane.types.clock import aware_utc, to_micros
from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import could_be_run_id, validate_identifier
from runlane.types.records import RunFilter
from runlane.types.runs import (
    TERMINAL_STATUSES,
    Page,
    QueueStats,
    QueueThroughput,
    Run,
    RunEvent,
    RunSourceType,
    RunStatus,
)
from runlane.types.storable_text import unstorable

if TYPE_CHECKING:
    from runlane.core.registry import Registry
    from runlane.core.store import StoreScope

#: Connects the lane (``Runlane.open``): safe to call more than once.
Connect = Callable[[], Awaitable[None]]
#: Creates a run of ``source``'s task and payload linked to it (rerun, manual retry).
CreateChildRun = Callable[[Run, RunSourceType, QueueDef | str | None], Awaitable[Run]]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
#: A cancel that races with a claim re-reads and tries again this often.
MAX_CANCEL_ATTEMPTS = 5


class Runs:
    """Read and act on runs of this runtime's environment."""

    def __init__(
        self,
        store: StoreScope,
        registry: Registry,
        connect: Connect,
        create_child_run: CreateChildRun,
    ) -> None:
        """Act on runs in ``store``; ``registry`` resolves queue names, ``connect``
        opens the lane before storage is touched, ``create_child_run`` writes reruns."""
        self._store = store
        self._registry = registry
        self._connect = connect
        self._create_child_run = create_child_run
        self._watcher = RunWatcher(store, self._with_progress, _not_found)

    async def get(self, run_id: str) -> Run:
        """One run, with its progress; RUN_NOT_FOUND if it is not in this environment."""
        run = await self._get_bare(run_id)
        (run,) = await self._with_progress([run])
        return run

    async def wait(self, run_id: str, *, timeout: Duration | None = "30s") -> Run:  # noqa: ASYNC109
        """Wait until run ``run_id`` is terminal (SUCCEEDED, FAILED or CANCELLED) and
        return it; past ``timeout`` raise the builtin :class:`TimeoutError`.

        ``timeout=None`` waits forever. An id not in this environment raises
        RUN_NOT_FOUND; a negative or malformed timeout, CONFIGURATION_INVALID. The wait
        hears other processes finish runs (PostgreSQL LISTEN/NOTIFY, the SQLite file
        wakeup) and re-reads storage at least once a second besides, so it never
        misses an outcome; all waits of a runtime share one listener and one read.

        >>> try:
        ...     run = await rl.runs.wait(run.id, timeout="30s")
        ... except TimeoutError:
        ...     ...  # still running: answer 202 with the run id
        """
        seconds = None if timeout is None else parse_duration(timeout, name="timeout")
        self._store.require("reads_run_history")
        if not could_be_run_id(run_id):
            raise _not_found(run_id)
        await self._connect()
        try:
            async with asyncio.timeout(seconds):
                return await self._watcher.wait(run_id)
        except TimeoutError:
            # The deadline may have cut the read that saw the outcome: one look settles it.
            run = await self.get(run_id)
            if run.status.is_terminal:
                return run
            raise TimeoutError(
                f"run {run_id} is still {run.status.value} after {seconds:g} s."
            ) from None

    async def close(self) -> None:
        """Stop the waiters' watcher (``Runlane.close``)."""
        await self._watcher.close()

    async def _get_bare(self, run_id: str) -> Run:
        store = self._store
        store.require("reads_run_history")
        if not could_be_run_id(run_id):
            raise _not_found(run_id)
        await self._connect()
        run = await store.storage.get_run(store.environment, run_id)
        if run is None:
            raise _not_found(run_id)
        return run

    async def _with_progress(self, runs: builtins.list[Run]) -> builtins.list[Run]:
        """``runs`` with the progress their tasks reported (one read for all)."""
        if not runs:
            return runs
        store = self._store
        found = await store.storage.get_progress(store.environment, [run.id for run in runs])
        if not found:
            return runs
        return [replace(run, progress=found[run.id]) if run.id in found else run for run in runs]

    async def list(
        self,
        *,
        statuses: Sequence[RunStatus | str] | None = None,
        tasks: Sequence[TaskDef[Any] | str] | None = None,
        queues: Sequence[QueueDef | str] | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        group: str | None = None,
    ) -> Page[Run]:
        """Runs newest first; pass ``page.next_cursor`` back for the next page.

        ``group``: only the members of that group (``rl.trigger_group``), not its callback.
        """
        self._store.require("reads_run_history")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
            raise configuration_error(f"limit must be between 1 and {MAX_PAGE_SIZE}.")
        try:
            status_values = [RunStatus(s) for s in statuses or ()]
        except ValueError:
            raise configuration_error(
                f"unknown status in {list(statuses or ())}; use {[s.value for s in RunStatus]}."
            ) from None
        task_ids = [
            t.id if isinstance(t, TaskDef) else validate_identifier(t, name="task")
            for t in tasks or ()
        ]
        queue_names = [
            self._registry.resolve_queue(q, purpose="run listing").name for q in queues or ()
        ]
        await self._connect()
        if group is not None and (not isinstance(group, str) or not group):
            raise configuration_error("group must be a group id (a non-empty string).")
        run_filter = RunFilter(status_values, task_ids, queue_names, group=group)
        page = await _listed(self._store, run_filter, limit, cursor)
        return Page(await self._with_progress(page.data), page.next_cursor)

    async def dependencies(self, run_id: str) -> builtins.list[Run]:
        """The runs ``run_id`` was triggered ``after``, in the order given, as they are
        now; RUN_NOT_FOUND if it is not in this environment."""
        await self.get(run_id)
        storage = self._store.storage
        if not isinstance(storage, TracksDependencies):
            return []
        return await storage.list_dependencies(self._store.environment, run_id)

    async def dependents(self, run_id: str, *, limit: int = 100) -> builtins.list[Run]:
        """Up to ``limit`` runs triggered ``after`` ``run_id`` (by id), as they are now;
        RUN_NOT_FOUND if it is not in this environment."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
            raise configuration_error(f"limit must be between 1 and {MAX_PAGE_SIZE}.")
        await self.get(run_id)
        storage = self._store.storage
        if not isinstance(storage, TracksDependencies):
            return []
        return await storage.list_dependents(self._store.environment, run_id, limit)

    async def events(self, run_id: str) -> builtins.list[RunEvent]:
        """The run's history, oldest first."""
        await self._get_bare(run_id)
        return await self._store.storage.list_run_events(self._store.environment, run_id)

    async def cancel(self, run_id: str, reason: str | None = None) -> Run:
        """Cancel a waiting run at once; ask a running one to stop (CANCELLATION_REQUESTED)."""
        store = self._store
        if reason is not None:
            if not isinstance(reason, str):
                raise configuration_error("reason must be a string.")
            problem = unstorable(reason)
            if problem is not None:
                raise configuration_error(f"reason must not contain {problem}.")
        for _ in range(MAX_CANCEL_ATTEMPTS):
            run = await self._get_bare(run_id)
            _refuse_delivery(run, RunsOperation.CANCEL)
            transition = request_cancellation(run, reason)
            if transition is None:
                return run
            now = store.now()
            (applied,) = await store.storage.apply_transitions(store.environment, [transition], now)
            if applied:
                return project(run, transition, now)
        raise RunlaneError(
            ErrorCode.STORAGE_CONFLICT, f"run {run_id} kept changing; cancel again.", retryable=True
        )

    async def retry(self, run_id: str, *, queue: QueueDef | str | None = None) -> Run:
        """A failed run → a new linked child run (``source.type == "manual_retry"``)."""
        source = await self._get_bare(run_id)
        _refuse_delivery(source, RunsOperation.RETRY)
        if source.status is not RunStatus.FAILED:
            raise RunlaneError(
                ErrorCode.INVALID_STATE,
                f"run {run_id} is {source.status.value}; only failed runs can be retried "
                "(use rerun for other finished runs).",
                meta={"run_id": run_id, "status": source.status.value},
            )
        return await self._create_child_run(source, RunSourceType.MANUAL_RETRY, queue)

    async def rerun(self, run_id: str, *, queue: QueueDef | str | None = None) -> Run:
        """Any finished run → a new linked child run (``source.type == "rerun"``)."""
        source = await self._get_bare(run_id)
        _refuse_delivery(source, RunsOperation.RERUN)
        if not source.status.is_terminal:
            raise RunlaneError(
                ErrorCode.INVALID_STATE,
                f"run {run_id} is still {source.status.value}; only finished runs can be rerun.",
                meta={"run_id": run_id, "status": source.status.value},
            )
        return await self._create_child_run(source, RunSourceType.RERUN, queue)

    async def prune(
        self,
        *,
        older_than: Duration | datetime,
        statuses: Sequence[RunStatus | str] | None = None,
    ) -> int:
        """Delete finished runs (and their history) last updated before ``older_than``."""
        store = self._store
        store.require("prunes_runs")
        try:
            chosen = frozenset(RunStatus(s) for s in statuses) if statuses else TERMINAL_STATUSES
        except ValueError:
            raise configuration_error(f"unknown status in {list(statuses or ())}.") from None
        if not chosen <= TERMINAL_STATUSES:
            active = sorted(s.value for s in chosen - TERMINAL_STATUSES)
            raise configuration_error(f"only finished runs can be pruned, not {active}.")
        if isinstance(older_than, datetime):
            cutoff = aware_utc(older_than, name="older_than")
            seconds = max(0.0, (store.now() - cutoff).total_seconds())
        else:
            seconds = parse_duration(older_than, name="older_than")
        await self._connect()
        return await prune_finished_runs(store, seconds, chosen)


class IdempotencyKeys:
    """The escape hatch for idempotency ownership."""

    def __init__(self, store: StoreScope, registry: Registry, connect: Connect) -> None:
        """Reset keys in ``store`` of tasks in ``registry``, after ``connect``."""
        self._store = store
        self._registry = registry
        self._connect = connect

    async def reset(self, task: TaskDef[Any] | str, key: str) -> bool:
        """Forget the owner of ``key`` for ``task``; the next trigger creates a new run."""
        store = self._store
        store.require("enforces_idempotency")
        definition = self._registry.resolve_task(task)
        validate_identifier(key, name="idempotency key")
        await self._connect()
        return await store.storage.reset_idempotency_key(store.environment, definition.id, key)


class QueueCounts:
    """Counts per registered queue: waiting and running runs, finished runs, and
    delivery requests not yet published."""

    def __init__(self, store: StoreScope, registry: Registry, connect: Connect) -> None:
        """Count runs in ``store`` of the queues in ``registry``, after ``connect``."""
        self._store = store
        self._registry = registry
        self._connect = connect

    async def queue_stats(self) -> list[QueueStats]:
        """``Runlane.queue_stats``."""
        await self._connect()
        store = self._store
        policies = self._registry.queue_policies
        now = store.now()
        stats = await store.storage.queue_stats(store.environment, policies, now)
        limits = {p.name: p.rate_limit for p in policies if p.rate_limit is not None}
        if not limits:
            return stats
        states = await store.storage.list_rate_limit_states(store.environment, now)
        tats = {(s.queue, s.rate_key): s.tat for s in states}
        keyed = {p.name for p in policies if p.rate_keyed}
        now_us = to_micros(now)
        for name, limit in limits.items():
            indexes = [i for i, entry in enumerate(stats) if entry.queue == name]
            due = [stats[i].due for i in indexes]
            if name in keyed:
                # Each key's due runs beyond its own tokens wait; the rest may start.
                limited = sum(
                    max(0, s.due - tokens_available(limit, s.tat, now_us))
                    for s in states
                    if s.queue == name
                )
                tokens = max(0, sum(due) - limited)
            else:
                tokens = tokens_available(limit, tats.get((name, "")), now_us)
            waiting = rate_limited_counts(due, tokens)
            for i, count in zip(indexes, waiting, strict=True):
                stats[i] = replace(stats[i], rate_limited=count)
        return stats

    async def throughput(self, since: Duration | datetime) -> list[QueueThroughput]:
        """``Runlane.throughput``."""
        store = self._store
        if isinstance(since, datetime):
            start = aware_utc(since, name="since")
        else:
            start = store.now() - timedelta(seconds=parse_duration(since, name="since"))
        await self._connect()
        counts = await store.storage.count_finished_runs(store.environment, start)
        return [
            QueueThroughput(
                name,
                succeeded=counts.get(name, {}).get(RunStatus.SUCCEEDED, 0),
                failed=counts.get(name, {}).get(RunStatus.FAILED, 0),
                cancelled=counts.get(name, {}).get(RunStatus.CANCELLED, 0),
            )
            for name in self._registry.queues
        ]

    async def outbox_backlog(self) -> dict[str, int]:
        """``Runlane.outbox_backlog``."""
        await self._connect()
        backlog = await self._store.storage.outbox_backlog(self._store.environment)
        return {name: backlog.get(name, 0) for name in self._registry.queues}


async def _listed(
    store: StoreScope, run_filter: RunFilter, limit: int, cursor: str | None
) -> Page[Run]:
    page = await store.storage.list_runs(
        store.environment, run_filter, limit, _decode_cursor(cursor)
    )
    return Page(page.data, _encode_cursor(page.next_cursor))


def _encode_cursor(value: str | None) -> str | None:
    return base64.urlsafe_b64encode(value.encode()).decode() if value is not None else None


def _decode_cursor(value: object) -> str | None:
    if value is None:
        return None
    decoded: str | None = None
    if isinstance(value, str) and value.isascii():
        try:
            decoded = base64.b64decode(value, altchars=b"-_", validate=True).decode()
        except ValueError:  # binascii.Error and UnicodeDecodeError both are
            decoded = None
    # Only a cursor this API made is accepted: it encodes a run id, canonically.
    if decoded is None or not could_be_run_id(decoded) or _encode_cursor(decoded) != value:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise configuration_error(
            f"cursor {shown} is not one this API returned; pass a page's next_cursor "
            "unchanged, or no cursor for the first page."
        )
    return decoded


def _refuse_delivery(run: Run, operation: RunsOperation) -> None:
    """What ``rl.runs`` refuses of a delivery run (contract 5.6); task runs pass."""
    if run.mode is not None:
        refuse_runs_operation(operation, delivery_state(run))


def _not_found(run_id: object) -> RunlaneError:
    shown = repr(run_id) if len(repr(run_id)) <= 300 else repr(run_id)[:297] + "..."
    return RunlaneError(
        ErrorCode.RUN_NOT_FOUND,
        f"run {shown} does not exist in this environment.",
        meta={"run_id": run_id},
    )
