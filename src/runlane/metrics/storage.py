"""Storage gauges: what the database holds now, collected at scrape time.

``prometheus_client`` collectors are synchronous and the operator API is
async, so a scrape first reads a :class:`StorageSnapshot` (one round of
operator calls), then hands it to a :class:`StorageGaugeCollector` that turns
it into metric families:

>>> snapshot = await read_storage_snapshot(rl)
>>> registry = CollectorRegistry(auto_describe=False)
>>> registry.register(StorageGaugeCollector(snapshot))
>>> body = generate_latest(registry)

Every registered queue gets every status series, zeros included: a series that
vanishes at zero breaks alert rules written against it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from runlane import ErrorCode, QueueStats, Runlane, RunlaneError, RunStatus

try:
    from prometheus_client.metrics_core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise RunlaneError(
        ErrorCode.CONFIGURATION_INVALID,
        "Prometheus metrics need prometheus-client; install it with "
        "pip install 'runlane[metrics]'.",
        meta={"missing": missing.name},
    ) from None


@dataclass(frozen=True, slots=True)
class StorageSnapshot:
    """One reading of the operator API, taken at ``taken_at``."""

    environment: str
    taken_at: datetime
    queue_stats: list[QueueStats]
    outbox_backlog: dict[str, int]
    #: Next fire time of every unpaused, enabled schedule, by schedule id.
    next_fires: dict[str, datetime]
    #: Whether each registered queue is paused, by name.
    paused: dict[str, bool] = field(default_factory=dict)


async def read_storage_snapshot(rl: Runlane) -> StorageSnapshot:
    """Read everything the storage gauges show, through the public operator API."""
    stats = await rl.queue_stats()
    backlog = await rl.outbox_backlog()
    schedules = await rl.schedules.list()
    queues = await rl.queues.list()
    return StorageSnapshot(
        environment=rl.environment,
        taken_at=rl.clock.now(),
        queue_stats=stats,
        outbox_backlog=backlog,
        next_fires={s.id: s.next_fire_at for s in schedules if s.next_fire_at is not None},
        paused={q.name: q.paused for q in queues},
    )


class StorageGaugeCollector(Collector):
    """Yields the storage gauges of one :class:`StorageSnapshot`.

    ==========================================  =============  ========================
    name                                        labels         meaning
    ==========================================  =============  ========================
    ``runlane_runs``                            queue, status  runs held, every status
    ``runlane_queue_due``                       queue          claimable runs now due
    ``runlane_queue_oldest_due_age_seconds``    queue          now - oldest due run_at
    ``runlane_queue_occupied``                  queue          capacity held (bounded)
    ``runlane_queue_limit``                     queue          concurrency limit per key
    ``runlane_outbox_backlog``                  queue          wakeups not yet published
    ``runlane_schedule_next_fire_timestamp_...  schedule       next fire (unpaused)
    ``runlane_queue_paused``                    queue          1 while paused, else 0
    ``runlane_queue_rate_limited``              queue          due runs waiting for tokens
    ==========================================  =============  ========================
    """

    def __init__(self, snapshot: StorageSnapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        """The metric families of the snapshot."""
        snap = self._snapshot
        runs = GaugeMetricFamily(
            "runlane_runs", "Runs in storage by queue and status.", labels=["queue", "status"]
        )
        due = _per_queue("runlane_queue_due", "Claimable runs whose run_at has passed.")
        oldest = _per_queue(
            "runlane_queue_oldest_due_age_seconds",
            "Seconds since the oldest due run became due (0 when none is due).",
        )
        occupied = _per_queue(
            "runlane_queue_occupied",
            "Capacity held by leases and dispatch reservations (bounded queues).",
        )
        limit = _per_queue(
            "runlane_queue_limit", "Concurrency limit of a bounded queue, per concurrency key."
        )
        backlog = _per_queue(
            "runlane_outbox_backlog", "Delivery requests not yet published to the transport."
        )
        for queue, parts in _by_queue(snap.queue_stats).items():
            for status in RunStatus:
                runs.add_metric([queue, status.value], sum(p.counts.get(status, 0) for p in parts))
            due.add_metric([queue], sum(p.due for p in parts))
            oldest_due = min(
                (p.oldest_due_at for p in parts if p.oldest_due_at is not None), default=None
            )
            age = (snap.taken_at - oldest_due).total_seconds() if oldest_due else 0.0
            oldest.add_metric([queue], max(0.0, age))
            if parts[0].concurrency_limit is not None:
                occupied.add_metric([queue], sum(p.occupied for p in parts))
                limit.add_metric([queue], parts[0].concurrency_limit)
            backlog.add_metric([queue], snap.outbox_backlog.get(queue, 0))
        next_fire = GaugeMetricFamily(
            "runlane_schedule_next_fire_timestamp_seconds",
            "When an unpaused schedule fires next (Unix time).",
            labels=["schedule"],
        )
        for schedule_id, moment in sorted(snap.next_fires.items()):
            next_fire.add_metric([schedule_id], moment.timestamp())
        rate_limited = _per_queue(
            "runlane_queue_rate_limited", "Due runs a rate limit keeps waiting for tokens."
        )
        for queue, parts in _by_queue(snap.queue_stats).items():
            rate_limited.add_metric([queue], sum(p.rate_limited for p in parts))
        paused = _per_queue("runlane_queue_paused", "1 while the queue is paused, else 0.")
        for queue, is_paused in sorted(snap.paused.items()):
            paused.add_metric([queue], 1.0 if is_paused else 0.0)
        yield from (runs, due, oldest, occupied, limit, backlog, next_fire, paused, rate_limited)


def _per_queue(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=["queue"])


def _by_queue(stats: list[QueueStats]) -> dict[str, list[QueueStats]]:
    # Bounded queues report one entry per concurrency key; the gauges sum them.
    grouped: dict[str, list[QueueStats]] = {}
    for entry in stats:
        grouped.setdefault(entry.queue, []).append(entry)
    return grouped
