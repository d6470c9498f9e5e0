"""Presentation-neutral views: runs, events, queue stats and tick reports as plain dicts.

Every value is JSON-ready (times as ISO 8601 strings in UTC, enums as their
values), so a CLI table, a JSON dump and a dashboard page all show the same
fields under the same names. Lease tokens are fencing secrets and never shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from runlane.core.queue_pauses import QueueInfo
from runlane.core.schedule_service import ScheduleInfo
from runlane.model.payloads import UnreadablePayload
from runlane.model.throughput import OUTCOME_SERIES
from runlane.topics.records import DeadLetter, PublishReceipt, SubscriptionStats
from runlane.types.records import GroupStatus, HaltedKey
from runlane.types.runs import (
    ACTIVE_STATUSES,
    QueueStats,
    QueueThroughput,
    Run,
    RunEvent,
    RunProgress,
    RunStatus,
    ThroughputPoint,
    ThroughputSeries,
    TickReport,
)

View = dict[str, Any]

#: Columns of a run listing, in display order (a subset of :func:`run_view`).
RUN_ROW_FIELDS = (
    "id",
    "task_id",
    "queue",
    "status",
    "attempt",
    "priority",
    "run_at",
    "updated_at",
    "progress",
)


def iso(moment: datetime | None) -> str | None:
    """A time as ISO 8601 in UTC, or ``None``."""
    return moment.astimezone(UTC).isoformat() if moment is not None else None


def run_view(run: Run) -> View:
    """Everything an operator may see about one run.

    >>> run_view(run)["status"]
    'succeeded'
    """
    return {
        "id": run.id,
        "environment": run.environment,
        "task_id": run.task_id,
        "queue": run.queue,
        "status": run.status.value,
        "attempt": run.attempt,
        "failure_count": run.failure_count,
        "priority": run.priority,
        "run_at": iso(run.run_at),
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "payload": (
            f"<unreadable payload: {run.payload.reason}>"
            if isinstance(run.payload, UnreadablePayload)
            else run.payload
        ),
        "result": run.result,
        "failure": run.failure.to_json() if run.failure is not None else None,
        "source": run.source.to_json(),
        "idempotency_key": run.idempotency_key,
        "singleton_key": run.singleton_key,
        "concurrency_key": run.concurrency_key,
        "trace_carrier": run.trace_carrier,
        "lease": (
            {"owner": run.lease.owner, "expires_at": iso(run.lease.expires_at)}
            if run.lease is not None
            else None
        ),
        "cancel_reason": run.cancel_reason,
        "partition_key": run.partition_key,
        "replays": run.replays,
        "progress": progress_view(run.progress),
    }


def progress_view(progress: RunProgress | None) -> View | None:
    """A run's latest reported progress (``None`` before the first report).

    >>> progress_view(run.progress)["fraction"]
    0.42
    """
    if progress is None:
        return None
    return {
        "fraction": progress.fraction,
        "message": progress.message,
        "data": progress.data,
        "attempt": progress.attempt,
        "updated_at": iso(progress.updated_at),
    }


def run_row(run: Run) -> View:
    """The short form of a run for listings (:data:`RUN_ROW_FIELDS`)."""
    view = run_view(run)
    return {name: view[name] for name in RUN_ROW_FIELDS}


def event_view(event: RunEvent) -> View:
    """One history entry."""
    return {
        "run_id": event.run_id,
        "sequence": event.sequence,
        "type": event.type.value,
        "occurred_at": iso(event.occurred_at),
        "data": event.data,
    }


def queue_stats_view(stats: QueueStats) -> View:
    """Counts for one queue (or one concurrency key of a bounded queue), every status present."""
    return {
        "queue": stats.queue,
        "concurrency_key": stats.concurrency_key,
        "concurrency_limit": stats.concurrency_limit,
        "waiting": stats.waiting,
        "running": stats.running,
        "occupied": stats.occupied,
        "due": stats.due,
        "oldest_due_at": iso(stats.oldest_due_at),
        "rate_limited": stats.rate_limited,
        "counts": {status.value: stats.counts.get(status, 0) for status in RunStatus},
    }


def queue_view(info: QueueInfo) -> View:
    """A registered queue with its limits and pause state."""
    return {
        "queue": info.name,
        "default": info.default,
        "concurrency_limit": info.concurrency_limit,
        "paused": info.paused,
        "paused_at": iso(info.paused_at),
        "paused_reason": info.paused_reason,
        "rate_limit": _rate_limit_text(info),
        "next_token_at": iso(info.next_token_at),
        "rate_limit_by": info.rate_limit_by,
        "limited_keys": [{"key": key, "next_token_at": iso(at)} for key, at in info.limited_keys],
    }


def _rate_limit_text(info: QueueInfo) -> str | None:
    """``"10/s"``, or ``"100/m per key"`` for a queue limited per key."""
    if info.rate_limit is None:
        return None
    return f"{info.rate_limit} per key" if info.rate_limit_by else str(info.rate_limit)


def throughput_view(throughput: QueueThroughput) -> View:
    """Runs of one queue that finished inside a window, by outcome."""
    return {
        "queue": throughput.queue,
        "succeeded": throughput.succeeded,
        "failed": throughput.failed,
        "cancelled": throughput.cancelled,
    }


#: The outcomes a throughput point counts, in chart order.
THROUGHPUT_OUTCOMES = OUTCOME_SERIES


def throughput_series_view(series: ThroughputSeries) -> View:
    """A throughput chart's data (``rl.throughput_series``): points oldest first, and
    the window's total.

    >>> throughput_series_view(series)["total"]["succeeded"]
    1200
    """
    return {
        "queue": series.queue,
        "window": series.window,
        "bucket_seconds": series.bucket_seconds,
        "points": [throughput_point_view(point) for point in series.points],
        "total": throughput_point_view(series.total),
    }


def throughput_point_view(point: ThroughputPoint) -> View:
    """One bar of a throughput chart."""
    return {
        "at": iso(point.at),
        "succeeded": point.succeeded,
        "failed": point.failed,
        "retried": point.retried,
        "cancelled": point.cancelled,
        "started": point.started,
        "latency_p50_ms": point.latency_p50_ms,
        "latency_p95_ms": point.latency_p95_ms,
    }


def active_run_count(stats: list[QueueStats]) -> int:
    """Runs not yet finished across ``stats`` (waiting, running or being cancelled)."""
    return sum(s.counts.get(status, 0) for s in stats for status in ACTIVE_STATUSES)


def schedule_view(info: ScheduleInfo) -> View:
    """A schedule with its state and next fire time (``None`` while paused or disabled)."""
    return {
        "id": info.id,
        "task_id": info.task_id,
        "kind": info.kind,
        "expression": info.expression,
        "timezone": info.timezone,
        "enabled": info.enabled,
        "paused": info.paused,
        "last_fired_at": iso(info.last_fired_at),
        "next_fire_at": iso(info.next_fire_at),
    }


def tick_report_view(report: TickReport) -> View:
    """What one maintenance pass did, duty by duty, plus the total."""
    counts = asdict(report)
    failures = counts.pop("failures")
    # Flat counts, one per duty that failed: tables and JSON lines stay one level deep.
    failed = {f"failed_{duty}": count for duty, count in failures.items()}
    return {**counts, **failed, "total": report.total()}


# -- topics ------------------------------------------------------------------------------

#: Columns of a dead-letter listing, in display order.
DEAD_LETTER_ROW_FIELDS = (
    "id",
    "subscription",
    "key",
    "reason",
    "attempt",
    "dead_lettered_at",
    "blocks_key",
)


def publish_receipt_view(receipt: PublishReceipt) -> View:
    """What one publish did: the message and its delivery runs (short rows); an SNS
    publish adds SNS's ``provider_message_id``."""
    view: View = {
        "message_id": receipt.message_id,
        "topic": receipt.topic,
        "duplicate": receipt.duplicate,
        "sequence": receipt.sequence,
        "published_at": iso(receipt.published_at),
        "runs": [run_row(run) for run in receipt.runs],
    }
    if receipt.provider_message_id is not None:
        view["provider_message_id"] = receipt.provider_message_id
    return view


def dead_letter_view(letter: DeadLetter) -> View:
    """One dead letter with its message, exactly the fields of the contract."""
    message = letter.message
    return {
        "id": letter.id,
        "subscription": letter.subscription,
        "topic": letter.topic,
        "key": letter.key,
        "reason": letter.reason,
        "failure": letter.failure.to_json() if letter.failure is not None else None,
        "attempt": letter.attempt,
        "replays": letter.replays,
        "dead_lettered_at": iso(letter.dead_lettered_at),
        "blocks_key": letter.blocks_key,
        "message": {
            "id": message.id,
            "attributes": dict(message.attributes),
            "payload": message.payload,
            "published_at": iso(message.published_at),
            "sequence": message.sequence,
        },
    }


def subscription_stats_view(stats: SubscriptionStats) -> View:
    """A subscription's deliveries by status (statuses with none left out) and totals."""
    return {
        "name": stats.name,
        "topic": stats.topic,
        "mode": stats.mode.value,
        "queue": stats.queue,
        "counts": {status.value: count for status, count in stats.counts.items()},
        "waiting": stats.waiting,
        "running": stats.running,
        "dead_lettered": stats.dead_lettered,
        "halted_keys": stats.halted_keys,
        "approximate": stats.approximate,
    }


def halted_key_view(halted: HaltedKey) -> View:
    """An ORDERED key whose head is dead-lettered."""
    return {
        "subscription": halted.subscription,
        "key": halted.key,
        "dead_letter_id": halted.dead_letter_id,
        "dead_lettered_at": iso(halted.dead_lettered_at),
        "waiting": halted.waiting,
    }


def related_run_view(run: Run) -> View:
    """A dependency or dependent of a run, as its run page lists it."""
    return {"id": run.id, "task_id": run.task_id, "status": run.status.value}


def run_with_relations_view(
    run: Run, dependencies: Sequence[Run], dependents: Sequence[Run]
) -> View:
    """:func:`run_view` with the run's ``dependencies`` (in the order given) and
    ``dependents``, each with its status (``runlane runs show``, the run page)."""
    view = run_view(run)
    view["dependencies"] = [related_run_view(dependency) for dependency in dependencies]
    view["dependents"] = [related_run_view(dependent) for dependent in dependents]
    return view


def group_view(group: GroupStatus) -> View:
    """A group's progress (``runlane groups show``, the group page)."""
    return {
        "id": group.id,
        "task_id": group.task_id,
        "total": group.total,
        "done": group.done,
        "failed": group.failed,
        "counts": {status.value: n for status, n in sorted(group.counts.items())},
        "callback_id": group.callback_id,
        "created_at": iso(group.created_at),
    }
